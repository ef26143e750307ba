"""Structured logging on stderr (structlog).

Layer: runtime support. Every log line goes to **stderr**, never stdout: on stdio,
stdout carries protocol lines only (PROTOCOL.md §1). Lifecycle events log at INFO,
per-node progress at DEBUG. Loggers are bound with ``conn_id``, ``session_id``,
``req_id`` and ``chain_id`` where known.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

__all__ = ["configure_logging", "get_logger", "LOG_FORMATS", "LOG_LEVELS"]

LOG_FORMATS = ("auto", "console", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")


def configure_logging(
    format: str = "auto", level: str = "info", *, stream: TextIO | None = None
) -> None:
    """Send every log (structlog and the standard library's, e.g. websockets') to stderr.

    Args:
        format: ``auto`` (console renderer when ``stream`` is a TTY, JSON otherwise),
            ``console`` or ``json`` (one JSON object per line).
        level: ``debug``, ``info``, ``warning`` or ``error``.
        stream: where lines go; None = the process's stderr at call time.

    Raises:
        ValueError: an unknown format or level, named.
    """
    if format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {format!r}")
    if level not in LOG_LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    out = stream if stream is not None else sys.stderr
    numeric = logging.getLevelName(level.upper())
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
        processors.append(structlog.processors.dict_tracebacks)
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.WriteLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_a2e_host", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(out)
    handler._a2e_host = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(max(numeric, logging.WARNING))


def get_logger(**bound: Any) -> Any:
    """A structlog logger bound with ``bound`` (e.g. ``conn_id="c1"``)."""
    return structlog.get_logger("a2e_host").bind(**bound)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
