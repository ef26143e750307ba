"""``a2e-host run``'s standard streams with every secret value the process knows redacted.

Layer: command. ``a2e-host stdio`` and ``serve`` write stderr through the log writer
(:func:`a2e_host.logs.configure_logging` with ``take_over_stderr``), which redacts every
line (:func:`a2e_host.secrets.redact`); ``run`` does the same for stderr, and its stdout
goes through :class:`RedactingStdout`: a tool that prints a configured secret, to either
stream (on a terminal the live table's console shows a tool's stderr on stdout), shows
``«secret:NAME»`` instead (README "Secrets").
"""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from ..redaction import PendingText
from ..secrets import redactor

__all__ = ["RedactingStdout", "redacted_stdout"]


class RedactingStdout(io.TextIOBase):
    """A text stream writing whole lines, redacted, to ``real`` at once (no thread: a
    closed pipe raises :class:`BrokenPipeError` in the writer, as on the real stream).

    Text is kept until its newline or :meth:`flush` (and a tail that could begin a value
    until the next write: :class:`~a2e_host.redaction.PendingText`), so a value printed
    in parts or holding newlines is redacted whole; ``fileno()``, ``isatty()`` and the
    encoding are the real stream's.
    """

    def __init__(self, real: TextIO) -> None:
        super().__init__()
        self.real = real
        self._pending = PendingText(redactor)
        self._lock = threading.Lock()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.real, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.real, "errors", None)

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            out = self._pending.write(text)
        if out:
            self.real.write(out)
        return len(text)

    def flush(self) -> None:
        with self._lock:
            rest = self._pending.flush()
        if rest:
            self.real.write(rest)
        self.real.flush()

    def fileno(self) -> int:
        return self.real.fileno()

    def isatty(self) -> bool:
        try:
            return self.real.isatty()
        except (AttributeError, ValueError):
            return False


@contextmanager
def redacted_stdout() -> Iterator[None]:
    """``sys.stdout`` as a :class:`RedactingStdout` for the block; restored (and what
    is pending flushed) after it."""
    real = sys.stdout
    proxy = RedactingStdout(real)
    sys.stdout = proxy
    try:
        yield
    finally:
        sys.stdout = real
        try:
            proxy.flush()
        except (OSError, ValueError):
            pass
