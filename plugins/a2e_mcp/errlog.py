"""Where a stdio MCP server's stderr goes: the host's stderr, a line at a time, with every
secret value the process knows replaced by ``«secret:NAME»`` (README "Secrets").

A server is handed the arguments of its tool nodes, ``$secret`` references resolved; what
it prints about them went straight to the host's file descriptor 2, past the redaction
every other line the host writes goes through. Every stdio server of the process now
shares one pipe; a daemon thread reads it and writes each whole line, redacted, to
descriptor 2 (blocking there as the server's own writes would have). A line longer than
:data:`MAX_LINE_BYTES` characters is let go in pieces, never cut inside a value.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import threading
from typing import TextIO

from a2e_host.secrets import pending_text

__all__ = ["MAX_LINE_BYTES", "errlog"]

MAX_LINE_BYTES = 65_536
"""The longest stretch of a server's stderr held back waiting for its line's end."""

_lock = threading.Lock()
_pipe: TextIO | None = None


def errlog() -> TextIO:
    """The write end of the pipe every stdio MCP server's stderr goes to (a real file
    descriptor, as ``subprocess`` needs), its reader started on first use."""
    global _pipe
    with _lock:
        if _pipe is None:
            read_fd, write_fd = os.pipe()
            threading.Thread(target=_pump, args=(read_fd,), name="a2e-mcp-stderr",
                             daemon=True).start()
            _pipe = os.fdopen(write_fd, "w", encoding="utf-8", errors="replace")
        return _pipe


def _pump(read_fd: int) -> None:
    """Copy ``read_fd`` to descriptor 2 line by line, redacted, until it closes; a tail
    that could begin a secret value waits for the next read, so a value holding newlines
    (a PEM key) is replaced whole (:func:`a2e_host.secrets.pending_text`)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = pending_text(MAX_LINE_BYTES)
    while True:
        try:
            chunk = os.read(read_fd, MAX_LINE_BYTES)
        except OSError:
            chunk = b""
        if not chunk:
            _write(pending.write(decoder.decode(b"", final=True)) + pending.flush())
            os.close(read_fd)
            return
        _write(pending.write(decoder.decode(chunk)))


def _write(text: str) -> None:
    data = text.encode("utf-8")
    with contextlib.suppress(OSError):
        while data:
            data = data[os.write(2, data):]
