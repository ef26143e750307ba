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
from ..telemetry import metrics

__all__ = ["Outbox"]


class Outbox:
    """A FIFO of encoded frames with a high-water mark.

    Queuing a frame is a deque append and two comparisons: the events a waiter needs
    are made only when someone waits (the writer for frames, a producer above the mark,
    the closer for the flush), so a chain emitting twenty thousand events does not make
    twenty thousand of them.

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
        self.full = False
        """Above the high-water mark (frames or bytes): producers wait in
        :meth:`wait_writable`. Kept current as frames come and go, so a producer can
        check it without a call."""
        self._not_empty: anyio.Event | None = None  # the writer waits for frames
        self._writable: anyio.Event | None = None  # producers wait: above the mark
        self._flushed: anyio.Event | None = None  # someone waits for the flush

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

    @property
    def flooded(self) -> bool:
        """Over four times the high-water mark: more than producers that wait at the mark
        can add, so what fills it is replies to a peer that writes and does not read
        (the reader then stops reading until the writer drains to the mark)."""
        return (len(self._frames) > 4 * self.high_water
                or self._bytes > 4 * self.high_water_bytes)

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
        frames = self._frames
        frames.append(frame)
        self._bytes += len(frame)
        if not self.full and (len(frames) > self.high_water
                              or self._bytes > self.high_water_bytes):
            self.full = True
        waiting = self._not_empty
        if waiting is not None:
            self._not_empty = None
            waiting.set()

    async def wait_writable(self) -> None:
        """Wait while more than ``high_water`` frames or ``high_water_bytes`` bytes are
        queued (returns at once after :meth:`close`, so producers never hang on a dead
        connection)."""
        while self.full and not self._closed:
            metrics.backpressure_wait()
            if self._writable is None:
                self._writable = anyio.Event()
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
            if self._not_empty is None:
                self._not_empty = anyio.Event()
            await self._not_empty.wait()
        frames = self._frames
        if len(frames) <= max_frames:  # all of them: no per-frame work
            batch = list(frames)
            frames.clear()
            self._bytes = 0
        else:
            batch = [frames.popleft() for _ in range(max_frames)]
            self._bytes -= sum(map(len, batch))
        self._sending += len(batch)
        if self.full and not self._full():
            self.full = False
            writable = self._writable
            if writable is not None:
                self._writable = None
                writable.set()
        return batch

    def batch_sent(self, count: int) -> None:
        """Writer side: ``count`` frames taken by :meth:`receive_batch` are written."""
        self._sending -= count
        if not self._frames and self._sending <= 0:
            self._sending = 0
            flushed = self._flushed
            if flushed is not None:
                self._flushed = None
                flushed.set()

    async def wait_flushed(self) -> None:
        """Wait until every queued frame has been written by the writer."""
        while self._frames or self._sending:
            if self._flushed is None:
                self._flushed = anyio.Event()
            await self._flushed.wait()

    def close(self) -> None:
        """Refuse further frames; the writer ends once the queue is drained. Idempotent."""
        self._closed = True
        self.full = False
        for waiting in (self._not_empty, self._writable):
            if waiting is not None:
                waiting.set()
        self._not_empty = self._writable = None
