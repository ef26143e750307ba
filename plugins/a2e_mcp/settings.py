"""The ``[mcp]`` configuration table: the MCP servers whose tools the host serves, and who
may register more (README "MCP servers as tool sources"; PROTOCOL.md §12).

Layer: plugin, pure (no I/O). ``HostConfig.mcp`` carries the table as written; this module
turns it into :class:`McpSettings` or refuses it with one sentence naming the key::

    [mcp]
    start_timeout = 10            # seconds host start waits for the servers' initialize
    register_commands = [["mcp-server-time"]]   # commands agents may register (exact)
    max_registered = 8            # servers agents may have registered at once

    [mcp.servers.time]
    command = ["mcp-server-time", "--local-timezone", "UTC"]
    env = { TZ = "UTC" }          # added to HOME, LOGNAME, PATH, SHELL, TERM, USER
    tool_allow_list = ["convert_time"]
    timeout = 30                  # seconds one tool call may take

    [mcp.servers.remote]
    url = "http://127.0.0.1:8000/mcp"          # streamable HTTP
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import msgspec

from a2e_host.sizes import clip

__all__ = ["McpSettings", "ServerSettings", "parse_settings", "parse_server", "NAME_PATTERN"]

NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
"""A server name: its tools are ``NAME.tool``, so no dot."""


class ServerSettings(msgspec.Struct, frozen=True, kw_only=True):
    """One MCP server.

    Attributes:
        name: the server's name; its tools are registered as ``name.tool``.
        command: the program and its arguments (stdio transport), empty with ``url``.
        env: variables added to the child's small default environment (``HOME``,
            ``LOGNAME``, ``PATH``, ``SHELL``, ``TERM``, ``USER``); nothing else of the
            host's environment reaches it.
        cwd: the child's working directory, ``""``: the host's.
        url: a streamable-HTTP endpoint (``http://…/mcp``), empty with ``command``.
        tool_allow_list: the server's tools to serve (its own names); empty: all.
        timeout: float seconds one tool call may take (the node's own deadline may be
            shorter); a call that passes it is cancelled (``notifications/cancelled``).
        registered: added by an agent's ``mcp/server/register/req``, not by configuration.
    """

    name: str
    command: tuple[str, ...] = ()
    env: dict[str, str] = {}
    cwd: str = ""
    url: str = ""
    tool_allow_list: tuple[str, ...] = ()
    timeout: float = 60.0
    registered: bool = False

    @property
    def transport(self) -> str:
        """``"stdio"`` or ``"streamable-http"``."""
        return "streamable-http" if self.url else "stdio"


class McpSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The ``[mcp]`` table.

    Attributes:
        servers: the configured servers, by name.
        start_timeout: float seconds host start waits for every server's ``initialize``
            and tool listing; a server slower than that does not delay the start (its
            tools appear once it answers).
        ping_interval: float seconds between two health pings of a ready server; a ping
            unanswered within ``ping_timeout`` marks it hung (it is restarted).
        ping_timeout: float seconds.
        restart_initial_delay / restart_max_delay: the restart backoff, float seconds
            (doubling from the first to the second).
        register_commands: the exact commands (program and arguments) an agent may
            register with ``mcp/server/register/req``; empty (the default): none.
        register_urls: the exact URLs an agent may register; empty: none.
        max_registered: the most servers agents may have registered at once (8).
    """

    servers: dict[str, ServerSettings] = {}
    start_timeout: float = 10.0
    ping_interval: float = 5.0
    ping_timeout: float = 5.0
    restart_initial_delay: float = 0.5
    restart_max_delay: float = 30.0
    register_commands: tuple[tuple[str, ...], ...] = ()
    register_urls: tuple[str, ...] = ()
    max_registered: int = 8

    @property
    def allows_register(self) -> bool:
        """Whether agents may register servers at all (an allowlist is configured)."""
        return bool(self.register_commands or self.register_urls)


_TOP_KEYS = ("servers", "start_timeout", "ping_interval", "ping_timeout",
             "restart_initial_delay", "restart_max_delay", "register_commands", "register_urls",
             "max_registered")
_SERVER_KEYS = ("command", "env", "cwd", "url", "tool_allow_list", "timeout")


def shown_url(url: str, width: int = 200) -> str:
    """``url`` for a message: without its ``user:password@`` part (it may carry a
    token), quoted and cut to about ``width`` characters."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc.rpartition("@")[2]
        url = urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        url = re.sub(r"//[^/@]*@", "//", url)
    return clip(url, width)


def _type(value: Any) -> str:
    return type(value).__name__


def _seconds(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"{where} must be a number of seconds > 0, got {value!r}")
    return float(value)


def _strings(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise ValueError(f"{where} must be a list of strings, got a {_type(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ValueError(f"{where} must be a list of strings; item {i} is a "
                             f"{_type(item)}")
    return tuple(value)


def parse_server(name: str, table: Mapping[str, Any], *, where: str,
                 registered: bool = False) -> ServerSettings:
    """One server's settings from its table (``command``/``env``/``cwd``/``url``/
    ``tool_allow_list``/``timeout``).

    Raises:
        ValueError: a bad name, an unknown key, neither or both of ``command`` and ``url``,
            a value of the wrong type; the message names ``where`` and the key.
    """
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"{where}: the server name {name!r} must be a letter then up to 63 "
                         "letters, digits, '_' or '-' (its tools are called NAME.tool)")
    unknown = sorted(set(table) - set(_SERVER_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}; known keys: "
                         + ", ".join(_SERVER_KEYS))
    command = _strings(f"{where}.command", table.get("command", []))
    url = table.get("url", "")
    if not isinstance(url, str):
        raise ValueError(f"{where}.url must be a string, got a {_type(url)}")
    if bool(command) == bool(url):
        raise ValueError(f"{where}: give either command = [program, args...] (stdio) or "
                         "url = \"http://…\" (streamable HTTP)")
    if url and not url.startswith(("http://", "https://")):
        raise ValueError(f"{where}.url must start with http:// or https://, got "
                         f"{shown_url(url)}")
    env = table.get("env", {})
    if not isinstance(env, dict):
        raise ValueError(f"{where}.env must be a table of strings, got a {_type(env)}")
    for key, value in env.items():
        if not isinstance(key, str) or not isinstance(value, str):
            # never the values: an env table is where tokens live
            raise ValueError(f"{where}.env must be a table of strings; the value of "
                             f"{clip(str(key))} is a {_type(value)}")
    cwd = table.get("cwd", "")
    if not isinstance(cwd, str):
        raise ValueError(f"{where}.cwd must be a string, got a {_type(cwd)}")
    return ServerSettings(
        name=name, command=command, env=dict(env), cwd=cwd, url=url,
        tool_allow_list=_strings(f"{where}.tool_allow_list", table.get("tool_allow_list", [])),
        timeout=_seconds(f"{where}.timeout", table.get("timeout", 60.0)),
        registered=registered,
    )


def parse_settings(table: Mapping[str, Any]) -> McpSettings:
    """:class:`McpSettings` from ``HostConfig.mcp`` (the ``[mcp]`` table).

    Raises:
        ValueError: an unknown key or a bad value, named as ``[mcp] …``.
    """
    unknown = sorted(set(table) - set(_TOP_KEYS))
    if unknown:
        raise ValueError(f"[mcp]: unknown key {unknown[0]!r}; known keys: " + ", ".join(_TOP_KEYS))
    servers_table = table.get("servers", {})
    if not isinstance(servers_table, dict):
        raise ValueError("[mcp] servers must be tables [mcp.servers.NAME]")
    servers = {}
    for name, server in servers_table.items():
        if not isinstance(server, dict):
            raise ValueError(f"[mcp.servers.{name}] must be a table")
        servers[name] = parse_server(name, server, where=f"[mcp.servers.{name}]")
    commands = table.get("register_commands", [])
    if not isinstance(commands, list):
        raise ValueError("[mcp] register_commands must be a list of commands (lists of strings)")
    numbers = {key: _seconds(f"[mcp] {key}", table[key])
               for key in ("start_timeout", "ping_interval", "ping_timeout",
                           "restart_initial_delay", "restart_max_delay") if key in table}
    limit = table.get("max_registered", 8)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"[mcp] max_registered must be an integer >= 0, got {limit!r}")
    return McpSettings(
        servers=servers,
        max_registered=limit,
        register_commands=tuple(_strings("[mcp] register_commands[]", c) for c in commands),
        register_urls=_strings("[mcp] register_urls", table.get("register_urls", [])),
        **numbers,
    )
