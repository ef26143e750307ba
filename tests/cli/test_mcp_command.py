"""``a2e-host mcp`` (issue 20, PROTOCOL.md §12) driven by the official ``mcp`` SDK's client
session: over stdio, the real CLI as a child process (``stdio_client``), and over
streamable HTTP (``--port 0``, ``streamable_http_client``). The MCP client lists the tools
(``run_chain``, ``validate_chain``, one per active skill), runs a chain and a skill with
their events as progress notifications, checks a chain, and cancels a call: the host
cancels the chain (its log says so).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.support import REPO
from tests.support.process import host_env

ARGS = ["-m", "a2e_host", "mcp", "--tools", "conformance", "--skills",
        str(REPO / "conformance" / "skills"), "--log-level", "info"]
WAIT = 30.0
"""Generous bound, seconds, on anything a test waits for (a loaded 2-core box)."""


@asynccontextmanager
async def mcp_session(log: Path) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session with ``a2e-host mcp`` (stdio); its stderr in
    ``log``."""
    params = StdioServerParameters(command=sys.executable, args=ARGS, env=host_env(),
                                   cwd=str(REPO))
    with log.open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write) as session:
            with anyio.fail_after(WAIT):
                await session.initialize()
            yield session


def _echo_chain(value: Any) -> dict[str, Any]:
    return {"nodes": [{"node_id": "e", "kind": "tool", "name": "echo", "input": {"v": value},
                       "next_node": "up"},
                      {"node_id": "up", "kind": "tool", "name": "upper",
                       "input_map": {"text": "e.output.v"}}],
            "entry_node": "e"}


@pytest.mark.asyncio
async def test_an_mcp_client_lists_tools_runs_a_chain_and_a_skill_with_progress(
        tmp_path: Path) -> None:
    async with mcp_session(tmp_path / "stderr.log") as session:
        listed = await session.list_tools()
        tools = {t.name: t for t in listed.tools}
        assert sorted(tools) == ["conformance_shout", "run_chain", "validate_chain"]
        assert tools["run_chain"].input_schema["required"] == ["nodes", "entry_node"]
        assert tools["conformance_shout"].input_schema == {
            "type": "object", "required": ["parts"],
            "properties": {"parts": {"type": "array"}}}  # the active version's (2)

        progress: list[tuple[float, str | None]] = []

        async def note(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, message))

        with anyio.fail_after(WAIT):
            ran = await session.call_tool("run_chain", _echo_chain("quiet"),
                                          progress_callback=note)
        assert ran.is_error is False
        resp = ran.structured_content
        assert resp is not None and resp["type"] == "chain/resp" and resp["success"] is True
        assert resp["final_output"] == {"text": "QUIET"}
        assert json.loads(ran.content[0].text) == resp  # type: ignore[union-attr]
        assert progress == [(1.0, "e: start"), (2.0, "e: done"), (3.0, "up: start"),
                            (4.0, "up: done")]

        with anyio.fail_after(WAIT):
            shout = await session.call_tool("conformance_shout", {"parts": ["a", "b"]})
        assert shout.is_error is False
        assert shout.structured_content is not None
        assert shout.structured_content["final_output"] == {"v": 2, "text": "AB"}

        with anyio.fail_after(WAIT):
            checked = await session.call_tool("validate_chain", {
                "nodes": [{"node_id": "e", "kind": "tool", "name": "ecko"}],
                "entry_node": "e"})
        assert checked.is_error is True
        verdict = checked.structured_content
        assert verdict is not None and verdict["valid"] is False
        (problem,) = verdict["errors"]
        assert problem["message"] == "unknown tool 'ecko'; did you mean 'echo'?"

        with anyio.fail_after(WAIT):
            failed = await session.call_tool("run_chain", {"nodes": "no", "entry_node": "e"})
        assert failed.is_error is True
        assert "not a valid chain/req body" in failed.content[0].text  # type: ignore[union-attr]


@pytest.mark.asyncio
async def test_cancelling_an_mcp_call_cancels_its_chain(tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    async with mcp_session(log) as session:
        started = anyio.Event()

        async def note(value: float, total: float | None, message: str | None) -> None:
            if message == "s: start":
                started.set()

        chain = {"nodes": [{"node_id": "s", "kind": "tool", "name": "sleep",
                            "input": {"seconds": 60}}], "entry_node": "s", "timeout": 120}
        async with anyio.create_task_group() as tg:
            async def call() -> None:
                await session.call_tool("run_chain", chain, progress_callback=note)
                pytest.fail("the cancelled call answered")

            tg.start_soon(call)
            with anyio.fail_after(WAIT):
                await started.wait()
            tg.cancel_scope.cancel()  # the SDK sends notifications/cancelled
        # the session still serves, and the host logged the chain cancelled
        with anyio.fail_after(WAIT):
            after = await session.call_tool("run_chain", _echo_chain("still"))
        assert after.structured_content is not None
        assert after.structured_content["final_output"] == {"text": "STILL"}
        with anyio.fail_after(WAIT):
            while True:
                finished = [json.loads(line) for line in log.read_text().splitlines()
                            if '"chain finished"' in line]
                cancelled = [f for f in finished if f.get("code") == "cancelled"]
                if cancelled:
                    break
                await anyio.sleep(0.05)
    (line,) = cancelled
    assert line["success"] is False and line["nodes_run"] == 1


async def _http_url(process: Any) -> tuple[str, bytes]:
    """The URL ``a2e-host mcp --port 0`` announced on stderr, and the stderr read so far."""
    assert process.stderr is not None
    seen = b""
    with anyio.fail_after(WAIT):
        while not (found := re.search(rb"listening on (http://\S+/mcp)", seen)):
            seen += await process.stderr.receive()
    return found.group(1).decode(), seen


@pytest.mark.asyncio
async def test_mcp_over_streamable_http_runs_a_chain(tmp_path: Path) -> None:
    process = await anyio.open_process(
        [sys.executable, *ARGS, "--port", "0"], stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO, env=host_env())
    try:
        assert process.stderr is not None
        url, _ = await _http_url(process)
        async with streamable_http_client(url) as (read, write, *_), \
                ClientSession(read, write) as session:
            with anyio.fail_after(WAIT):
                await session.initialize()
                names = sorted(t.name for t in (await session.list_tools()).tools)
                ran = await session.call_tool("run_chain", _echo_chain("web"))
        assert names == ["conformance_shout", "run_chain", "validate_chain"]
        assert ran.structured_content is not None
        assert ran.structured_content["final_output"] == {"text": "WEB"}
    finally:
        process.terminate()  # SIGTERM: uvicorn stops gracefully, then the host
        with anyio.fail_after(WAIT):
            code = await process.wait()
            rest = b"".join([chunk async for chunk in process.stderr])
    assert code == 0, rest[-2000:]
    assert b"Traceback" not in rest, rest[-2000:]


@pytest.mark.asyncio
async def test_sigterm_stops_the_stdio_server_while_its_stdin_stays_open() -> None:
    process = await anyio.open_process([sys.executable, *ARGS], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       cwd=REPO, env=host_env())
    assert process.stdin is not None and process.stdout is not None
    await process.stdin.send(json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}).encode() + b"\n")
    with anyio.fail_after(WAIT):
        answer = await process.stdout.receive()
    assert json.loads(answer.splitlines()[0])["id"] == 1
    process.terminate()
    with anyio.fail_after(WAIT):
        code = await process.wait()
    assert process.stderr is not None
    with anyio.fail_after(WAIT):
        err = b"".join([chunk async for chunk in process.stderr])
    assert code == 0, err[-2000:]
    assert b"Fatal Python error" not in err and b"Traceback" not in err, err[-2000:]


@pytest.mark.asyncio
async def test_an_http_client_that_disconnects_mid_run_has_its_chain_cancelled(
        tmp_path: Path) -> None:
    # a client that goes away (killed, network gone) sends no notifications/cancelled:
    # its connection closing is all the server sees
    import httpx2 as httpx

    process = await anyio.open_process(
        [sys.executable, *ARGS, "--port", "0"], stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO, env=host_env())
    headers = {"accept": "application/json, text/event-stream",
               "content-type": "application/json", "mcp-protocol-version": "2025-11-25"}
    try:
        url, log = await _http_url(process)
        async with httpx.AsyncClient(timeout=WAIT, headers=headers) as http:
            init = await http.post(url, json={
                "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"}}})
            assert init.status_code == 200, init.text
            if "mcp-session-id" in init.headers:
                http.headers["mcp-session-id"] = init.headers["mcp-session-id"]
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "run_chain", "_meta": {"progressToken": "p"}, "arguments": {
                    "nodes": [{"node_id": "s", "kind": "tool", "name": "sleep",
                               "input": {"seconds": 60}}],
                    "entry_node": "s", "timeout": 120}}}
            with anyio.fail_after(WAIT):
                async with http.stream("POST", url, json=call) as streamed:
                    async for line in streamed.aiter_lines():
                        if "s: start" in line:
                            break  # leaving the block closes the connection mid-answer
        assert process.stderr is not None
        with anyio.fail_after(WAIT):
            while b'"chain finished"' not in log:
                log += await process.stderr.receive()
    finally:
        process.terminate()
        with anyio.fail_after(WAIT):
            await process.wait()
    (finished,) = [json.loads(line) for line in log.splitlines() if b'"chain finished"' in line]
    assert (finished["code"], finished["nodes_run"]) == ("cancelled", 1), finished


@pytest.mark.asyncio
async def test_a_call_past_max_parallel_running_chains_is_refused_in_mcp_terms(
        tmp_path: Path) -> None:
    async with mcp_session(tmp_path / "stderr.log") as session:
        started: list[str] = []
        all_started = anyio.Event()

        async def note(value: float, total: float | None, message: str | None) -> None:
            if message == "s: start":
                started.append("s")
                if len(started) == 4:  # max_parallel's default
                    all_started.set()

        chain = {"nodes": [{"node_id": "s", "kind": "tool", "name": "sleep",
                            "input": {"seconds": 60}}], "entry_node": "s", "timeout": 120}
        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(lambda: session.call_tool("run_chain", chain,
                                                        progress_callback=note))
            with anyio.fail_after(WAIT):
                await all_started.wait()
                refused = await session.call_tool("run_chain", _echo_chain("one more"))
            tg.cancel_scope.cancel()
        assert refused.is_error is True
        assert refused.content[0].text == (  # type: ignore[union-attr]
            "the host runs at most 4 chains at once for its MCP clients ([limits] max_parallel) "
            "and all 4 are running; call again once one has answered")
        with anyio.fail_after(WAIT):  # the cancelled ones freed their places
            while True:
                after = await session.call_tool("run_chain", _echo_chain("now"))
                if not after.is_error:
                    break
                await anyio.sleep(0.1)
        assert after.structured_content is not None
        assert after.structured_content["final_output"] == {"text": "NOW"}
