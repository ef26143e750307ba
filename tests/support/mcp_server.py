"""A small MCP server written with the official ``mcp`` SDK's server API (``MCPServer``),
for the tests of MCP servers as tool sources: run as ``python tests/support/mcp_server.py``
(stdio), or with ``--http PORT`` (streamable HTTP at ``http://127.0.0.1:PORT/mcp``).

Tools:
    echo(value) -> {"value": value}
    progress(steps) -> {"steps": steps}, after ``steps`` progress notifications
        (``progress`` 1..steps of ``total`` steps, message ``step i``).
    wait() -> never answers: reports ``waiting`` once, then waits until cancelled
        (``notifications/cancelled``), which it counts.
    stats(cancelled) -> {"pid": the process id, "cancelled": calls cancelled so far},
        once that count reached ``cancelled`` (or after 10 s).
    fail(message) -> an ``isError`` result with ``message``.
    crash() -> the process exits at once with status 3.
    hang() -> blocks the server's event loop for 60 s (it answers nothing, pings included).
    getenv(name) -> {"value": the variable's value in the server's environment, or null}.
    big(size) -> a text result of ``size`` characters ``x`` (one long line on the wire).
    spawn() -> {"pid": the pid of a child it started in its process group, which sleeps
        for 10 minutes and outlives the server unless something kills it}.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("a2e-test-server", version="1.0")
_cancelled = 0
_waiters: list[anyio.Event] = []  # stats calls waiting for the count to grow



@server.tool()
def echo(value: str) -> dict[str, str]:
    """Echo the value."""
    return {"value": value}


@server.tool()
async def progress(steps: int, ctx: Context) -> dict[str, int]:
    """Report ``steps`` progress notifications, then answer."""
    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps, f"step {i}")
    return {"steps": steps}


@server.tool()
async def wait(ctx: Context) -> dict[str, str]:
    """Wait until cancelled."""
    global _cancelled
    await ctx.report_progress(0, None, "waiting")
    try:
        await anyio.sleep(600)
    except anyio.get_cancelled_exc_class():
        _cancelled += 1
        for waiter in _waiters:
            waiter.set()
        _waiters.clear()
        raise
    return {"waited": "600"}


@server.tool()
async def stats(cancelled: int = 0) -> dict[str, int]:
    """The process id and the number of cancelled calls, once it reached ``cancelled``."""
    with anyio.move_on_after(10):
        while _cancelled < cancelled:
            waiter = anyio.Event()
            _waiters.append(waiter)
            await waiter.wait()
    return {"pid": os.getpid(), "cancelled": _cancelled}


@server.tool()
def fail(message: str) -> str:
    """Fail with ``message`` (an isError result)."""
    raise ToolError(message)


@server.tool()
def crash() -> str:
    """Exit the process at once."""
    os._exit(3)


@server.tool()
async def hang() -> str:
    """Block the event loop (nothing is answered) for a minute."""
    time.sleep(60)  # noqa: ASYNC251 - blocking the loop is the point: a hung server
    return "woke"


@server.tool()
def getenv(name: str) -> dict[str, str | None]:
    """The environment variable ``name`` (null when unset)."""
    return {"value": os.environ.get(name)}


@server.tool()
def big(size: int) -> str:
    """``size`` characters."""
    return "x" * size


@server.tool()
def spawn() -> dict[str, int]:
    """Start a child that outlives the server (it ignores the closed stdin)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    return {"pid": child.pid}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:  # streamable HTTP on 127.0.0.1:PORT/mcp
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
