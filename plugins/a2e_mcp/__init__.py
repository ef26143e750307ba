"""The ``mcp`` capability: MCP servers' tools inside chains, and ``mcp/server/*``
(A2E ``a2e/caps/mcp/protocol.py``, SDK commit c8fc1f87; PROTOCOL.md §12).

A first-party plugin on the public plugin API, registered by entry point as
``mcp = "a2e_mcp:McpPlugin"``. Needs the ``mcp`` extra (``pip install 'a2e-host[mcp]'``)
when the configuration names a server.

* **Tool sources.** Each ``[mcp.servers.NAME]`` is connected when the host starts
  (:meth:`McpPlugin.host_started`, waiting at most ``[mcp] start_timeout`` for all of
  them together), and its tools are registered in the host's one tool registry as
  ``NAME.tool``: ``tool`` nodes, ``tool/list``, ``tool/call`` and the static checks see
  them as any other tool. A server that has not answered by then does not delay the start:
  its tools are absent until it answers (they appear then; ``mcp/server/list`` shows it
  ``connecting`` or ``error``). Once listed, a server's tools stay registered while it is
  down and fail at once with ``mcp_server_unavailable`` and the reason, until the
  restart (with backoff, :mod:`a2e_mcp.link`) brings it back.
* ``mcp/server/list/req`` → ``mcp/server/list/resp``: every server's state.
* ``mcp/server/register/req`` / ``unregister/req``: only where ``[mcp] register_commands``
  or ``register_urls`` list what an agent may start (exactly); by default every
  registration is refused (``ok: false``), so no agent can make the host spawn a program.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any, ClassVar

import anyio
import msgspec
import structlog
from a2e_chains.shared import toolbox_for

from a2e_host.config import ANONYMOUS_PRINCIPAL, HostConfig
from a2e_host.messages import Message
from a2e_host.plugin import HostRuns, Plugin, PluginContext, SessionInfo
from a2e_host.tools import pack_entry_points

from .link import ServerLink
from .messages import (
    MCP_MESSAGE_TYPES,
    ServerInfo,
    ServerListRequest,
    ServerListResponse,
    ServerRegisterRequest,
    ServerRegisterResponse,
    ServerUnregisterRequest,
    ServerUnregisterResponse,
)
from .registration import registration_of
from .settings import McpSettings, ServerSettings, parse_settings

__all__ = ["McpPlugin", "TOOL_SOURCE"]

TOOL_SOURCE = "mcp"
"""The name the plugin declares its tool source under (``ToolRegistry.add_source``)."""


class McpPlugin(Plugin):
    """MCP servers as tool sources, and the ``mcp/server/*`` messages.

    Args:
        config: the host configuration (``mcp``: the ``[mcp]`` table).

    Raises:
        ValueError: the ``[mcp]`` table is bad, or names a server while the ``mcp``
            package is not installed (the host refuses to start, naming the fix).
    """

    capability: ClassVar[str] = "mcp"
    namespace: ClassVar[str] = "mcp/*"
    priority: ClassVar[int] = 30
    message_types: ClassVar[tuple[type[Message], ...]] = MCP_MESSAGE_TYPES
    features: ClassVar[tuple[str, ...]] = ("mcp/server/list", "mcp/tools")
    how_to_serve: ClassVar[str] = (
        "configure an MCP server in [mcp.servers.NAME] of the host's configuration file "
        "(README 'MCP servers as tool sources')")

    def __init__(self, config: HostConfig) -> None:
        super().__init__(config)
        self.settings: McpSettings = parse_settings(config.mcp)
        self.links: dict[str, ServerLink] = {}
        self.log = structlog.get_logger("a2e_mcp")
        self._runs: HostRuns | None = None
        self._owners: dict[str, tuple[str, str]] = {}
        """Agent-registered server name → (principal, session id) that registered it."""
        if not self.serves():
            return
        if importlib.util.find_spec("mcp") is None:
            raise ValueError("[mcp] configures MCP servers but the 'mcp' package is not "
                             "installed; install it with pip install 'a2e-host[mcp]'")
        # the SDK takes seconds to import on a busy machine: now, while the host is
        # built, not on the event loop once it serves (the start timeout could not fire)
        for module in ("mcp", "mcp.client.stdio", "mcp.client.streamable_http",
                       "mcp.shared.exceptions", "mcp.types"):
            importlib.import_module(module)
        self.tools = toolbox_for(config).tools
        self.tools.add_source(TOOL_SOURCE)

    def serves(self) -> bool:
        """Whether a server is configured or agents may register one."""
        return bool(self.settings.servers) or self.settings.allows_register

    def metadata(self, session: SessionInfo) -> dict[str, Any]:
        """Namespace, priority, features, plus ``servers`` (their names) and ``register``
        (whether agents may register servers here)."""
        meta = super().metadata(session)
        meta["servers"] = sorted(self.links or self.settings.servers)
        meta["register"] = self.settings.allows_register
        return meta

    async def host_started(self, runs: HostRuns) -> None:
        """Connect every configured server; wait for them (together) at most
        ``start_timeout`` seconds, then let the host serve whatever state they are in."""
        self._runs = runs
        for server in self.settings.servers.values():
            self._start(server)
        with anyio.move_on_after(self.settings.start_timeout):
            for link in list(self.links.values()):
                await link.started.wait()

    def _start(self, server: ServerSettings) -> ServerLink:
        assert self._runs is not None
        link = ServerLink(server, self.settings, self.tools, self.log,
                          max_line_bytes=self.config.limits.max_message_bytes)
        self.links[server.name] = link
        self._runs.start_service(link.supervise, name=f"mcp:{server.name}")
        return link

    async def aclose(self) -> None:
        """Stop every server (the host's stop already cancelled their tasks)."""
        for link in self.links.values():
            link.stop()

    # ── messages ────────────────────────────────────────────────────────────

    async def handle(self, message: Message, ctx: PluginContext) -> None:
        """Answer ``mcp/server/list/req``, ``register/req`` and ``unregister/req``."""
        if isinstance(message, ServerListRequest):
            servers = [info for info in (self.info_of(link) for _, link in
                                         sorted(self.links.items()))
                       if not message.status_filter or info.status == message.status_filter]
            ctx.outbox.send_nowait(ServerListResponse(req_id=message.id, servers=servers))
        elif isinstance(message, ServerRegisterRequest):
            ctx.start_soon(self._register, message, ctx, name="mcp:register")
        elif isinstance(message, ServerUnregisterRequest):
            link = self.links.get(message.server_id)
            ok = (link is not None and link.server.registered
                  and self._owned_by(message.server_id, ctx.session))
            if ok:
                self._drop(message.server_id)
            ctx.outbox.send_nowait(ServerUnregisterResponse(
                req_id=message.id, ok=ok, server_id=message.server_id))
        else:
            await super().handle(message, ctx)

    def _owned_by(self, name: str, session: SessionInfo) -> bool:
        """Whether ``session`` may unregister ``name``: the session that registered it,
        or another of the same authenticated principal (on a host without tokens every
        session is ``anonymous``: only the registering session then)."""
        principal, session_id = self._owners.get(name, ("", ""))
        if session_id == session.session_id:
            return True
        return principal not in ("", ANONYMOUS_PRINCIPAL) and principal == session.principal

    def _drop(self, name: str) -> None:
        """Stop the agent-registered server ``name`` and forget its tools."""
        link = self.links.pop(name)
        self._owners.pop(name, None)
        link.stop()
        link.forget_tools()

    async def session_closed(self, session: SessionInfo) -> None:
        """Unregister the servers ``session`` registered: a registration lives as long
        as the session that made it."""
        for name, (_, session_id) in list(self._owners.items()):
            if session_id == session.session_id and name in self.links:
                self._drop(name)

    async def _register(self, message: ServerRegisterRequest, ctx: PluginContext) -> None:
        registered = sum(1 for link in self.links.values() if link.server.registered)
        packs = {*pack_entry_points(), *self.config.tools}
        problem, server = registration_of(message.config, self.settings, set(self.links),
                                          registered, packs)
        if server is None or self._runs is None:
            ctx.outbox.send_nowait(ServerRegisterResponse(
                req_id=message.id, ok=False, error=problem or "the host is not running"))
            return
        link = self._start(server)
        self._owners[server.name] = (ctx.session.principal, ctx.session.session_id)
        with anyio.move_on_after(self.settings.start_timeout):
            await link.started.wait()
        info = self.info_of(link)
        ctx.outbox.send_nowait(ServerRegisterResponse(
            req_id=message.id, ok=info.status == "ready", server=msgspec.to_builtins(info),
            error=info.error))

    def info_of(self, link: ServerLink) -> ServerInfo:
        """``link``'s state as the SDK's ``MCPServerInfo``."""
        return ServerInfo(
            server_id=link.server.name, name=link.server.name,
            transport=link.server.transport, status=link.status,
            mcp_version=link.mcp_version, server_name=link.server_name,
            server_version=link.server_version, tools_count=len(link.tool_names),
            last_ping_ms=round(link.last_ping_ms, 3), error=link.error,
            connected_at=link.connected_at,
        )
