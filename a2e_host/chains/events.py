"""The per-request ``chain/event`` stream: the one place ``seq`` is stamped.

Layer: runtime (no anyio of its own; the scheduler calls it from the event loop).
Source: PROTOCOL.md §5 (``seq`` 1, 2, 3 … per request, gapless, in wire order; a node's
recovery reported in ``kind`` and ``data``, §5 Recovery).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ChainFailure
from ..messages import Message
from .messages import ChainEvent

__all__ = ["Checkpoint", "Emit", "EventStream"]

Emit = Callable[[Message], None]
"""Hands one message to the connection's outbox; never blocks, never drops."""

Checkpoint = Callable[[ChainEvent, str, Any, "ChainFailure | None"], None]
"""A durable run's emit for a node's terminal event: ``checkpoint(event, phase, output,
failure)`` sends the event and keeps the node's output (``done``) or failure (``error``)
with it, even when the event carries none (PROTOCOL.md §5 Resume); never blocks."""

_TERMINAL = frozenset({"done", "error", "skip"})


class EventStream:
    """Stamps ``seq`` and hands each event to ``emit``, the moment it is sent, so the wire
    order is the ``seq`` order.

    Shared by a chain and the sub-chains its skills run, so ``seq`` stays one gapless
    sequence per request.

    Attributes:
        emit: where every event goes (the one callable the runner was given).
        req_id: the ``chain/req`` id the events carry.
        seq: the last ``seq`` sent (0 before the first event).
        streaming: ``chain/req.streaming``; false sends no event at all.
        outputs: ``chain/req.event_outputs``; false sends ``done`` events' output null.
        closed: set once the ``chain/resp`` is sent: nothing follows it.
        checkpoint: a durable run's :data:`Checkpoint`, through which its terminal events
            go (with the node's output or failure); None (every other run) sends them
            through ``emit`` like any event and keeps nothing.
    """

    __slots__ = ("emit", "req_id", "seq", "streaming", "outputs", "closed", "checkpoint")

    def __init__(
        self,
        emit: Emit,
        req_id: str,
        streaming: bool,
        outputs: bool = True,
        *,
        checkpoint: Checkpoint | None = None,
        seq: int = 0,
    ) -> None:
        self.emit = emit
        self.req_id = req_id
        self.seq = seq
        self.streaming = streaming
        self.outputs = outputs
        self.closed = False
        self.checkpoint = checkpoint

    def send(
        self,
        node_id: str,
        phase: str,
        output: Any = None,
        error: str = "",
        failure: ChainFailure | None = None,
    ) -> None:
        """Send one ``chain/event`` (nothing once closed, or when not streaming).

        Args:
            node_id: the display id (``t[3]`` for a map item, ``outer/inner`` in a skill).
            phase: ``start``, ``done``, ``skip`` or ``error``.
            output: the output, for ``done``.
            error: the message, for ``error``.
            failure: the failure, for ``error`` (kept by a durable run's checkpoint).
        """
        if self.closed or not self.streaming:
            return
        self.seq += 1
        event = ChainEvent(
            req_id=self.req_id,
            seq=self.seq,
            node_id=node_id,
            phase=phase,
            output=output if self.outputs else None,
            error=error,
        )
        checkpoint = self.checkpoint
        if checkpoint is None or phase not in _TERMINAL:
            self.emit(event)
        else:
            checkpoint(event, phase, output, failure)

    def send_data(
        self,
        node_id: str,
        phase: str,
        data: dict[str, Any],
        *,
        kind: str = "status",
        output: Any = None,
        error: str = "",
        failure: ChainFailure | None = None,
    ) -> None:
        """:meth:`send` an event whose A2EEvent fields are not the default ``"status"``
        and ``{}``: a node with recovery fields' ``kind: "progress"`` events and its
        terminal event (PROTOCOL.md §5 Recovery). Every other event goes through
        :meth:`send`, so its bytes are what they always were.

        Args:
            node_id / phase / output / error: as :meth:`send`.
            data: the event's ``data``.
            kind: ``"status"`` or ``"progress"``.
            failure: as :meth:`send`.
        """
        if self.closed or not self.streaming:
            return
        self.seq += 1
        event = ChainEvent(
            kind=kind,
            req_id=self.req_id,
            data=data,
            seq=self.seq,
            node_id=node_id,
            phase=phase,
            output=output if self.outputs else None,
            error=error,
        )
        checkpoint = self.checkpoint
        if checkpoint is None or kind != "status" or phase not in _TERMINAL:
            self.emit(event)
        else:
            checkpoint(event, phase, output, failure)
