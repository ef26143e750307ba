"""What a run did, node by node and in time, folded from its frames: outcomes, start and
end times, failures.

Layer: command support (pure: no I/O, no anyio). ``a2e-host graph --events`` (a file
``a2e-host run --record`` wrote) and ``graph --run`` (a run store's frames) feed it one
encoded frame at a time, in ``seq`` order; the outcomes are
:class:`~a2e_host.commands.run_outcomes.OutcomeFold`'s, this adds the times (each event's
``ts``, float seconds since the epoch, PROTOCOL.md §1) and the failures.

Bounded whatever the run's length: per declared node a few numbers; a map's items
(``<template>[<index>]``) are aggregated under their template (first start, last end, counts
by outcome, the open items in flight); at most :data:`MAX_FAILURES` failures are kept and
the rest counted. A skill's inner nodes (``<outer>/<inner>``) belong to their skill node
and are not folded.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from .run_outcomes import NodeOutcome, OutcomeFold, error_code, event_node

__all__ = ["MAX_DATA_BYTES", "MAX_FAILURES", "MAX_KEPT_MESSAGE_CHARS", "Failure", "RunEnd",
           "RunTrace", "Span", "format_ms"]

MAX_FAILURES = 200
"""Failures kept by default (:attr:`RunTrace.failures`); later ones are only counted."""


MAX_DATA_BYTES = 1024 * 1024
"""The largest ``data`` of an ``error`` event read for its attempts and code (a host's
is a few hundred bytes; a larger one, from a file made by hand, is not read)."""
MAX_KEPT_MESSAGE_CHARS = 4096
"""Characters of a failure's message kept (the page shows fewer)."""


class _Frame(msgspec.Struct):
    """The fields of a ``chain/event`` or ``chain/resp`` this fold reads. ``output`` is
    skipped by the decoder and ``data`` / ``error`` are kept as raw JSON, decoded only
    for a failure: a line's size, not its shape, bounds what it costs."""

    type: str = ""
    seq: int = 0
    ts: float | None = None
    node_id: str = ""
    phase: str = ""
    kind: str = ""
    error: msgspec.Raw = msgspec.Raw(b"")
    data: msgspec.Raw = msgspec.Raw(b"")
    success: bool = False
    duration_ms: int = 0
    chain_id: str = ""


class _Attempt(msgspec.Struct, frozen=True):
    code: str = ""


class _EventData(msgspec.Struct, frozen=True):
    """An ``error`` event's ``data`` (PROTOCOL.md §5 Recovery): attempts and their codes."""

    attempts: int = 1
    errors: list[_Attempt] = []


class _ResponseError(msgspec.Struct, frozen=True):
    code: str = ""
    message: str = ""
    node_id: str = ""


_decoder = msgspec.json.Decoder(_Frame)
_data_decoder = msgspec.json.Decoder(_EventData)
_response_error_decoder = msgspec.json.Decoder(_ResponseError)
_message_decoder = msgspec.json.Decoder(str)


def _decode_or(decoder: msgspec.json.Decoder[Any], raw: msgspec.Raw, default: Any,
               limit: int | None = None) -> Any:
    """``raw`` decoded, or ``default`` when it is absent, larger than ``limit`` bytes or
    not of the decoder's type."""
    if not raw or (limit is not None and len(raw) > limit):
        return default
    try:
        return decoder.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return default


@dataclass(slots=True)
class Span:
    """When a declared node ran (a map template: its items, together).

    Attributes:
        start: ``ts`` of its first ``start`` event, float epoch seconds (None: never
            started, e.g. skipped).
        end: ``ts`` of its last terminal event (None: not ended).
        items: for a template, how many items started.
    """

    start: float | None = None
    end: float | None = None
    items: int = 0


@dataclass(slots=True, frozen=True)
class Failure:
    """One ``error`` event (or the response's error when no node event carries it).

    Attributes:
        node_id: the event's node id (a map item as ``t[3]``); ``""`` for the chain.
        code: the error code (kept failure, ``data.code``, the last attempt's code, or the
            response's when it names this node); ``""`` when nothing says.
        message: the event's ``error`` text (its first :data:`MAX_KEPT_MESSAGE_CHARS`).
        attempts: how many times the node was tried (``data.attempts``, else 1).
        ts: the event's ``ts``.
    """

    node_id: str
    code: str
    message: str
    attempts: int
    ts: float


@dataclass(slots=True, frozen=True)
class RunEnd:
    """The ``chain/resp``: ``success``, its error's ``code`` / ``message`` / ``node_id``,
    ``duration_ms`` and ``ts``."""

    success: bool
    code: str
    message: str
    node_id: str
    duration_ms: int
    ts: float


@dataclass(slots=True)
class RunTrace:
    """Fold a run's frames into outcomes, spans and failures.

    Example::

        trace = RunTrace()
        for line in open("run.ndjson", "rb"):
            trace.add_frame(line)
        trace.outcomes()            # {"a": NodeOutcome("done", duration_ms=12.0), …}

    Attributes:
        declared: the chain's node ids, when known (an event's id declared as written is
            that node's, not a map item or a skill's inner node:
            :func:`~a2e_host.commands.run_outcomes.event_node`).
        spans: declared node id (or template id) → its :class:`Span`.
        failures: the first ``max_failures`` failures, in ``seq`` order.
        failures_left_out: how many more there were.
        end: the response, once folded (None: the run had not ended, or its response
            was not recorded).
        frames: frames folded; first_ts / last_ts: the earliest and latest ``ts`` seen.
        seq_gaps: how many times a frame's ``seq`` skipped past the previous one's + 1.
        seq_disorder: how many frames came with a ``seq`` not above the previous one's.
        repeated_ends: terminal events of a declared node that had ended already.
        responses: ``chain/resp`` frames folded (a run has one; the last is kept).
        cut_line: the number of an events file's last line, left out because it was
            half written (:func:`~a2e_host.commands.graph_events.read_events`); 0: none.
    """

    max_failures: int = MAX_FAILURES
    spans: dict[str, Span] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    failures_left_out: int = 0
    end: RunEnd | None = None
    frames: int = 0
    first_ts: float | None = None
    last_ts: float | None = None
    seq_gaps: int = 0
    seq_disorder: int = 0
    repeated_ends: int = 0
    responses: int = 0
    cut_line: int = 0
    declared: frozenset[str] = frozenset()
    _fold: OutcomeFold = field(init=False)
    _seq: int = 0
    _failed_nodes: set[str] = field(default_factory=set)
    _ended: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._fold = OutcomeFold(self.declared)

    def add_frame(self, frame: bytes, failure: bytes | None = None) -> None:
        """Take one encoded frame (a ``chain/event`` or the ``chain/resp``; any other type
        is ignored).

        Args:
            frame: the frame's JSON.
            failure: what a run store kept with an ``error`` event (its encoded failure,
                :attr:`~a2e_host.store.StoredFrame.output`), read for the code.

        Raises:
            ValueError: ``frame`` is not a JSON object with these fields' types (the
                message says what the decoder found).
        """
        try:
            view = _decoder.decode(frame)
        except msgspec.DecodeError as exc:
            raise ValueError(str(exc)) from None
        except RecursionError:
            raise ValueError("its JSON is nested too deeply") from None
        if view.type == "chain/resp":
            self._take_response(view)
            return
        if view.type != "chain/event":
            return
        self.frames += 1
        if view.seq <= self._seq:
            self.seq_disorder += 1
        elif view.seq != self._seq + 1:
            self.seq_gaps += 1
        self._seq = view.seq
        ts = view.ts
        if ts is not None:
            self.first_ts = ts if self.first_ts is None else min(self.first_ts, ts)
            self.last_ts = ts if self.last_ts is None else max(self.last_ts, ts)
        node_id, phase = view.node_id, view.phase
        self._fold.add(node_id, phase, frame, failure)
        key = event_node(node_id, self.declared)
        if key is None or phase not in ("start", "done", "skip", "error"):
            return
        declared, item = key
        span = self.spans.get(declared)
        if span is None:
            span = self.spans[declared] = Span()
        if phase == "start":
            if ts is not None and (span.start is None or ts < span.start):
                span.start = ts
            if item and view.kind != "progress":
                span.items += 1
        else:
            if not item:
                if declared in self._ended:
                    self.repeated_ends += 1
                self._ended.add(declared)
            if ts is not None and (phase != "skip" or span.start is not None):
                span.end = ts if span.end is None else max(span.end, ts)
        if phase == "error":
            self._take_failure(view, frame, failure, declared)

    def _take_failure(self, view: _Frame, frame: bytes, failure: bytes | None,
                      declared: str) -> None:
        self._failed_nodes.add(declared)
        if len(self.failures) >= self.max_failures:
            self.failures_left_out += 1
            return
        data: _EventData = _decode_or(_data_decoder, view.data, _EventData(),
                                      MAX_DATA_BYTES)
        code = error_code(frame, failure) or (data.errors[-1].code if data.errors else "")
        message: str = _decode_or(_message_decoder, view.error, "")
        self.failures.append(Failure(
            node_id=view.node_id, code=code, message=message[:MAX_KEPT_MESSAGE_CHARS],
            attempts=data.attempts if data.attempts > 0 else 1,
            ts=view.ts if view.ts is not None else 0.0))

    def _take_response(self, view: _Frame) -> None:
        self.responses += 1
        error: _ResponseError = _decode_or(_response_error_decoder, view.error,
                                           _ResponseError())
        code, node_id = error.code, error.node_id
        message = error.message[:MAX_KEPT_MESSAGE_CHARS]
        self.end = RunEnd(success=view.success, code=code, message=message,
                          node_id=node_id, duration_ms=view.duration_ms,
                          ts=view.ts if view.ts is not None else 0.0)
        if view.ts is not None:
            self.last_ts = view.ts if self.last_ts is None else max(self.last_ts, view.ts)
            self.first_ts = self.first_ts if self.first_ts is not None else view.ts
        # the code of the node that failed the chain, where its event had none
        for i, kept in enumerate(self.failures):
            if not kept.code and code and kept.node_id == node_id:
                self.failures[i] = Failure(kept.node_id, code, kept.message, kept.attempts,
                                           kept.ts)
        if not view.success and code and (
                not node_id or node_id not in self._failed_nodes):
            # a failure no node event carries (a timeout, a cancel, a refusal)
            if len(self.failures) < self.max_failures:
                self.failures.append(Failure(node_id, code, message, 1,
                                             self.end.ts))
            else:
                self.failures_left_out += 1

    def undeclared(self, declared: Iterable[str]) -> list[str]:
        """The node ids the events name (a map item by its template) that ``declared``
        does not hold, in the order first seen: events recorded from another chain than
        the one they are drawn on."""
        known = set(declared)
        return [node_id for node_id in self.spans if node_id not in known]

    def outcomes(self, *, run_running: bool | None = None) -> dict[str, NodeOutcome]:
        """Each node with an event, by declared node id, with its duration.

        Args:
            run_running: whether the run is still going (a started, unended node is then
                ``running``, else ``interrupted``); None: still going unless the
                ``chain/resp`` was folded.

        Returns:
            :meth:`OutcomeFold.outcomes`, each with ``duration_ms`` (float milliseconds
            from its first start to its last end) where both are known.
        """
        running = self.end is None if run_running is None else run_running
        out = self._fold.outcomes(run_running=running)
        for node_id, outcome in out.items():
            span = self.spans.get(node_id)
            if span is not None and span.start is not None and span.end is not None:
                outcome.duration_ms = max(0.0, (span.end - span.start) * 1000.0)
        return out


def format_ms(ms: float) -> str:
    """A duration for a person: ``0.4 ms``, ``12 ms``, ``1.25 s``, ``3 min 4 s``,
    ``2 h 5 min``, ``3.2 d``; ``?`` when it is not a number (the events' times were
    not). Never longer than a few characters, whatever ``ms``."""
    if not math.isfinite(ms):
        return "?"
    if ms < 0:
        return "-" + format_ms(-ms)
    if ms < 10:
        return f"{ms:.1f} ms"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.2f} s"
    if ms < 3_600_000:
        minutes, seconds = divmod(int(ms // 1000), 60)
        return f"{minutes} min {seconds} s"
    if ms < 86_400_000:
        hours, minutes = divmod(int(ms // 60_000), 60)
        return f"{hours} h {minutes} min"
    return f"{ms / 86_400_000:,.1f} d" if ms < 1e14 else f"{ms / 86_400_000:.3g} d"
