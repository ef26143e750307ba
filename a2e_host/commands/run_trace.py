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

from dataclasses import dataclass, field
from typing import Any

import msgspec

from .run_outcomes import NodeOutcome, OutcomeFold, error_code

__all__ = ["MAX_FAILURES", "Failure", "RunEnd", "RunTrace", "Span", "format_ms"]

MAX_FAILURES = 200
"""Failures kept by default (:attr:`RunTrace.failures`); later ones are only counted."""


class _Frame(msgspec.Struct):
    """The fields of a ``chain/event`` or ``chain/resp`` this fold reads (``output`` is
    skipped by the decoder, however large)."""

    type: str = ""
    seq: int = 0
    ts: float = 0.0
    node_id: str = ""
    phase: str = ""
    kind: str = ""
    error: Any = None
    data: Any = None
    success: bool = False
    duration_ms: int = 0
    chain_id: str = ""


_decoder = msgspec.json.Decoder(_Frame)


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
        message: the event's ``error`` text.
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
        spans: declared node id (or template id) → its :class:`Span`.
        failures: the first ``max_failures`` failures, in ``seq`` order.
        failures_left_out: how many more there were.
        end: the response, once folded (None: the run had not ended, or its response
            was not recorded).
        frames: frames folded; first_ts / last_ts: the earliest and latest ``ts`` seen.
        seq_gaps: how many times a frame's ``seq`` was not the previous one's + 1.
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
    _fold: OutcomeFold = field(default_factory=OutcomeFold)
    _seq: int = 0
    _failed_nodes: set[str] = field(default_factory=set)

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
        if view.type == "chain/resp":
            self._take_response(view)
            return
        if view.type != "chain/event":
            return
        self.frames += 1
        if view.seq != self._seq + 1:
            self.seq_gaps += 1
        self._seq = view.seq
        ts = view.ts
        self.first_ts = ts if self.first_ts is None else min(self.first_ts, ts)
        self.last_ts = ts if self.last_ts is None else max(self.last_ts, ts)
        node_id, phase = view.node_id, view.phase
        self._fold.add(node_id, phase, frame, failure)
        if not node_id or "/" in node_id or phase not in ("start", "done", "skip", "error"):
            return
        bracket = node_id.find("[")
        declared = node_id[:bracket] if bracket > 0 else node_id
        span = self.spans.get(declared)
        if span is None:
            span = self.spans[declared] = Span()
        if phase == "start":
            if span.start is None or ts < span.start:
                span.start = ts
            if bracket > 0 and view.kind != "progress":
                span.items += 1
        elif phase != "skip" or span.start is not None:
            span.end = ts if span.end is None else max(span.end, ts)
        if phase == "error":
            self._take_failure(view, frame, failure)

    def _take_failure(self, view: _Frame, frame: bytes, failure: bytes | None) -> None:
        bracket = view.node_id.find("[")
        self._failed_nodes.add(view.node_id[:bracket] if bracket > 0 else view.node_id)
        if len(self.failures) >= self.max_failures:
            self.failures_left_out += 1
            return
        data = view.data if isinstance(view.data, dict) else {}
        code = error_code(frame, failure) or _last_attempt_code(data)
        attempts = data.get("attempts")
        self.failures.append(Failure(
            node_id=view.node_id, code=code,
            message=view.error if isinstance(view.error, str) else "",
            attempts=attempts if isinstance(attempts, int) and attempts > 0 else 1,
            ts=view.ts))

    def _take_response(self, view: _Frame) -> None:
        error = view.error if isinstance(view.error, dict) else {}
        code, message, node_id = (str(error.get(k) or "") for k in ("code", "message",
                                                                     "node_id"))
        self.end = RunEnd(success=view.success, code=code, message=message,
                          node_id=node_id, duration_ms=view.duration_ms, ts=view.ts)
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
                self.failures.append(Failure(node_id, code, message, 1, view.ts))
            else:
                self.failures_left_out += 1

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


def _last_attempt_code(data: dict[str, Any]) -> str:
    """A recovered node's last attempt's code (``data.errors[-1].code``), else ``""``."""
    errors = data.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[-1], dict):
        code = errors[-1].get("code")
        if isinstance(code, str):
            return code
    return ""


def format_ms(ms: float) -> str:
    """A duration for a person: ``0.4 ms``, ``12 ms``, ``1.25 s``, ``3 min 4 s``."""
    if ms < 10:
        return f"{ms:.1f} ms"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.2f} s"
    minutes, seconds = divmod(int(ms // 1000), 60)
    return f"{minutes} min {seconds} s"
