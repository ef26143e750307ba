"""The ``mcp`` capability's messages: ``mcp/server/list``, ``register``, ``unregister``
(A2E ``a2e/caps/mcp/protocol.py``, SDK commit c8fc1f87; PROTOCOL.md §12).

Layer: plugin, plain msgspec Structs. Field names, order and defaults are the SDK's
(``MCPServerListRequest`` … ``MCPServerUnregisterResponse``); a server is described as
the SDK's ``MCPServerInfo`` (:class:`ServerInfo`), a registration carries an
``MCPServerConfig`` as a plain object (``config``) as the SDK sends it. The SDK's other
``mcp/*`` types (resources, prompts, sampling, roots) are not served: they get
``unknown_type``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from a2e_host.messages import Message

__all__ = [
    "MCP_MESSAGE_TYPES",
    "ServerInfo",
    "ServerListRequest",
    "ServerListResponse",
    "ServerRegisterRequest",
    "ServerRegisterResponse",
    "ServerUnregisterRequest",
    "ServerUnregisterResponse",
]


class ServerInfo(msgspec.Struct, kw_only=True):
    """One MCP server's state (SDK ``MCPServerInfo``).

    Attributes:
        server_id: its name (the ``NAME`` of ``NAME.tool``).
        name: its name again (the SDK keeps both).
        transport: ``stdio`` or ``streamable-http``.
        status: ``connecting``, ``ready``, ``error`` (down; restarting with backoff) or
            ``disconnected`` (stopped).
        mcp_version: the MCP protocol version negotiated.
        server_name / server_version: what the server said it is.
        tools_count: the tools registered from it.
        last_ping_ms: the last health ping's round trip, float milliseconds.
        error: why it is not ready, one sentence; ``""`` when ready.
        connected_at: Unix seconds of its last successful ``initialize``; 0 before.
    """

    server_id: str
    name: str
    transport: str
    status: str = "disconnected"
    mcp_version: str = ""
    server_name: str = ""
    server_version: str = ""
    tools_count: int = 0
    resources_count: int = 0
    prompts_count: int = 0
    last_ping_ms: float = 0.0
    error: str = ""
    connected_at: float = 0.0


class ServerListRequest(Message, tag="mcp/server/list/req", kw_only=True):
    """Agent → host: the MCP servers and their state (``status_filter``: only those with
    that ``status``; ``""`` all)."""

    TYPE: ClassVar[str] = "mcp/server/list/req"
    status_filter: str = ""


class ServerListResponse(Message, tag="mcp/server/list/resp", kw_only=True):
    """Host → agent: ``servers`` as :class:`ServerInfo` objects, sorted by name."""

    TYPE: ClassVar[str] = "mcp/server/list/resp"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    servers: list[ServerInfo] = []


class ServerRegisterRequest(Message, tag="mcp/server/register/req", kw_only=True):
    """Agent → host: connect one more MCP server (only from the configured allowlist).

    Attributes:
        config: an SDK ``MCPServerConfig``: ``name``, ``transport`` (``stdio``, or
            ``sse``/``streamable-http`` with ``url``), ``cmd``, ``url``, ``timeout``,
            ``tool_allow_list``; ``env``, ``cwd`` and ``headers`` must be empty.
    """

    TYPE: ClassVar[str] = "mcp/server/register/req"
    config: dict[str, Any] = {}


class ServerRegisterResponse(Message, tag="mcp/server/register/resp", kw_only=True):
    """Host → agent: ``ok`` with the server's state once it answered ``initialize``, or
    ``ok: false`` and ``error``."""

    TYPE: ClassVar[str] = "mcp/server/register/resp"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    ok: bool = False
    server: dict[str, Any] = {}
    error: str = ""


class ServerUnregisterRequest(Message, tag="mcp/server/unregister/req", kw_only=True):
    """Agent → host: stop a server an agent registered and remove its tools."""

    TYPE: ClassVar[str] = "mcp/server/unregister/req"
    server_id: str = ""


class ServerUnregisterResponse(Message, tag="mcp/server/unregister/resp", kw_only=True):
    """Host → agent: whether it was removed."""

    TYPE: ClassVar[str] = "mcp/server/unregister/resp"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    ok: bool = False
    server_id: str = ""


MCP_MESSAGE_TYPES: tuple[type[Message], ...] = (
    ServerListRequest,
    ServerListResponse,
    ServerRegisterRequest,
    ServerRegisterResponse,
    ServerUnregisterRequest,
    ServerUnregisterResponse,
)
"""What the ``mcp`` plugin declares (the host decodes them with the core types)."""
