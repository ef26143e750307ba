"""Hosts configured with MCP servers (PROTOCOL.md §12): the configuration file, the real
``a2e-host serve`` on it, and the ``mcp/*`` messages an agent sends.

The MCP servers are real processes: the unmodified ``mcp-server-time`` from PyPI, and
:mod:`tests.support.mcp_server` (written with the official SDK's server API).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection

from tests.support import REPO
from tests.support.process import CLI
from tests.support.ws import receive, send, serving_sync

__all__ = ["TEST_SERVER", "TIME_SERVER", "hello_mcp", "list_servers", "serving_mcp_host",
           "toml_of"]

TEST_SERVER = [sys.executable, str(REPO / "tests" / "support" / "mcp_server.py")]
"""The test MCP server's command (stdio)."""

TIME_SERVER = [shutil.which("mcp-server-time") or "mcp-server-time", "--local-timezone", "UTC"]
"""The reference time server from PyPI, as installed with the ``test`` extra."""


def _value(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, dict) else (
        "{ " + ", ".join(f"{k} = {_value(v)}" for k, v in value.items()) + " }")


def toml_of(tools: list[str], mcp: dict[str, Any], servers: dict[str, dict[str, Any]]) -> str:
    """A configuration file: ``tools`` packs, the ``[mcp]`` keys, one
    ``[mcp.servers.NAME]`` table per server."""
    lines = [f"tools = {_value(tools)}", "", "[mcp]"]
    lines += [f"{key} = {_value(value)}" for key, value in mcp.items()]
    for name, table in servers.items():
        lines += ["", f"[mcp.servers.{name}]"]
        lines += [f"{key} = {_value(value)}" for key, value in table.items()]
    return "\n".join(lines) + "\n"


@contextmanager
def serving_mcp_host(directory: Path, text: str) -> Iterator[str]:
    """Write ``text`` as ``host.toml`` in ``directory``, serve it with ``a2e-host serve``
    on a free port; yield the URL (the host listens once its MCP servers answered, or
    ``start_timeout`` passed)."""
    config = directory / "host.toml"
    config.write_text(text)
    with serving_sync([*CLI, "serve", "--config", str(config), "--port", "0"]) as url:
        yield url


async def hello_mcp(ws: ClientConnection, caps: tuple[str, ...] = ("chains", "tools", "mcp")
                    ) -> dict[str, Any]:
    """Handshake asking ``caps``; the accepting response."""
    await send(ws, {"type": "handshake/req", "id": "h", "agent_caps": list(caps)})
    resp = await receive(ws)
    assert resp["type"] == "handshake/resp" and resp["ok"], resp
    return resp


async def list_servers(ws: ClientConnection) -> dict[str, Any]:
    """``mcp/server/list/req`` → its ``mcp/server/list/resp``."""
    await send(ws, {"type": "mcp/server/list/req", "id": "l"})
    resp = await receive(ws)
    assert resp["type"] == "mcp/server/list/resp", resp
    return resp
