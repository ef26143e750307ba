"""``a2e-host run``'s standard streams with every secret value the process knows redacted.

Layer: command. ``a2e-host stdio`` and ``serve`` write stderr through the log writer
(:func:`a2e_host.logs.configure_logging` with ``take_over_stderr``), which redacts every
line (:func:`a2e_host.secrets.redact`); ``run`` does the same for stderr, and its stdout
goes through :class:`RedactingStdout`: a tool that prints a configured secret, to either
stream (on a terminal the live table's console shows a tool's stderr on stdout), shows
``«secret:NAME»`` instead (README "Secrets").
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from ..logs import RedactingStream

__all__ = ["RedactingStdout", "redacted_stdout"]


class RedactingStdout(RedactingStream):
    """A text stream writing whole lines, redacted, to ``real`` at once (no thread: a
    closed pipe raises :class:`BrokenPipeError` in the writer, as on the real stream).

    Text is kept until its newline or :meth:`flush` (and a tail that could begin a value
    until the next write: :class:`~a2e_host.redaction.PendingText`), so a value printed
    in parts or holding newlines is redacted whole; ``fileno()``, ``isatty()`` and the
    encoding are the real stream's.
    """

    def __init__(self, real: TextIO) -> None:
        super().__init__(real, real.write)

    def flush(self) -> None:
        super().flush()
        self.real.flush()


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
