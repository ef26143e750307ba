"""NDJSON framing for the stdio transport, sans-I/O.

Layer: core (no I/O). Bytes go in with :meth:`LineSplitter.receive_data`; complete
lines, or :class:`LineTooLong` markers, come out. Only ``\\n`` ends a line, so U+2028 /
U+2029 inside JSON strings never split a message; a ``\\r`` before it is dropped; blank
lines are ignored. Source: PROTOCOL.md §1 (stdio framing).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LineSplitter", "LineTooLong"]


@dataclass(frozen=True, slots=True)
class LineTooLong:
    """A line exceeded ``max_line_bytes``; its bytes were dropped up to the next newline.

    Attributes:
        size: bytes seen of the line when it was refused (at least ``limit + 1``).
        limit: the cap in bytes.
    """

    size: int
    limit: int


class LineSplitter:
    """Split a byte stream into lines of at most ``max_line_bytes`` bytes.

    A line longer than the cap yields exactly one :class:`LineTooLong`; the splitter then
    discards input until the next ``\\n`` and resynchronises. Memory held is bounded by
    the cap plus one chunk.

    Args:
        max_line_bytes: the cap per line, excluding the ``\\n`` (and ``\\r``).
    """

    def __init__(self, max_line_bytes: int) -> None:
        if max_line_bytes <= 0:
            raise ValueError("max_line_bytes must be > 0")
        self.max_line_bytes = max_line_bytes
        self._buf = bytearray()
        self._discarding = False

    def receive_data(self, data: bytes) -> list[bytes | LineTooLong]:
        """Feed bytes; return the lines (without ``\\r\\n``) and refusals now complete."""
        out: list[bytes | LineTooLong] = []
        start = 0
        n = len(data)
        while start < n:
            nl = data.find(b"\n", start)
            end = n if nl < 0 else nl
            if self._discarding:
                if nl >= 0:
                    self._discarding = False
                    start = nl + 1
                    continue
                return out
            chunk_len = end - start
            if len(self._buf) + chunk_len > self.max_line_bytes + 1:
                # +1 tolerates a '\r' sitting right before the newline.
                size = len(self._buf) + chunk_len
                self._buf.clear()
                out.append(LineTooLong(size=size, limit=self.max_line_bytes))
                if nl < 0:
                    self._discarding = True
                    return out
                start = nl + 1
                continue
            if nl < 0:
                self._buf += data[start:]
                return out
            if self._buf:
                self._buf += data[start:nl]
                line = bytes(self._buf)
                self._buf.clear()
            else:
                line = data[start:nl]
            start = nl + 1
            self._emit(line, out)
        return out

    def _emit(self, line: bytes, out: list[bytes | LineTooLong]) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if len(line) > self.max_line_bytes:
            out.append(LineTooLong(size=len(line), limit=self.max_line_bytes))
        elif line.strip():
            out.append(line)

    def close(self) -> list[bytes | LineTooLong]:
        """End of input: return a final line that had no ``\\n``, if any."""
        out: list[bytes | LineTooLong] = []
        if self._buf and not self._discarding:
            self._emit(bytes(self._buf), out)
        self._buf.clear()
        self._discarding = False
        return out
