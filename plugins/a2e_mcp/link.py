"""One MCP server, kept connected while the host runs: :class:`ServerLink`.

Layer: plugin (anyio; the official ``mcp`` SDK's client session, ``stdio_client`` and
``streamable_http_client``: no MCP framing of our own). Source: PROTOCOL.md §12.

A link connects (spawning the server for stdio, with an explicit environment), sends
``initialize`` and lists the tools within ``start_timeout``, registers them as ``NAME.tool``
(:mod:`a2e_mcp.tools`), then pings the server every ``ping_interval``. A server that
exits, closes the connection, fails to start, or leaves a ping unanswered for
``ping_timeout`` (hung) is *down*: its status is ``error`` with the reason, its tools stay
registered but fail at once with that reason, and it is restarted with exponential
backoff (tenacity: ``restart_initial_delay`` doubling up to ``restart_max_delay``; a
connection that stayed up that long starts the backoff over). Leaving the link's
``supervise`` (the host stopping) closes the session and stops the server: the SDK closes
its stdin, then terminates its process group; whatever is left of the group once the
server exited (children it left behind) is killed (:mod:`a2e_mcp.groups`).
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from a2e_host.exceptions import NodeError, NodeTimeout
from a2e_host.tools import NodeContext, ToolRegistry

from .errlog import errlog
from .groups import Spawns, kill_groups, recording
from .settings import McpSettings, ServerSettings
from .tools import build_tool, output_of

__all__ = ["MAX_TOOLS", "PROTOCOL_ERROR", "UNAVAILABLE", "ServerDown", "ServerLink",
           "progress_data"]

_CLIENT_NAME = "a2e-host"

UNAVAILABLE = "mcp_server_unavailable"
"""``details.mcp_error`` of a node whose server is down (the SDK's ``MCPErrorCode``)."""

MAX_TOOLS = 1000
"""The most tools the host registers from one server (the first by name)."""

PROTOCOL_ERROR = "mcp_protocol_error"
"""``details.mcp_error`` of a node whose call the server answered with a JSON-RPC error."""


class ServerDown(Exception):
    """The server is not serving (it exited, hung, or never started); the message is why."""


def _find_down(exc: BaseException) -> ServerDown | None:
    """The :class:`ServerDown` in ``exc`` (task groups wrap it in exception groups)."""
    if isinstance(exc, ServerDown):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _find_down(inner)) is not None:
                return found
    return None


def _reason(exc: BaseException) -> str:
    """One line for an exception, looking inside exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    from mcp.shared.exceptions import MCPError

    if isinstance(exc, MCPError):
        return exc.error.message
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class ServerLink:
    """The connection to one MCP server and the tools it gave the host.

    Args:
        server: the server's settings.
        mcp: the ``[mcp]`` settings (timeouts, backoff).
        registry: the host's tool registry, where ``NAME.tool`` tools are registered.
        log: a structlog logger.
        max_line_bytes: the longest line a stdio server may write (the host's
            ``max_message_bytes``); a longer one ends its connection
            (:mod:`a2e_mcp.groups`).

    Attributes:
        status: ``connecting``, ``ready``, ``error`` or ``disconnected``.
        error: why it is not ready (``""`` when ready).
        started: set once the first attempt is over (ready, or down).
        restarts: how many times it was started again after going down.
    """

    def __init__(self, server: ServerSettings, mcp: McpSettings, registry: ToolRegistry,
                 log: Any, max_line_bytes: int = 16 * 1024 * 1024) -> None:
        self.server = server
        self.max_line_bytes = max_line_bytes
        self._spawns: Spawns | None = None
        self.mcp = mcp
        self.registry = registry
        self.log = log.bind(mcp_server=server.name)
        self.status = "connecting"
        self.error = ""
        self.server_name = ""
        self.server_version = ""
        self.mcp_version = ""
        self.connected_at = 0.0
        self.last_ping_ms = 0.0
        self.restarts = 0
        self.tool_names: dict[str, str] = {}  # registered name → the server's own name
        self.started = anyio.Event()
        self._session: Any = None
        self._check_now = anyio.Event()
        self._scope = anyio.CancelScope()
        self._last_down = ""

    # ── lifetime ────────────────────────────────────────────────────────────

    async def supervise(self) -> None:
        """Keep the server connected until :meth:`stop` or cancellation (the host
        stopping); never raises but for cancellation."""
        retry = retry_if_exception_type(ServerDown)
        with self._scope:
            while True:
                retrying = AsyncRetrying(
                    wait=wait_exponential(multiplier=self.mcp.restart_initial_delay,
                                          min=self.mcp.restart_initial_delay,
                                          max=self.mcp.restart_max_delay),
                    retry=retry, before_sleep=self._will_restart, sleep=anyio.sleep,
                )
                async for attempt in retrying:
                    with attempt:
                        await self._serve_once()
                # it stayed up long enough to start the backoff over
                self._went_down(self._last_down, self.mcp.restart_initial_delay)
                await anyio.sleep(self.mcp.restart_initial_delay)
                self.restarts += 1
        self._stopped()

    def stop(self) -> None:
        """Stop the server (its tools stay registered until :meth:`forget_tools`); from
        now on it is ``disconnected``, and whoever waits for :attr:`started` (a
        registration) is answered at once."""
        self._scope.cancel()
        self._stopped()

    def _stopped(self) -> None:
        self._session = None
        self.status = "disconnected"
        self.error = (f"MCP server {self.server.name!r} was stopped (unregistered, or the "
                      "host is stopping)")
        self.started.set()

    def forget_tools(self) -> None:
        """Remove every tool it registered (the server was unregistered)."""
        for name in list(self.tool_names):
            self.registry.unregister(name)
        self.tool_names.clear()

    def _will_restart(self, state: RetryCallState) -> None:
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None else None
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        self._went_down(str(exc) if exc is not None else "stopped", delay)
        self.restarts += 1

    def _went_down(self, why: str, delay: float) -> None:
        self.status = "error"
        self.error = (f"MCP server {self.server.name!r} is unavailable: {why}; it is "
                      f"restarted in {delay:.1f} s")
        self.started.set()
        self.log.warning("MCP server down; restarting with backoff", reason=why,
                         delay_seconds=round(delay, 2))

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        server = self.server
        if server.url:
            from mcp.client.streamable_http import streamable_http_client

            async with streamable_http_client(server.url) as streams:
                yield streams[0], streams[1]
            return
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=server.command[0], args=list(server.command[1:]),
                                       env=dict(server.env), cwd=server.cwd or None)
        self._spawns = spawns = Spawns(self.max_line_bytes)
        try:
            async with AsyncExitStack() as stack:
                with recording(spawns):
                    streams = await stack.enter_async_context(
                        stdio_client(params, errlog=errlog()))
                yield streams[0], streams[1]
        finally:
            kill_groups(spawns)  # the children it left behind

    async def _serve_once(self) -> None:
        """Connect, initialize, list and register the tools, then watch the server until
        it goes down (:class:`ServerDown`); returns when it stayed up for at least
        ``restart_max_delay`` seconds before going down (the backoff starts over)."""
        from mcp import ClientSession
        from mcp.types import Implementation

        self.status = "connecting"
        up_since: float | None = None
        try:
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                session = await stack.enter_async_context(ClientSession(
                    read, write, client_info=Implementation(name=_CLIENT_NAME, version="1")))
                try:
                    with anyio.fail_after(self.mcp.start_timeout):
                        init = await session.initialize()
                        tools = await _list_tools(session)
                except TimeoutError:
                    raise ServerDown(
                        f"it did not answer initialize and tools/list within "
                        f"{self.mcp.start_timeout:g} s ([mcp] start_timeout)") from None
                self._up(session, init, tools)
                up_since = anyio.current_time()
                await self._watch(session)
        except Exception as exc:
            found = _find_down(exc)
            if found is not None:
                down = found
            elif up_since is None:
                down = ServerDown(f"it failed to start: {_reason(exc)} (a stdio server's "
                                  "stderr is the host's)")
            else:
                down = ServerDown(_reason(exc))
            if (up_since is not None
                    and anyio.current_time() - up_since >= self.mcp.restart_max_delay):
                self._last_down = str(down)
                return
            raise down from exc
        finally:
            self._session = None

    def _mark_down(self, why: str) -> ServerDown:
        """Its tools fail at once from now on (the server is being stopped, which takes
        a few seconds for one that ignores its closed stdin); the exception to raise."""
        self._session = None
        self.status = "error"
        self.error = (f"MCP server {self.server.name!r} is unavailable: {why}; it is being "
                      "restarted")
        return ServerDown(why)

    def _up(self, session: Any, init: Any, tools: list[Any]) -> None:
        self._session = session
        self.server_name = init.server_info.name
        self.server_version = init.server_info.version
        self.mcp_version = init.protocol_version
        self.connected_at = time.time()
        self._sync_tools(tools)
        self.status, self.error = "ready", ""
        self.started.set()
        self.log.info("MCP server ready", tools=len(self.tool_names),
                      server_name=self.server_name, mcp_version=self.mcp_version)

    def _sync_tools(self, tools: list[Any]) -> None:
        """Register the listed tools (those ``tool_allow_list`` allows) as ``NAME.tool``;
        unregister the ones the server no longer lists. A tool whose name MCP does not
        allow (empty, over 128 characters, anything but ``A-Z a-z 0-9 _ - .``: a space, a
        slash, a newline, non-ASCII) is left out with a warning: its ``NAME.tool`` would
        not be a name a chain, a listing or a log line could carry safely."""
        from mcp.shared.tool_name_validation import validate_tool_name

        allow = set(self.server.tool_allow_list)
        listed = [t for t in tools if not allow or t.name in allow]
        bad = [t.name for t in listed if not validate_tool_name(t.name).is_valid]
        if bad:
            self.log.warning("an MCP server lists tools whose names MCP does not allow (1 to "
                             "128 of A-Z a-z 0-9 _ - .); they are left out",
                             tools=[name[:140] for name in bad[:20]], count=len(bad))
        wanted = {f"{self.server.name}.{t.name}": t for t in listed
                  if validate_tool_name(t.name).is_valid}
        if len(wanted) > MAX_TOOLS:
            self.log.warning("an MCP server lists more tools than the host takes from one "
                             "server; the rest are left out (name them in tool_allow_list)",
                             listed=len(wanted), kept=MAX_TOOLS)
            wanted = dict(sorted(wanted.items())[:MAX_TOOLS])
        for name in list(self.tool_names):
            if name not in wanted:
                self.registry.unregister(name)
                del self.tool_names[name]
        for name, listed in wanted.items():
            if name in self.tool_names:
                self.registry.unregister(name)
            elif name in self.registry:
                self.log.error("an MCP tool has the name of a tool already registered; it "
                               "is left out", tool=name)
                continue
            self.registry.register(build_tool(name, listed, self))
            self.tool_names[name] = listed.name

    async def _watch(self, session: Any) -> None:
        """Ping the server every ``ping_interval`` (or at once when a call saw the
        connection close) until it fails.

        Raises:
            ServerDown: the ping was not answered within ``ping_timeout`` or the
                connection closed.
        """
        from mcp.shared.exceptions import MCPError

        while True:
            with anyio.move_on_after(self.mcp.ping_interval):
                await self._check_now.wait()
            self._check_now = anyio.Event()
            started = anyio.current_time()
            try:
                with anyio.fail_after(self.mcp.ping_timeout):
                    await session.send_ping()
            except TimeoutError:
                raise self._mark_down(f"it did not answer a ping within "
                                      f"{self.mcp.ping_timeout:g} s (hung)") from None
            except MCPError as exc:
                if self._spawns is not None and self._spawns.overflow:
                    raise self._mark_down(f"it {self._spawns.overflow}") from None
                raise self._mark_down(f"the connection closed ({exc.error.message})") from None
            self.last_ping_ms = (anyio.current_time() - started) * 1000

    # ── calls ───────────────────────────────────────────────────────────────

    def _details(self, why: str) -> dict[str, Any]:
        return {"mcp_server": self.server.name, "mcp_error": why}

    async def call(self, name: str, args: dict[str, Any], ctx: NodeContext | None) -> Any:
        """Call the server's tool ``name`` with ``args`` (a tool node's input): its output
        (:func:`~a2e_mcp.tools.output_of`).

        The call is cut off after the server's ``timeout`` or the node's deadline,
        whichever comes first; cancelling the calling task (the node's timeout, the
        chain's cancel) sends ``notifications/cancelled`` (the SDK does). The server's
        progress notifications become the node's ``progress`` reports.

        Raises:
            NodeError: the server is unavailable (the reason, and when it is restarted),
                answered with an error, or returned ``isError`` (its text).
            NodeTimeout: the server's ``timeout`` passed.
        """
        from mcp.shared.exceptions import MCPError
        from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        session = self._session
        if session is None or self.status != "ready":
            raise NodeError(self.error or f"MCP server {self.server.name!r} is not connected "
                            "yet; try again once mcp/server/list shows it ready",
                            code=UNAVAILABLE, retryable=True,
                            details=self._details(UNAVAILABLE))
        timeout = self.server.timeout
        if ctx is not None and ctx.deadline is not None:
            timeout = max(0.001, min(timeout, ctx.deadline - time.monotonic()))

        async def progress(value: float, total: float | None, message: str | None) -> None:
            data = progress_data(value, total, message)
            if ctx is not None and data:
                ctx.report("progress", data)

        try:
            result = await session.call_tool(name, args, read_timeout_seconds=timeout,
                                             progress_callback=progress)
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                self._check_now.set()  # a hung server shows on the next ping
                raise NodeTimeout(f"MCP tool {self.server.name}.{name} did not answer within "
                                  f"{timeout:g} s; it was cancelled",
                                  details=self._details("timeout")) from None
            if exc.code == CONNECTION_CLOSED:
                self._check_now.set()
                why = (self._spawns.overflow if self._spawns is not None
                       and self._spawns.overflow else "closed the connection")
                raise NodeError(f"MCP server {self.server.name!r} {why} during "
                                f"the call of {name!r}; it is restarted",
                                code=UNAVAILABLE, retryable=True,
                            details=self._details(UNAVAILABLE)) from None
            raise NodeError(f"MCP server {self.server.name!r} refused the call of {name!r}: "
                            f"{exc.error.message}", code=PROTOCOL_ERROR,
                            details=self._details(PROTOCOL_ERROR)) from None
        # progress notifications that came before the result are delivered in tasks of
        # their own: let them run before the node ends (a report after it is dropped)
        await anyio.lowlevel.checkpoint()
        return output_of(f"{self.server.name}.{name}", result)


async def _list_tools(session: Any) -> list[Any]:
    """Every tool the server lists, following ``nextCursor`` (at most 100 pages)."""
    from mcp.types import PaginatedRequestParams

    tools: list[Any] = []
    cursor: str | None = None
    for _ in range(100):
        params = PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def progress_data(value: Any, total: Any, message: str | None) -> dict[str, Any]:
    """A server's ``notifications/progress`` as a ``progress`` report's data: only
    finite numbers are passed on (a server may send ``inf``, ``NaN`` or ``1e308``),
    ``pct`` only with a finite ``total`` > 0; ``{}`` when nothing is left to report."""
    data: dict[str, Any] = {}
    finite = isinstance(value, int | float) and math.isfinite(value)
    if finite:
        data["progress"] = value
    if isinstance(total, int | float) and math.isfinite(total) and total > 0:
        data["total"] = total
        share = 100 * value / total if finite else math.nan
        if math.isfinite(share):
            data["pct"] = max(0, min(100, round(share)))
    if message:
        data["message"] = message
    return data
