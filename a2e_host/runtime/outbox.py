"""The outgoing frame queue of one connection (implements :class:`~a2e_host.plugin.Outbox`).

Layer: runtime (anyio). Producers (the dispatcher, chains) call :meth:`Outbox.send_nowait`,
which encodes and queues at once: it never blocks and never drops, so a response can
always be queued, even from cleanup code. Producers that can produce without bound call
``await wait_writable()`` at safe points: it waits while more than ``high_water`` frames,
or more than ``high_water_bytes`` bytes, are queued, so a slow reader slows them down
instead of growing memory (a frame count alone would let a few thousand 1 MiB events
queue up). One writer task
per connection drains the queue to the transport in batches, in order.
"""

from __future__ import annotations

from collections import deque

import anyio

from ..codec import encode_message
from ..messages import Message

__all__ = ["Outbox"]


class Outbox:
    """A FIFO of encoded frames with a high-water mark.

    Args:
        high_water: queued frames above which :meth:`wait_writable` waits (> 0).
        high_water_bytes: queued bytes above which :meth:`wait_writable` waits (> 0).
    """

    def __init__(self, high_water: int, high_water_bytes: int = 8 * 1024 * 1024) -> None:
        if high_water <= 0:
            raise ValueError("outbox high_water must be > 0")
        if high_water_bytes <= 0:
            raise ValueError("outbox high_water_bytes must be > 0")
        self.high_water = high_water
        self.high_water_bytes = high_water_bytes
        self._bytes = 0
        self._frames: deque[bytes] = deque()
        self._sending = 0
        self._closed = False
        self._not_empty = anyio.Event()
        self._writable = anyio.Event()
        self._writable.set()
        self._flushed = anyio.Event()
        self._flushed.set()

    def __len__(self) -> int:
        """Frames queued and not yet taken by the writer."""
        return len(self._frames)

    @property
    def queued_bytes(self) -> int:
        """Bytes of the frames queued and not yet taken by the writer."""
        return self._bytes

    def _full(self) -> bool:
        return len(self._frames) > self.high_water or self._bytes > self.high_water_bytes

    @property
    def closed(self) -> bool:
        return self._closed

    def send_nowait(self, message: Message) -> None:
        """Encode ``message`` (:func:`~a2e_host.codec.encode_message`) and queue it.

        Never blocks, never drops while open. After :meth:`close` the frame is discarded:
        the connection is gone and nobody can receive it.
        """
        self.send_frame_nowait(encode_message(message))

    def send_frame_nowait(self, frame: bytes) -> None:
        """Queue an already encoded frame (one JSON message, no newline)."""
        if self._closed:
            return
        self._frames.append(frame)
        self._bytes += len(frame)
        self._not_empty.set()
        if self._flushed.is_set():
            self._flushed = anyio.Event()
        if self._writable.is_set() and self._full():
            self._writable = anyio.Event()

    async def wait_writable(self) -> None:
        """Wait while more than ``high_water`` frames or ``high_water_bytes`` bytes are
        queued (returns at once after :meth:`close`, so producers never hang on a dead
        connection)."""
        while self._full() and not self._closed:
            await self._writable.wait()

    async def receive_batch(self, max_frames: int = 256) -> list[bytes]:
        """Writer side: wait for frames and take up to ``max_frames`` of them, in order.

        Call :meth:`batch_sent` once they are written.

        Raises:
            anyio.EndOfStream: the outbox is closed and empty.
        """
        while not self._frames:
            if self._closed:
                raise anyio.EndOfStream
            if self._not_empty.is_set():
                self._not_empty = anyio.Event()
            await self._not_empty.wait()
        count = min(max_frames, len(self._frames))
        batch = [self._frames.popleft() for _ in range(count)]
        self._bytes -= sum(len(frame) for frame in batch)
        self._sending += count
        if not self._full():
            self._writable.set()
        return batch

    def batch_sent(self, count: int) -> None:
        """Writer side: ``count`` frames taken by :meth:`receive_batch` are written."""
        self._sending -= count
        if not self._frames and self._sending <= 0:
            self._sending = 0
            self._flushed.set()

    async def wait_flushed(self) -> None:
        """Wait until every queued frame has been written by the writer."""
        while self._frames or self._sending:
            await self._flushed.wait()

    def close(self) -> None:
        """Refuse further frames; the writer ends once the queue is drained. Idempotent."""
        self._closed = True
        self._not_empty.set()
        self._writable.set()
