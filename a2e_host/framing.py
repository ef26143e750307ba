"""NDJSON framing for the stdio transport, sans-I/O (PROTOCOL.md §1, §6, §8).

Layer: core (no I/O, no anyio, no clock); imports nothing from the package.

Theory of operation: bytes go in with :meth:`LineSplitter.receive_data`, in chunks of
any size; complete lines, or :class:`LineTooLong` markers, come out, in input order.
Only ``\\n`` (0x0A) ends a line: U+2028 / U+2029 are multi-byte UTF-8 sequences without
that byte, so they never split a message. One ``\\r`` right before the ``\\n`` is
dropped (CRLF input); lines holding only JSON whitespace are ignored. A line longer
than the cap is never held in memory: its bytes are counted and dropped, and one
:class:`LineTooLong` is reported when its ``\\n`` arrives (or at :meth:`close`), so the
result is the same however the input is chunked.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LineSplitter", "LineTooLong"]

_BLANK = b" \t\r"


@dataclass(frozen=True, slots=True)
class LineTooLong:
    """A line exceeded the cap and was dropped; answer it with ``message_too_large``.

    Attributes:
        size: the line's length in bytes, without its ``\\n`` or a ``\\r`` before it.
        limit: the cap in bytes (``max_line_bytes``).
    """

    size: int
    limit: int


class LineSplitter:
    """Split a byte stream into NDJSON lines of at most ``max_line_bytes`` bytes.

    Memory held is at most ``max_line_bytes + 1`` bytes of a pending line, whatever the
    input: a longer line is counted, not kept, and the splitter resynchronises at the
    next ``\\n``.

    Args:
        max_line_bytes: the cap per line in bytes, excluding the ``\\n`` and a ``\\r``
            before it; the session's ``max_message_bytes`` (PROTOCOL.md §6).

    Raises:
        ValueError: ``max_line_bytes`` is not positive.
    """

    def __init__(self, max_line_bytes: int) -> None:
        if max_line_bytes <= 0:
            raise ValueError(f"max_line_bytes must be a positive int, got {max_line_bytes!r}")
        self.max_line_bytes = max_line_bytes
        self._buf = bytearray()
        self._dropped = 0  # > 0: bytes of an over-long line seen so far (nothing kept)
        self._dropped_cr = False  # whether the last dropped byte was '\r'

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[bytes | LineTooLong]:
        """Feed bytes; return what they complete.

        Args:
            data: the next chunk of the stream, any length (empty is fine).

        Returns:
            Complete lines without their ``\\r\\n`` / ``\\n`` (never blank), and a
            :class:`LineTooLong` for each over-long line, in stream order. A line with
            no ``\\n`` yet stays pending.
        """
        data = bytes(data)
        out: list[bytes | LineTooLong] = []
        start, n = 0, len(data)
        cap = self.max_line_bytes + 1  # room for a '\r' before the '\n'
        while start < n:
            nl = data.find(b"\n", start)
            end = n if nl < 0 else nl
            if self._dropped or len(self._buf) + (end - start) > cap:
                if not self._dropped:
                    self._dropped = len(self._buf)
                    self._buf.clear()
                self._dropped += end - start
                if end > start:
                    self._dropped_cr = data[end - 1] == 0x0D
                if nl < 0:
                    return out
                out.append(self._too_long())
            elif nl < 0:
                self._buf += data[start:]
                return out
            elif self._buf:
                self._buf += data[start:nl]
                line = bytes(self._buf)
                self._buf.clear()
                self._emit(line, out)
            else:
                self._emit(data[start:nl], out)
            start = end + 1
        return out

    def close(self) -> list[bytes | LineTooLong]:
        """End of input: return a last line that had no ``\\n`` (or its refusal), if any.

        The splitter is empty afterwards and may be fed again.
        """
        out: list[bytes | LineTooLong] = []
        if self._dropped:
            out.append(self._too_long())
        elif self._buf:
            line = bytes(self._buf)
            self._buf.clear()
            self._emit(line, out)
        return out

    def _too_long(self) -> LineTooLong:
        size = self._dropped - (1 if self._dropped_cr else 0)
        self._dropped = 0
        self._dropped_cr = False
        return LineTooLong(size=size, limit=self.max_line_bytes)

    def _emit(self, line: bytes, out: list[bytes | LineTooLong]) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if len(line) > self.max_line_bytes:
            out.append(LineTooLong(size=len(line), limit=self.max_line_bytes))
        elif line.strip(_BLANK):
            out.append(line)
