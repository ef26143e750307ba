"""Each node's outcome in a stored run, folded from its ``chain/event`` frames.

Layer: command support (pure: no I/O, no anyio). ``a2e-host graph --run`` colours a chain's
nodes with it; the frames come from a run store (:mod:`a2e_host.store`), one at a time, so
memory is bounded by the nodes in flight, not by the events (a map of 100,000 items keeps
counters, not items).

Outcomes (:data:`OUTCOMES`), from the events' ``phase`` (PROTOCOL.md §5):

- ``done`` — a ``done`` event; ``skipped`` — a ``skip`` event;
- ``error`` — an ``error`` event; ``interrupted`` when its code is ``interrupted`` (a node
  cut off by a restart that could not re-run it): the code of the failure a durable run
  keeps with the event (:attr:`~a2e_host.store.StoredFrame.output`, ``{code, message,
  …}``), else the event's ``data.code``;
- ``running`` — a ``start`` and no terminal event, while the run is still ``running``;
  ``interrupted`` when the run has ended (or stopped with the host) without one.

A node with no event at all (not reached, or cancelled before it started) has no outcome.
Map items (``<template>[<index>]``) are counted under their template, whose outcome is
the most pressing of its items' (``running`` > ``interrupted`` > ``error`` > ``done`` >
``skipped``). Inner nodes of a skill (``<outer>/<inner>``) belong to their skill node,
which has events of its own, and are not folded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field

import msgspec

__all__ = ["OUTCOMES", "NodeOutcome", "OutcomeFold", "error_code", "event_node"]

OUTCOMES = ("done", "error", "skipped", "running", "interrupted")
"""Every outcome, in the order the drawing declares their classes."""

_RANK = {"running": 5, "interrupted": 4, "error": 3, "done": 2, "skipped": 1}
_TERMINAL = {"done": "done", "skip": "skipped", "error": "error"}
INTERRUPTED_CODE = "interrupted"


class _DataCode(msgspec.Struct, frozen=True):
    code: str = ""


class _ErrorData(msgspec.Struct):
    data: _DataCode = _DataCode()


class _Failure(msgspec.Struct):
    code: str = ""


_error_decoder = msgspec.json.Decoder(_ErrorData)
_failure_decoder = msgspec.json.Decoder(_Failure)


@dataclass(slots=True)
class NodeOutcome:
    """One declared node's outcome.

    Attributes:
        outcome: one of :data:`OUTCOMES`.
        items: for a map's template, how many items ended in each outcome (``running``
            and ``interrupted`` included); empty for any other node.
        duration_ms: float milliseconds from its first ``start`` to its last terminal
            event (a template: its items'), when the events' times were folded
            (:class:`~a2e_host.commands.run_trace.RunTrace`); None when not known.
    """

    outcome: str
    items: Counter[str] = field(default_factory=Counter)
    duration_ms: float | None = None


@dataclass(slots=True)
class _Items:
    ended: Counter[str] = field(default_factory=Counter)
    open: set[str] = field(default_factory=set)


class OutcomeFold:
    """Fold a run's frames, in ``seq`` order, into each node's outcome.

    Example::

        fold = OutcomeFold()
        for f in frames:
            fold.add(f.node_id, f.phase, f.frame)
        fold.outcomes(run_running=False)   # {"a": NodeOutcome("done"), ...}
    """

    __slots__ = ("_declared", "_last", "_items")

    def __init__(self, declared: Collection[str] = ()) -> None:
        """``declared``: the chain's node ids, when known: an id declared as written
        (``a/b``, ``a[1]``) is that node's, not a skill's inner node or a map item."""
        self._declared = frozenset(declared)
        self._last: dict[str, str] = {}  # declared node id -> "start" or an outcome
        self._items: dict[str, _Items] = {}  # template id -> its items' counts

    def add(self, node_id: str, phase: str, frame: bytes = b"",
            output: bytes | None = None) -> None:
        """Take one stored frame.

        Args:
            node_id: the event's ``node_id`` (``""`` for the ``chain/resp``: ignored).
            phase: ``start``, ``done``, ``skip`` or ``error``; anything else is ignored.
            frame: the encoded frame; read only for an ``error`` event without a kept
                failure (its ``data.code``).
            output: what the store kept with the frame: for an ``error`` event, its
                encoded failure (``{code, …}``), read for the code; else ignored.
        """
        key = event_node(node_id, self._declared)
        if key is None:
            return
        if phase == "start":
            state = "start"
        elif phase in _TERMINAL:
            state = _TERMINAL[phase]
            if state == "error" and error_code(frame, output) == INTERRUPTED_CODE:
                state = "interrupted"
        else:
            return
        declared, item = key
        if not item:
            self._last[declared] = state
            return
        items = self._items.setdefault(declared, _Items())
        if state == "start":
            items.open.add(node_id)
        else:
            items.open.discard(node_id)
            items.ended[state] += 1

    def outcomes(self, *, run_running: bool) -> dict[str, NodeOutcome]:
        """Each node with an event, by declared node id.

        Args:
            run_running: whether the run is still ``running`` (a node started and not
                ended is then ``running``, else ``interrupted``).
        """
        unended = "running" if run_running else "interrupted"
        out = {node_id: NodeOutcome(unended if state == "start" else state)
               for node_id, state in self._last.items()}
        for template, items in self._items.items():
            counts = Counter(items.ended)
            if items.open:
                counts[unended] += len(items.open)
            ranked = max(counts, key=lambda k: _RANK[k], default="")
            if ranked:
                out[template] = NodeOutcome(ranked, +counts)
        return out


def event_node(node_id: str, declared: Collection[str] = ()) -> tuple[str, bool] | None:
    """The declared node an event's ``node_id`` belongs to, and whether the event is one of
    its map items (``<template>[<index>]``); None for no node (``""``) or a skill's inner
    node (``<outer>/<inner>``). An id ``declared`` holds as written is its own node."""
    if not node_id:
        return None
    if node_id in declared:
        return node_id, False
    if "/" in node_id:
        return None
    if declared:  # the template is the longest declared id before an index
        candidate = node_id
        while candidate.endswith("]") and "[" in candidate:
            candidate = candidate[:candidate.rfind("[")]
            if candidate in declared:
                return candidate, True
    bracket = node_id.find("[")
    return (node_id[:bracket], True) if bracket > 0 else (node_id, False)


def error_code(frame: bytes, failure: bytes | None = None) -> str:
    """An ``error`` event's code: its kept failure's ``code`` (``failure``, the stored
    frame's ``output``), else the frame's ``data.code``; ``""`` when neither says."""
    try:
        if failure:
            code: object = _failure_decoder.decode(failure).code
            if code:
                return str(code)
        if not frame:
            return ""
        return _error_decoder.decode(frame).data.code
    except (msgspec.DecodeError, RecursionError):  # not a string code; nested too deep
        return ""
