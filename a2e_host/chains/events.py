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
from .messages import ChainEvent, ChainRequest

__all__ = ["Checkpoint", "CheckpointedEventStream", "Emit", "EventStream", "stream_for"]

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
    """

    __slots__ = ("emit", "req_id", "seq", "streaming", "outputs", "closed")

    def __init__(self, emit: Emit, req_id: str, streaming: bool, outputs: bool = True,
                 *, seq: int = 0) -> None:
        self.emit = emit
        self.req_id = req_id
        self.seq = seq
        self.streaming = streaming
        self.outputs = outputs
        self.closed = False

    def send(self, node_id: str, phase: str, output: Any = None, error: str = "",
             failure: ChainFailure | None = None) -> None:
        """Send one ``chain/event`` (nothing once closed, or when not streaming).

        Args:
            node_id: the display id (``t[3]`` for a map item, ``outer/inner`` in a skill).
            phase: ``start``, ``done``, ``skip`` or ``error``.
            output: the output, for ``done``.
            error: the message, for ``error``.
            failure: the failure, for ``error`` (kept by a durable run's stream).
        """
        if self.closed or not self.streaming:
            return
        self.seq += 1
        self.emit(
            ChainEvent(
                req_id=self.req_id,
                seq=self.seq,
                node_id=node_id,
                phase=phase,
                output=output if self.outputs else None,
                error=error,
            )
        )

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
        self.emit(
            ChainEvent(
                kind=kind,
                req_id=self.req_id,
                data=data,
                seq=self.seq,
                node_id=node_id,
                phase=phase,
                output=output if self.outputs else None,
                error=error,
            )
        )


class CheckpointedEventStream(EventStream):
    """A durable run's :class:`EventStream`: each node's terminal event (``done``,
    ``error``, ``skip``, of ``kind: "status"``) goes through ``checkpoint`` with the
    node's output or failure, so the store keeps them beside the event even when the event
    carries none (PROTOCOL.md §5 Resume); every other event through ``emit``. A run that
    is not durable uses the plain :class:`EventStream` and pays nothing for this.

    Args:
        checkpoint: the run's :data:`Checkpoint`; the rest as :class:`EventStream`.
    """

    __slots__ = ("checkpoint",)

    def __init__(self, emit: Emit, req_id: str, streaming: bool, outputs: bool = True,
                 *, checkpoint: Checkpoint, seq: int = 0) -> None:
        super().__init__(emit, req_id, streaming, outputs, seq=seq)
        self.checkpoint = checkpoint

    def send(self, node_id: str, phase: str, output: Any = None, error: str = "",
             failure: ChainFailure | None = None) -> None:
        # EventStream.send inlined, not called: this is paid on every event of a run
        if self.closed or not self.streaming:
            return
        self.seq += 1
        event = ChainEvent(req_id=self.req_id, seq=self.seq, node_id=node_id, phase=phase,
                           output=output if self.outputs else None, error=error)
        if phase in _TERMINAL:
            self.checkpoint(event, phase, output, failure)
        else:
            self.emit(event)

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
        if kind != "status" or phase not in _TERMINAL:
            super().send_data(node_id, phase, data, kind=kind, output=output, error=error)
        else:
            self._checkpointed(kind, data, node_id, phase, output, error, failure)

    def _checkpointed(self, kind: str, data: dict[str, Any], node_id: str, phase: str,
                      output: Any, error: str, failure: ChainFailure | None) -> None:
        if self.closed or not self.streaming:
            return
        self.seq += 1
        event = ChainEvent(kind=kind, req_id=self.req_id, data=data, seq=self.seq,
                           node_id=node_id, phase=phase,
                           output=output if self.outputs else None, error=error)
        self.checkpoint(event, phase, output, failure)


def stream_for(emit: Emit, request: ChainRequest, checkpoint: Checkpoint | None = None,
               seq: int = 0) -> EventStream:
    """The event stream of one request: a :class:`CheckpointedEventStream` for a durable
    run (``checkpoint``), else a plain :class:`EventStream`; ``seq`` is the last one sent
    before (a resumed run's last stored)."""
    if checkpoint is None:
        return EventStream(emit, request.id, request.streaming, request.event_outputs, seq=seq)
    return CheckpointedEventStream(emit, request.id, request.streaming, request.event_outputs,
                                   checkpoint=checkpoint, seq=seq)
