"""``mcp/server/register/req``: an agent's ``MCPServerConfig`` checked against the
configured allowlist (PROTOCOL.md §12).

Layer: plugin, pure. Spawning a program an agent names is never granted by default: only
a command listed exactly in ``[mcp] register_commands`` (program and every argument), or
a URL listed exactly in ``register_urls``, may be registered, and with no ``env``,
``cwd`` or ``headers`` of the agent's (they could change what the program runs).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from a2e_host.sizes import clip

from .settings import McpSettings, ServerSettings, parse_server, shown_url

__all__ = ["registration_of"]

_HTTP_TRANSPORTS = ("sse", "streamable-http", "http")


def registration_of(config: Mapping[str, Any], settings: McpSettings,
                    taken: Collection[str], registered: int = 0,
                    packs: Collection[str] = ()) -> tuple[str, ServerSettings | None]:
    """The server an agent asks to register, or why not.

    Args:
        config: the request's ``config`` (an SDK ``MCPServerConfig``).
        settings: the ``[mcp]`` settings (the allowlists).
        taken: the names of the servers the host has.
        registered: how many of them agents registered.
        packs: the names of the tool packs installed or enabled: a server may not take
            one (its tools ``NAME.tool`` would match grants and secret scopes
            ``NAME.*`` written for the pack).

    Returns:
        ``("", settings)`` when allowed, else ``(one sentence saying what to fix, None)``.
    """
    if not settings.allows_register:
        return ("this host does not let agents register MCP servers; an operator lists "
                "the allowed commands in [mcp] register_commands", None)
    if registered >= settings.max_registered:
        return (f"agents have registered {registered} MCP servers, the most this host allows "
                "([mcp] max_registered); unregister one first", None)
    name = config.get("name") or config.get("server_id") or ""
    if not isinstance(name, str) or not name:
        return "config.name is required: the server's tools are called NAME.tool", None
    if name in taken or name in settings.servers:
        return f"an MCP server named {clip(name)} exists already; pick another name", None
    if name in packs:
        return (f"config.name {clip(name)} is the name of a tool pack: its tools would pass "
                "for the pack's in grants and secret scopes; pick another name", None)
    for key in ("env", "cwd", "headers"):
        if config.get(key):
            return (f"config.{key} must be empty: registered servers run with the host's "
                    f"own settings only", None)
    transport = config.get("transport", "stdio")
    cmd = config.get("cmd") or []
    url = config.get("url") or ""
    table: dict[str, Any] = {}
    if transport == "stdio":
        if not isinstance(cmd, list) or tuple(cmd) not in settings.register_commands:
            return (f"config.cmd {clip(repr(cmd), 200)} is not one of the commands this "
                    "host lets agents register ([mcp] register_commands)", None)
        table["command"] = cmd
    elif transport in _HTTP_TRANSPORTS:
        if url not in settings.register_urls:
            return (f"config.url {shown_url(str(url))} is not one of the URLs this host "
                    "lets agents register ([mcp] register_urls)", None)
        table["url"] = url
    else:
        return f"config.transport {clip(str(transport))} is not stdio or streamable-http", None
    if "timeout" in config:
        table["timeout"] = config["timeout"]
    if config.get("tool_allow_list"):
        table["tool_allow_list"] = config["tool_allow_list"]
    try:
        return "", parse_server(name, table, where="config", registered=True)
    except ValueError as exc:
        return str(exc), None
