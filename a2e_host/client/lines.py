"""Lines from a byte stream: a child's NDJSON stdout, or its log on stderr.

Layer: client (anyio). The splitting is :class:`~a2e_host.framing.LineSplitter`'s (the
host's stdio transport splits its input with it too); this adds only the reading loop.
"""

from __future__ import annotations

from collections import deque

import anyio
from anyio.abc import ByteReceiveStream

from ..framing import LineSplitter, LineTooLong

__all__ = ["LineReader"]


class LineReader:
    """Reads a byte stream line by line (PROTOCOL.md §1 framing).

    Args:
        stream: the bytes, e.g. a child process's stdout.
        max_line_bytes: the longest line kept, bytes; a longer one is reported as one
            :class:`~a2e_host.framing.LineTooLong` and dropped.

    :meth:`receive` gives each line as bytes (or its refusal); ``async for text in
    reader`` gives the lines that fit, decoded as UTF-8 with U+FFFD for invalid bytes,
    until the stream ends (for a log).
    """

    def __init__(self, stream: ByteReceiveStream, max_line_bytes: int) -> None:
        self._stream = stream
        self._splitter = LineSplitter(max_line_bytes)
        self._pending: deque[bytes | LineTooLong] = deque()
        self._eof = False

    async def receive(self) -> bytes | LineTooLong:
        """The next line, without its ``\\n`` (blank lines are skipped), or the refusal of
        one too long; a last line without ``\\n`` comes when the stream ends.

        Raises:
            anyio.EndOfStream: every line has been read and the stream has ended (EOF, or
                closed or broken: the two are not told apart).
        """
        while not self._pending:
            if self._eof:
                raise anyio.EndOfStream
            try:
                chunk = await self._stream.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._eof = True
                self._pending.extend(self._splitter.close())
            else:
                self._pending.extend(self._splitter.receive_data(chunk))
        return self._pending.popleft()

    def __aiter__(self) -> LineReader:
        return self

    async def __anext__(self) -> str:
        """The next line that fit, decoded (see the class)."""
        while True:
            try:
                line = await self.receive()
            except anyio.EndOfStream:
                raise StopAsyncIteration from None
            if isinstance(line, bytes):
                return line.decode("utf-8", "replace")
