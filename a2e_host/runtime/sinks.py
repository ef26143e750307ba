"""A run's event sink: :class:`RunSink`, and where its frames go (:class:`FrameOutbox`).

Layer: runtime. Re-exported by :mod:`a2e_host.runtime.runs`, whose :class:`~a2e_host.
runtime.runs.Run` owns one sink; a durable run's is a subclass
(:class:`a2e_host.runtime.durable.DurableSink`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..codec import encode_message
from ..messages import Message

__all__ = ["Append", "FrameOutbox", "RunSink"]

Append = Callable[[int, bytes], None]
"""``append(position, frame)``: called with every frame a run emits, before it leaves."""


class FrameOutbox(Protocol):
    """Where an attached run's frames go: a connection's
    :class:`~a2e_host.runtime.outbox.Outbox`.

    Attributes:
        full: above its high-water mark (:meth:`wait_writable` would wait).
    """

    full: bool

    def send_frame_nowait(self, frame: bytes) -> None: ...

    async def wait_writable(self) -> None: ...


class RunSink:
    """A run's event sink (implements :class:`~a2e_host.plugin.Outbox`): encodes each
    message once, counts it, hands it to ``append``, then to the attached outbox.

    Args:
        append: called with ``(position, frame)`` for every frame before it is emitted
            (a store's hook); None keeps nothing.

    Attributes:
        position: frames this run has emitted so far (attached or not). For a chain the
            n-th frame is the event with ``seq`` n, its ``chain/resp`` the last one.
    """

    __slots__ = ("position", "append", "_outbox")

    def __init__(self, append: Append | None = None) -> None:
        self.position = 0
        self.append = append
        self._outbox: FrameOutbox | None = None

    @property
    def attached(self) -> bool:
        """Whether an outbox receives the frames now."""
        return self._outbox is not None

    def attach(self, outbox: FrameOutbox, *, after: int | None = None) -> None:
        """Send the frames from now on to ``outbox``.

        Args:
            outbox: the attaching connection's outbox.
            after: the last position the attaching side has seen; None (or the current
                position) resumes with the next frame. Nothing earlier is kept without a
                store, so any other value is refused.

        Raises:
            RuntimeError: another outbox is attached.
            ValueError: ``after`` asks for frames this sink does not keep.
        """
        if self._outbox is not None:
            raise RuntimeError("the run is attached to another connection; detach it first")
        if after is not None and after != self.position:
            raise ValueError(
                f"frames after position {after} are not kept (the run is at "
                f"{self.position} and has no store); attach with after={self.position}"
            )
        self._outbox = outbox

    def detach(self) -> None:
        """Stop sending frames anywhere (they are still counted and appended)."""
        self._outbox = None

    def attached_to(self, outbox: FrameOutbox) -> bool:
        """Whether ``outbox`` is the one receiving the frames now."""
        return self._outbox is outbox

    def send_nowait(self, message: Message) -> None:
        """Emit one message: encoded, counted, appended, then queued on the attached
        outbox (dropped when none is attached). Never blocks."""
        frame = encode_message(message)
        self.position += 1
        if self.append is not None:
            self.append(self.position, frame)
        outbox = self._outbox
        if outbox is not None:
            outbox.send_frame_nowait(frame)

    async def wait_writable(self) -> None:
        """Wait while the attached outbox is over its high-water mark (at once when
        detached: nobody is slowed by a reader that is not there)."""
        outbox = self._outbox
        if outbox is not None and outbox.full:
            await outbox.wait_writable()
