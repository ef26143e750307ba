"""The ``tools`` capability: ``tool/list/req`` and direct ``tool/call/req`` (A2E
``a2e/caps/tools``, SDK commit c8fc1f87; PROTOCOL.md §11).

A first-party plugin on the public plugin API, registered by entry point as
``tools = "a2e_tools:ToolsPlugin"``. It serves the tools of the packs the configuration
enables (``--tools``) and is not granted on a host that enables none
(:meth:`ToolsPlugin.serves`).

* ``tool/list/req`` → ``tool/list/resp``: answered on the reader (the definitions are
  derived once, :mod:`a2e_tools.listing`).
* ``tool/call/req`` → ``tool/event``… → ``tool/call/resp``: a run of the host
  (``ctx.start_run``: cancelled when the connection drops), counted against
  ``max_parallel`` with the session's other direct calls (chains count apart), and run
  through the chain engine's tool path (:mod:`a2e_tools.calls`).

Errors: ``unknown_tool`` (a wire ``error`` naming close names), ``tool_denied`` (the
principal's ``[auth.tool_grants]`` lacks the tool), ``busy``,
``chain_limit`` (a ``timeout`` over ``max_timeout``), ``schema_violation``; everything
that happens once the call is accepted — arguments the schema refuses included — is a
``tool/call/resp`` with ``success: false`` and an ``error_code``.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from a2e_chains.shared import toolbox_for

from a2e_host.chains.secret_refs import HostSecrets
from a2e_host.chains.toolbox import Toolbox
from a2e_host.config import HostConfig, ToolGrant
from a2e_host.exceptions import (
    Busy,
    CallLimitExceeded,
    InvalidMessage,
    SchemaViolation,
    ToolDenied,
    UnknownSession,
    UnknownTool,
)
from a2e_host.messages import Message
from a2e_host.plugin import Plugin, PluginContext, SessionInfo
from a2e_host.tools import ToolRegistry
from a2e_host.tools.messages import (
    TOOL_MESSAGE_TYPES,
    ToolCallRequest,
    ToolListRequest,
    ToolListResponse,
)

from .calls import run_call
from .listing import ToolCatalog

__all__ = ["ToolsPlugin", "METADATA_TOOL_NAMES"]

METADATA_TOOL_NAMES = 100
"""The most tool names the handshake metadata lists (``tool_count`` counts them all)."""


class ToolsPlugin(Plugin):
    """Lists the host's tools and calls them directly.

    Args:
        config: the host configuration (``tools``: the packs to enable; ``root``).
        tools: the tools to serve; built from ``config`` when None.
    """

    capability: ClassVar[str] = "tools"
    namespace: ClassVar[str] = "tool/*"
    priority: ClassVar[int] = 20
    message_types: ClassVar[tuple[type[Message], ...]] = TOOL_MESSAGE_TYPES
    features: ClassVar[tuple[str, ...]] = (
        "tool/list.schemas",
        "tool/list.side_effects",
        "tool/event",
    )
    how_to_serve: ClassVar[str] = (
        "start the host with --tools PACK (e.g. --tools fs,text,json; 'a2e-host tools --all' "
        "lists the installed packs), or tools in its config (A2E_TOOLS)")

    def __init__(self, config: HostConfig, tools: ToolRegistry | None = None) -> None:
        super().__init__(config)
        self.toolbox = Toolbox(tools if tools is not None else toolbox_for(config).tools)
        self.toolbox.config = config  # the "enable pack X" hint of an unknown tool
        # configured secrets resolve in a call's arguments as in a tool node's input
        self.toolbox.secrets = HostSecrets(config.secrets, config.request_secrets,
                                           pack_of=self.toolbox.tools.pack_of)
        self.catalog = ToolCatalog(self.toolbox.tools)

    def serves(self) -> bool:
        """Whether the host has a tool to serve, or a source that registers tools once it
        runs (MCP servers): ``tools`` is not granted when not."""
        return len(self.catalog) > 0 or bool(self.toolbox.tools.sources)

    def metadata(self, session: SessionInfo) -> dict[str, Any]:
        """Namespace, priority, features, plus what the session may use: ``tool_count``
        (every tool, deferred ones included), ``toolkits`` and ``tools`` (the names of
        the non-deferred tools, at most :data:`METADATA_TOOL_NAMES`; ``tools_truncated``
        says when there are more: list them with ``tool/list/req``). A principal with a
        tool grant is counted and shown only the tools it grants."""
        meta = super().metadata(session)
        grant = self.config.tool_grant(session.principal)
        names = self.catalog.names(grant=grant)
        meta["tool_count"] = len(self.catalog.names(include_deferred=True, grant=grant))
        meta["toolkits"] = self.catalog.toolkits(grant)
        meta["tools"] = names[:METADATA_TOOL_NAMES]
        meta["tools_truncated"] = len(names) > METADATA_TOOL_NAMES
        return meta

    async def handle(self, message: Message, ctx: PluginContext) -> None:
        """Answer ``tool/list/req``, start a ``tool/call/req``.

        Raises:
            UnknownTool: the call names no tool of this host.
            ToolDenied: the session's principal has a tool grant that lacks the tool.
            Busy: ``max_parallel`` direct calls are in flight on the session, or the host
                is shutting down.
            CallLimitExceeded: ``timeout`` over ``max_timeout``.
            SchemaViolation: a ``timeout`` under 1, or a listing filter out of bounds.
            InvalidMessage: a type only hosts send, or a request id already in flight.
        """
        if isinstance(message, ToolListRequest):
            tools = self.catalog.select(message, self.config.tool_grant(ctx.session.principal))
            ctx.outbox.send_nowait(ToolListResponse(req_id=message.id, tools=tools))
        elif isinstance(message, ToolCallRequest):
            self._start(message, ctx)
        else:
            raise InvalidMessage(
                f"{message.TYPE!r} is sent by hosts, not agents; send tool/list/req or "
                "tool/call/req"
            )

    def _start(self, request: ToolCallRequest, ctx: PluginContext) -> None:
        started = time.monotonic()
        session = ctx.session
        if request.session_id and request.session_id != session.session_id:
            raise UnknownSession(
                f"session {request.session_id!r} is not this connection's session"
            )
        name = request.tool_name
        grant = self.config.tool_grant(session.principal)
        if self.toolbox.tools.get(name) is None:
            raise self._unknown(name, grant)
        if grant is not None and not grant.allows(name, self.toolbox.tools.pack_of(name)):
            message, hint = grant.refusal(name)
            raise ToolDenied(f"tool/call/req: {message}; {hint}", detail={"tool": name})
        limits = session.limits
        timeout = request.timeout_within(limits.effective.max_timeout)
        if timeout < 1:
            raise SchemaViolation(
                f"tool/call/req timeout must be at least 1 second, got {timeout}; send a "
                "positive int or leave it out",
                detail={"path": "$.timeout"},
            )
        refusal = limits.refusal("max_timeout", timeout)
        if refusal is not None:
            raise CallLimitExceeded(
                f"tool/call/req timeout {timeout} s is over max_timeout "
                f"{refusal.details['limit']} at {refusal.details['scope']} scope; ask for less",
                detail=refusal.details,
            )
        if ctx.closing:
            raise Busy("the host is shutting down and takes no new tool calls", retryable=True)
        in_flight = len(ctx.runs)
        limit = limits.effective.max_parallel
        if in_flight >= limit:
            raise Busy(
                f"{in_flight} tool calls are in flight on this session, the max_parallel "
                f"limit is {limit}; wait for a tool/call/resp before sending more",
                retryable=True,
            )
        if ctx.runs.get(request.id) is not None:
            raise InvalidMessage(
                f"a tool call with request id {request.id!r} is running; use a fresh id"
            )
        log = ctx.log.bind(tool=name, correlation_id=request.correlation_id)
        ctx.start_run(run_call, request, timeout, self.toolbox, session, log, started,
                      name=f"tool/call {request.id}")

    def _unknown(self, name: str, grant: ToolGrant | None) -> UnknownTool:
        shown = name if len(name) <= 100 else name[:100] + "…"
        suggestions = [s for s in self.toolbox.suggest_tool(name[:200])
                       if grant is None or grant.allows(s, self.toolbox.tools.pack_of(s))]
        hint = f"did you mean {', '.join(map(repr, suggestions))}? " if suggestions else ""
        pack = self.toolbox.pack_providing(name) if len(name) <= 200 else None
        if pack:
            hint += f"it is in the tool pack {pack!r}, which this host does not enable; "
        return UnknownTool(
            f"tool/call/req names tool {shown!r}, which this host does not serve; {hint}"
            "send tool/list/req for the tools it serves",
            detail={"tool": shown, "suggestions": suggestions},
        )
