"""Structured logging on stderr (structlog), through a writer that never blocks.

Layer: runtime support. Every log line goes to **stderr**, never stdout: on stdio,
stdout carries protocol lines only (PROTOCOL.md §1). Lifecycle events log at INFO,
per-node progress at DEBUG. Loggers are bound with ``conn_id``, ``session_id``,
``req_id`` and ``chain_id`` where known.

Logging can never stall the protocol (issue 12.13). An agent that spawns the host may
pipe its stderr and never read it; once the pipe's buffer (64 KiB on Linux) is full, a
plain ``write`` blocks, and with it the event loop. So lines are handed to a
:class:`LogWriter`: a bounded queue drained by one daemon thread. When the queue is
full the line is dropped and counted; once lines flow again, the writer first writes
one line saying how many were dropped. A log call costs a queue append, whatever the
reader does. At exit the writer gets a short, bounded time to flush.

Tracebacks are logged without frame locals, in both renderers: a local can hold a
secret (the configuration's ``auth_token``) or a request's data.

Every rendered line, and everything else written through a :class:`LogWriter` (a
tool's ``print`` to stderr), has the secret values the process knows replaced by
``«secret:NAME»`` (:func:`redact_secrets`, :func:`a2e_host.secrets.redact`).

``log_level = "auto"`` (the default) is ``warning`` for ``a2e-host stdio`` and ``info``
elsewhere: a spawning agent rarely reads the host's stderr.
"""

from __future__ import annotations

import atexit
import io
import json
import logging
import os
import sys
import threading
import time
from collections import deque
from datetime import UTC, datetime
from typing import Any, TextIO

import structlog

from .redaction import PendingText
from .secrets import redact, redactor

__all__ = [
    "configure_logging",
    "redact_secrets",
    "get_logger",
    "flush_logs",
    "dropped_log_lines",
    "resolve_level",
    "LogWriter",
    "StderrProxy",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "MAX_QUEUED_LOG_BYTES",
]

LOG_FORMATS = ("auto", "console", "json")
LOG_LEVELS = ("auto", "debug", "info", "warning", "error")

MAX_QUEUED_LOG_BYTES = 256 * 1024
"""Bytes of log lines waiting for stderr before further lines are dropped (and counted)."""

EXIT_FLUSH_TIMEOUT = 1.0
"""Seconds the writer gets at interpreter exit to write what is queued."""


class LogWriter:
    """Writes text lines to a file descriptor from a daemon thread; never blocks callers.

    Args:
        fd: the descriptor to write to (the process's stderr).
        max_queued_bytes: bytes waiting to be written beyond which new lines are dropped.
        json_notice: write the "lines dropped" notice as a JSON object (else plain text).

    Thread-safe: :meth:`write` may be called from any thread.
    """

    def __init__(
        self, fd: int, *, max_queued_bytes: int = MAX_QUEUED_LOG_BYTES, json_notice: bool = True
    ) -> None:
        self.fd = fd
        self.max_queued_bytes = max_queued_bytes
        self.json_notice = json_notice
        self.dropped_total = 0
        self._lines: deque[bytes] = deque()
        self._queued = 0
        self._dropped = 0  # dropped since the last notice was queued
        self._writing = False
        self._cond = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._broken = False

    def write(self, text: str) -> None:
        """Queue ``text`` (one or more whole lines, ending in ``\\n``); drop it when the
        queue is full or stderr is gone. Never blocks on the descriptor. Known secret
        values are redacted first (:func:`a2e_host.secrets.redact`)."""
        data = redact(text).encode("utf-8", "replace")
        with self._cond:
            if self._broken or self._queued + len(data) > self.max_queued_bytes:
                self._dropped += 1
                self.dropped_total += 1
                return
            if self._dropped:
                notice = self._notice(self._dropped)
                self._dropped = 0
                self._lines.append(notice)
                self._queued += len(notice)
            self._lines.append(data)
            self._queued += len(data)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._drain, name="a2e-host log writer", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        if _exiting:  # an exit handler that ran after ours: out before the process ends
            self.flush(EXIT_FLUSH_TIMEOUT)

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the queue to be written; True if it was.

        Lines dropped since the last notice get their notice first (beyond the cap: it
        is one short line), so a count is never lost at exit.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            if self._dropped and not self._broken and self._thread is not None:
                notice = self._notice(self._dropped)
                self._dropped = 0
                self._lines.append(notice)
                self._queued += len(notice)
                self._cond.notify()
            while self._lines or self._writing:
                left = deadline - time.monotonic()
                if left <= 0 or self._broken:
                    return False
                self._cond.wait(left)
        return True

    def _notice(self, count: int) -> bytes:
        what = f"dropped {count} log lines: stderr was not being read fast enough"
        if self.json_notice:
            line = json.dumps({"event": what, "dropped": count, "level": "warning",
                               "timestamp": datetime.now(UTC).isoformat()})
        else:
            line = f"{datetime.now(UTC).isoformat()} [warning  ] {what}"
        return line.encode() + b"\n"

    def _drain(self) -> None:
        while True:
            with self._cond:
                while not self._lines:
                    self._writing = False
                    self._cond.notify_all()
                    self._cond.wait()
                batch = b"".join(self._lines)
                self._lines.clear()
                self._writing = True
            try:
                view = memoryview(batch)
                while view:
                    view = view[os.write(self.fd, view):]
            except OSError:  # stderr closed: nobody can read logs any more
                with self._cond:
                    self._broken = True
                    self._lines.clear()
                    self._queued = 0
                    self._writing = False
                    self._cond.notify_all()
                return
            with self._cond:
                self._queued -= len(batch)


class RedactingStream(io.TextIOBase):
    """A text stream handing whole lines, every known secret value redacted, to ``emit``.

    Text is kept until its newline (or :meth:`flush`), and a tail that could begin a
    secret value until the next write (:class:`~a2e_host.redaction.PendingText`, so a
    value holding newlines is redacted whole); ``fileno()``, ``isatty()`` and the
    encoding are the ``real`` stream's, so child processes still inherit the real
    descriptor. Thread-safe.

    Args:
        real: the stream it stands for.
        emit: where redacted text goes (the real stream's ``write``, or a log writer's).
    """

    def __init__(self, real: TextIO, emit: Any) -> None:
        super().__init__()
        self.real = real
        self._emit = emit
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
            self._emit(out)
        return len(text)

    def flush(self) -> None:
        with self._lock:
            rest = self._pending.flush()
        if rest:
            self._emit(rest)

    def fileno(self) -> int:
        return self.real.fileno()

    def isatty(self) -> bool:
        return _isatty(self.real)


class StderrProxy(RedactingStream):
    """``sys.stderr`` (and ``sys.stdout`` where it is stderr) as a writer of whole lines
    into a :class:`LogWriter`, so a ``print()`` can never block, nor land in the middle of
    a log line written by the writer's thread.

    Text is kept until its newline (or :meth:`flush`), and a tail that could begin a
    secret value until the next write (:class:`~a2e_host.redaction.PendingText`, so a
    value holding newlines is redacted whole); ``fileno()`` and ``isatty()`` are
    the real stream's, so child processes still inherit the real descriptor.
    """

    def __init__(self, writer: LogWriter, real: TextIO) -> None:
        super().__init__(real, writer.write)


class _WriterLogger:
    """A structlog logger that hands each rendered line to a :class:`LogWriter`."""

    def __init__(self, writer: LogWriter) -> None:
        self._writer = writer

    def msg(self, message: str) -> None:
        self._writer.write(message + "\n")

    log = debug = info = warn = warning = error = critical = exception = fatal = msg


class _WriterHandler(logging.Handler):
    """A standard-library handler (websockets' logs) writing through a :class:`LogWriter`."""

    def __init__(self, writer: LogWriter) -> None:
        super().__init__()
        self._writer = writer

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._writer.write(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


_writers: dict[int, LogWriter] = {}
_writers_lock = threading.Lock()


def _writer_for(fd: int, json_notice: bool) -> LogWriter:
    with _writers_lock:
        writer = _writers.get(fd)
        if writer is None:
            writer = _writers[fd] = LogWriter(fd, json_notice=json_notice)
        writer.json_notice = json_notice
        return writer


_exiting = False


@atexit.register
def _flush_at_exit() -> None:
    global _exiting
    _exiting = True  # from now on each write waits (bounded) until it is out
    for writer in list(_writers.values()):
        writer.flush(EXIT_FLUSH_TIMEOUT)


def resolve_level(level: str, auto_level: str = "info") -> str:
    """``level``, or ``auto_level`` when it is ``"auto"``."""
    return auto_level if level == "auto" else level


def configure_logging(
    format: str = "auto",
    level: str = "auto",
    *,
    stream: TextIO | None = None,
    auto_level: str = "info",
    take_over_stderr: bool = False,
) -> None:
    """Send every log (structlog and the standard library's, e.g. websockets') to stderr.

    When ``stream`` has a file descriptor, lines go through a :class:`LogWriter`: bounded
    and never blocking (a full pipe drops lines, counted). A stream without one (an
    in-memory buffer) is written directly: it cannot block.

    Args:
        format: ``auto`` (console renderer when ``stream`` is a TTY, JSON otherwise),
            ``console`` or ``json`` (one JSON object per line).
        level: ``debug``, ``info``, ``warning``, ``error``, or ``auto`` (= ``auto_level``).
        stream: where lines go; None = the process's stderr at call time.
        auto_level: the level ``auto`` means: ``warning`` for ``a2e-host stdio``.
        take_over_stderr: also route ``sys.stderr`` (and ``sys.stdout`` when it is
            stderr, as on stdio) through the writer (:class:`StderrProxy`): for a host
            process, so that ``print()`` neither blocks nor splits a log line.

    Raises:
        ValueError: an unknown format or level, named.
    """
    if format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {format!r}")
    if level not in LOG_LEVELS or auto_level not in LOG_LEVELS[1:]:
        raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    out = stream if stream is not None else sys.stderr
    if isinstance(out, StderrProxy):
        out = out.real
    numeric = logging.getLevelName(resolve_level(level, auto_level).upper())
    console = format == "console" or (format == "auto" and _isatty(out))
    renderer: Any = (
        structlog.dev.ConsoleRenderer(
            colors=_isatty(out), exception_formatter=structlog.dev.plain_traceback
        )
        if console
        else structlog.processors.JSONRenderer()
    )
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if not console:
        # a traceback as data, never with frame locals: a local may be the HostConfig
        # (its auth_token) or a request's input (the console renderer's plain_traceback
        # shows no locals either)
        processors.append(structlog.processors.ExceptionRenderer(
            structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
        ))
    fd = _fileno(out)
    handler: logging.Handler
    if fd is None:
        factory: Any = structlog.WriteLoggerFactory(file=out)
        handler = logging.StreamHandler(out)
    else:
        try:
            out.flush()  # what was printed before goes out before the queued lines
        except (OSError, ValueError):
            pass
        writer = _writer_for(fd, json_notice=not console)
        if take_over_stderr and stream is None:
            proxy = StderrProxy(writer, out)
            if sys.stdout is sys.stderr:
                sys.stdout = proxy
            sys.stderr = proxy
        logger = _WriterLogger(writer)
        factory = lambda *args: logger  # noqa: E731
        handler = _WriterHandler(writer)
    structlog.configure(
        processors=[*processors, renderer, redact_secrets],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=factory,
        cache_logger_on_first_use=False,
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_a2e_host", False):
            root.removeHandler(old)
    setattr(handler, "_a2e_host", True)  # noqa: B010 - marks our handler for replacement
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(max(numeric, logging.WARNING))


def redact_secrets(logger: Any, method_name: str, rendered: Any) -> Any:
    """The last structlog processor, after the renderer: the rendered line with every
    secret value the process knows replaced by ``«secret:NAME»`` (the traceback and
    every field included, whatever their escaping; README "Secrets")."""
    return redact(rendered) if isinstance(rendered, str) else rendered


def get_logger(**bound: Any) -> Any:
    """A structlog logger bound with ``bound`` (e.g. ``conn_id="c1"``)."""
    return structlog.get_logger("a2e_host").bind(**bound)


def dropped_log_lines() -> int:
    """Log lines dropped since the start because stderr was not read fast enough (the
    ``a2e_log_lines_dropped_total`` metric)."""
    return sum(w.dropped_total for w in list(_writers.values()))


def flush_logs(timeout: float = EXIT_FLUSH_TIMEOUT) -> bool:
    """Wait up to ``timeout`` seconds for queued log lines to be written; True if all
    were (e.g. before ``os._exit``, which skips the exit-time flush)."""
    deadline = time.monotonic() + timeout
    return all(w.flush(max(0.0, deadline - time.monotonic())) for w in list(_writers.values()))


def _fileno(stream: TextIO) -> int | None:
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
