"""``a2e-host serve`` (WebSocket) and ``a2e-host stdio``: run a host until told to stop.

Layer: command. Builds the configuration (:func:`~a2e_host.config.load_config`), sets up
logging on stderr, and runs the transport under anyio's asyncio backend. SIGINT/SIGTERM
stop the host gracefully: stop accepting, let chains finish within
``config.shutdown_grace`` seconds, cancel the rest (their responses are still sent),
close (WebSocket: 1001). A second signal cancels at once.

Exit codes: 0 after an orderly stop (including stdin EOF and a closed stdout on stdio);
2 for a bad configuration or an address that cannot be bound (the port is in use, the
address is not this machine's), with one line on stderr saying which.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio

from ..config import HostConfig
from ..logs import configure_logging, flush_logs
from ..plugin import Plugin
from ..runtime.host import Host
from ..store import StoreError
from ..telemetry.endpoints import HostEndpoints
from ..telemetry.setup import configure_telemetry
from .common import load_command_config
from .signals import stop_signals

Plugins = Iterable[Plugin | type[Plugin]] | None

__all__ = ["serve_main", "stdio_main"]


def _setup(
    config_path: str | Path | None, overrides: dict[str, Any], auto_level: str = "info"
) -> HostConfig:
    try:
        config = load_command_config(config_path, overrides, local_defaults=False)
    except ValueError as exc:
        print(f"a2e-host: configuration error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    configure_logging(config.log_format, config.log_level, auto_level=auto_level,
                      take_over_stderr=True)
    return config


def _host(config: HostConfig, plugins: Plugins) -> Host:
    """Build the host; a plugin refusing the configuration stops the start (exit 2)."""
    try:
        return Host(config, plugins)
    except ValueError as exc:
        print(f"a2e-host: configuration error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


async def _stop_on_signals(host: Host) -> None:
    with stop_signals() as signals:
        received = 0
        async for signum in signals:
            received += 1
            grace = host.config.shutdown_grace if received == 1 else 0.0
            host.log.info("signal received; stopping",
                          signal=signal.Signals(signum).name, grace=grace)
            host.shutdown(grace)


def serve_main(
    config_path: str | Path | None, overrides: dict[str, Any], *, plugins: Plugins = None
) -> None:
    """Serve A2E over WebSocket until SIGINT/SIGTERM.

    Prints exactly one line to stderr once listening, which tests and benchmarks read:
    ``a2e-host listening on ws://HOST:PORT`` (with the real port when ``--port 0``).

    Args:
        config_path: a TOML file, or None.
        overrides: CLI values by :class:`~a2e_host.config.HostConfig` field name.
        plugins: plugins to use instead of the entry points (tests).

    Raises:
        SystemExit: 2 on a configuration error or when the address cannot be bound.
    """
    config = _setup(config_path, overrides)
    host = _host(config, plugins)
    try:
        code = anyio.run(_serve, host, backend="asyncio")
    except (_CannotListen, StoreError, BaseExceptionGroup) as exc:
        _exit_if_store_failed(exc)
        failed = _find(exc, _CannotListen)
        if failed is None:
            raise
        print(f"a2e-host: {_bind_message(config, failed.error)}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    _exit_despite_stuck_threads(code)
    if code:
        raise SystemExit(code)


def _exit_if_store_failed(exc: BaseException) -> None:
    """Exit 2 with the store's one sentence when the run store could not be opened."""
    failed = _find(exc, StoreError)
    if failed is not None:
        print(f"a2e-host: {failed.message}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


class _CannotListen(Exception):
    """The server could not bind its address (``error``: the OSError)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


_E = TypeVar("_E", bound=BaseException)


def _find(exc: BaseException, kind: type[_E]) -> _E | None:
    """``exc`` itself or the first ``kind`` nested in its exception groups, else None."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find(inner, kind)
            if found is not None:
                return found
    return None


def _bind_message(config: HostConfig, exc: OSError) -> str:
    """One sentence for a bind failure, naming the address and the fix."""
    if exc.errno == errno.EADDRINUSE:
        return f"port {config.port} is in use; pick another with --port (0 picks a free one)"
    if exc.errno == errno.EADDRNOTAVAIL:
        return (f"cannot listen on {config.host}: it is not an address of this machine; "
                "pick another with --host")
    if exc.errno == errno.EACCES:
        return (f"not allowed to listen on port {config.port} (ports below 1024 need "
                "privileges); pick another with --port")
    reason = exc.strerror or str(exc)
    return f"cannot listen on {config.host}:{config.port}: {reason}; check --host and --port"


THREAD_EXIT_WAIT = 1.0
"""Seconds the worker threads get to end after the event loop did: idle ones (anyio's
pool) end at once; one still inside a blocking call is reported and abandoned."""


def _exit_despite_stuck_threads(code: int) -> None:
    """Exit now if a worker thread is still inside a blocking call (a sync tool that
    ignored cancellation): the interpreter would otherwise wait for it at exit. Idle
    worker threads, which end as the loop ends, are given :data:`THREAD_EXIT_WAIT`
    seconds first, so they are not reported."""
    deadline = time.monotonic() + THREAD_EXIT_WAIT
    stuck = []
    for thread in threading.enumerate():
        if thread is threading.main_thread() or thread.daemon:
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            stuck.append(thread)
    if stuck:
        calls = ", ".join(sorted({_blocking_call(t) for t in stuck}))
        print(f"a2e-host: exiting with {len(stuck)} worker thread(s) still inside a "
              f"blocking call that ignored cancellation ({calls}); that call is cut off "
              "unfinished. Nothing else is lost: every connection was answered and closed, "
              "the run store (if any) was closed, and durable runs left running resume when "
              "a host starts on the same store.", file=sys.stderr, flush=True)
        flush_logs()  # os._exit skips the exit-time flush of queued log lines
        os._exit(code)


def _blocking_call(thread: threading.Thread) -> str:
    """Where ``thread`` is: the first function it runs outside the thread machinery
    (``file:line function``), e.g. the sync tool that blocks; ``"unknown"`` if gone."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return "unknown"
    machinery = (os.sep + "threading.py", os.sep + "anyio" + os.sep, os.sep + "contextvars")
    for entry in traceback.extract_stack(frame):
        if not any(part in entry.filename for part in machinery):
            return f"{Path(entry.filename).name}:{entry.lineno} {entry.name}"
    return thread.name


def _telemetry(host: Host, endpoints: HostEndpoints | None) -> Callable[[], None]:
    """Telemetry as ``host.config`` asks (exit 2 with one line when it cannot be)."""
    try:
        return configure_telemetry(host.config, serving_metrics=endpoints is not None,
                                   gauges=endpoints.gauges if endpoints is not None else None)
    except ValueError as exc:
        print(f"a2e-host: configuration error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


def _store_unready(host: Host) -> str | None:
    """Why the host's run store makes it not ready (a shared store that failed or cannot
    be reached: the store's ``unready()``), or None."""
    unready = getattr(host.store, "unready", None)
    return unready() if callable(unready) else None


STORE_FAILED_EXIT = 3
"""``serve``'s exit status after it stopped because its shared run store failed."""


async def _stop_if_shared_store_fails(host: Host, failed: list[bool]) -> None:
    """A replica whose shared run store failed (e.g. the database restarted) records no
    durable run until it restarts: check every second, and then stop gracefully, with
    one line on stderr, so its supervisor starts it again (exit status 3)."""
    from ..store.shared import SharedRunStore

    while True:
        await anyio.sleep(1.0)
        store = host.store
        if isinstance(store, SharedRunStore) and store.error is not None:
            failed.append(True)
            print(f"a2e-host: {_store_unready(host)}; stopping this replica so that its "
                  "supervisor starts it again", file=sys.stderr, flush=True)
            host.shutdown(host.config.shutdown_grace)
            return


async def _serve(host: Host) -> int:
    from ..transports.websocket import serve_websocket

    endpoints = HostEndpoints(host) if host.config.http_endpoints else None
    stop_telemetry = _telemetry(host, endpoints)
    failed: list[bool] = []
    try:
        async with host.running(), anyio.create_task_group() as tg:
            if endpoints is not None:
                endpoints.readiness_checks.append(partial(_store_unready, host))
            tg.start_soon(_stop_on_signals, host)
            tg.start_soon(_stop_if_shared_store_fails, host, failed)
            async with anyio.create_task_group() as server:
                try:
                    bound_host, port = await server.start(
                        partial(serve_websocket, host.serve_connection, host.config,
                                stop=host.shutdown_event, log=host.log,
                                routes=endpoints.routes() if endpoints is not None else None)
                    )
                except (OSError, BaseExceptionGroup) as exc:
                    error = _find(exc, OSError)
                    if error is None:
                        raise
                    raise _CannotListen(error) from exc
                shown = f"[{bound_host}]" if ":" in bound_host else bound_host
                print(f"a2e-host listening on ws://{shown}:{port}", file=sys.stderr, flush=True)
            # serve_websocket returned: shutdown was asked and every connection closed
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await host.aclose()
        stop_telemetry()
    return STORE_FAILED_EXIT if failed else 0


def stdio_main(
    config_path: str | Path | None, overrides: dict[str, Any], *, plugins: Plugins = None
) -> None:
    """Speak A2E as NDJSON on stdin/stdout until stdin ends, ``shutdown``, a signal, or
    stdout closes. Logs, ``print()`` and child processes' output go to stderr.

    Args:
        config_path: a TOML file, or None.
        overrides: CLI values by :class:`~a2e_host.config.HostConfig` field name.
        plugins: plugins to use instead of the entry points (tests).

    Raises:
        SystemExit: 2 on a configuration error.
    """
    from ..transports.stdio import protect_stdout

    out_fd = protect_stdout()  # before anything can print
    config = _setup(config_path, overrides, auto_level="warning")  # stderr may go unread
    host = _host(config, plugins)
    try:
        anyio.run(_stdio, host, out_fd, backend="asyncio")
    except (StoreError, BaseExceptionGroup) as exc:
        _exit_if_store_failed(exc)
        raise
    _exit_despite_stuck_threads(0)


async def _stdio(host: Host, out_fd: int) -> None:
    from ..transports.stdio import serve_stdio

    stop_telemetry = _telemetry(host, None)
    try:
        async with host.running(), anyio.create_task_group() as tg:
            tg.start_soon(_stop_on_signals, host)
            await serve_stdio(
                partial(host.serve_connection, conn_id="stdio"),
                max_line_bytes=host.config.limits.max_message_bytes,
                out_fd=out_fd,
            )
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await host.aclose()
        stop_telemetry()
