"""Issue cases against the real CLI and the real chains plugin, over stdio and WebSocket."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from a2e_host.chains.messages import ChainEvent, ChainResponse
from a2e_host.client import Client, connect_ws, spawn_stdio
from tests.support.process import STARTUP
from tests.support.ws import serving_sync

PY = sys.executable
EXTRA = [PY, "-m", "tests.support.extra_tools_host"]


def lines(*messages: dict[str, Any]) -> str:
    return "".join(json.dumps(m) + "\n" for m in messages)


HELLO = {"type": "handshake/req", "id": "h", "agent_caps": ["chains"]}


def test_a_printing_tool_leaves_stdout_pure_ndjson() -> None:
    chain = {"type": "chain/req", "id": "c", "entry_node": "n",
             "nodes": [{"node_id": "n", "kind": "tool", "name": "noisy", "input": {"v": 1}}]}
    done = subprocess.run([*EXTRA, "stdio"], input=lines(HELLO, chain), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert [m["type"] for m in out] == [
        "handshake/resp", "chain/event", "chain/event", "chain/resp",
    ]
    assert out[-1]["outputs"] == {"n": {"v": 1}}
    assert "forged" in done.stderr and "raw bytes on fd 1" in done.stderr


async def open_for_writing(fifo: Path) -> int:
    """The write end of ``fifo``, once something opened it for reading (bounded: opening it
    without blocking fails with ENXIO until then)."""
    with anyio.fail_after(30):
        while True:
            try:
                return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    raise
            await anyio.sleep(0.01)


@pytest.mark.asyncio
async def test_a_blocking_tool_does_not_delay_a_ping_on_the_same_connection(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "release"
    os.mkfifo(fifo)
    with anyio.fail_after(60):
        async with spawn_stdio([*EXTRA, "stdio"], stderr="capture",
                               handshake_timeout=STARTUP) as client:
            run = client.run_chain(
                [{"node_id": "b", "kind": "tool", "name": "block", "input": {"until": str(fifo)}}],
                "b",
            )
            await run.start()
            # the tool has opened the FIFO: its thread now blocks in read() until we close it,
            # so a ping queued behind that thread would never be answered (ping() raises)
            writer = await open_for_writing(fifo)
            try:
                await client.ping()
            finally:
                os.write(writer, b"go")
                os.close(writer)
            response = await run.result()
    assert response.success is True and response.outputs == {"b": {"read": "go"}}


async def slow_and_fast(client: Client) -> None:
    slow = client.run_chain(
        [{"node_id": "s", "kind": "tool", "name": "sleep", "input": {"seconds": 1, "value": 1}},
         {"node_id": "t", "kind": "tool", "name": "echo", "input_map": {"v": "s.output.value"}}],
        "s",
    )
    fast = client.run_chain(
        [{"node_id": "a", "kind": "tool", "name": "add", "input": {"a": 2, "b": 3}}], "a"
    )
    finished: list[str] = []
    seen: dict[str, list[Any]] = {}

    async def collect(run: Any, name: str) -> None:
        async for message in run:
            seen.setdefault(name, []).append(message)
        finished.append(name)

    await slow.start()
    async with anyio.create_task_group() as tg:
        tg.start_soon(collect, slow, "slow")
        tg.start_soon(collect, fast, "fast")
    assert finished == ["fast", "slow"]
    for name, run in (("slow", slow), ("fast", fast)):
        messages = seen[name]
        assert isinstance(messages[-1], ChainResponse) and messages[-1].success
        events = [m for m in messages if isinstance(m, ChainEvent)]
        assert {m.req_id for m in messages} == {run.req_id}
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert seen["fast"][-1].outputs == {"a": {"sum": 5}}
    assert seen["slow"][-1].outputs["t"] == {"v": 1}


@pytest.mark.asyncio
async def test_slow_and_fast_chains_on_one_stdio_connection() -> None:
    argv = [PY, "-m", "a2e_host", "stdio", "--tools", "conformance"]
    with anyio.fail_after(30):
        async with spawn_stdio(argv, stderr="capture", handshake_timeout=STARTUP) as client:
            await slow_and_fast(client)


@pytest.mark.asyncio
async def test_slow_and_fast_chains_on_one_websocket_connection() -> None:
    argv = [PY, "-m", "a2e_host", "serve", "--port", "0", "--tools", "conformance"]
    with serving_sync(argv) as url:
        with anyio.fail_after(30):
            async with connect_ws(url) as client:
                await slow_and_fast(client)


def test_every_node_is_logged_at_debug_level() -> None:
    chain = {"type": "chain/req", "id": "c", "entry_node": "a", "nodes": [
        {"node_id": "a", "kind": "tool", "name": "add", "input": {"a": 1, "b": 2},
         "next_node": "b"},
        {"node_id": "b", "kind": "tool", "name": "fail", "input": {"message": "no"},
         "on_error": "skip"},
    ]}
    argv = [PY, "-m", "a2e_host", "stdio", "--tools", "conformance", "--log-format", "json",
            "--log-level", "debug"]
    done = subprocess.run(argv, input=lines(HELLO, chain), capture_output=True, text=True,
                          timeout=60)
    logs = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    nodes = [(e["event"], e.get("node_id")) for e in logs if e.get("level") == "debug"
             and e["event"].startswith("node ")]
    assert nodes == [("node started", "a"), ("node done", "a"),
                     ("node started", "b"), ("node failed", "b")]
    assert all(e["req_id"] == "c" and e["chain_id"] for e in logs
               if e["event"].startswith("node "))
    info = subprocess.run(argv[:-1] + ["info"], input=lines(HELLO, chain), capture_output=True,
                          text=True, timeout=60)
    assert '"node started"' not in info.stderr and '"chain finished"' in info.stderr


def test_stdio_client_vanishing_mid_proc_kills_the_whole_process_group(tmp_path: Any) -> None:
    import os
    import signal

    script = "sleep 60 & echo $$ > pid.tmp && mv pid.tmp pid; wait"
    hello = {"type": "handshake/req", "id": "h", "agent_caps": ["chains", "proc"]}
    chain = {"type": "chain/req", "id": "c", "entry_node": "p", "nodes": [
        {"node_id": "p", "kind": "proc", "input": {"argv": ["sh", "-c", script]}}]}
    host = subprocess.Popen(
        [PY, "-m", "a2e_host", "stdio", "--allow-proc", "sh", "--allow-proc", "sleep",
         "--root", str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    assert host.stdin is not None and host.stdout is not None
    host.stdin.write(lines(hello, chain).encode())
    host.stdin.flush()
    pid_file = tmp_path / "pid"
    deadline = time.monotonic() + 10
    while not pid_file.exists():
        assert time.monotonic() < deadline, "the proc never started"
        time.sleep(0.01)
    pgid = int(pid_file.read_text())
    os.killpg(pgid, 0)  # alive while the chain runs
    host.stdin.close()  # the client goes: stdin and stdout closed
    host.stdout.close()
    gone_by = time.monotonic() + 2.0
    alive = True
    while alive and time.monotonic() < gone_by:
        try:
            os.killpg(pgid, 0)
            time.sleep(0.02)
        except ProcessLookupError:
            alive = False
    if alive:
        os.killpg(pgid, signal.SIGKILL)
    assert not alive, f"process group {pgid} outlived its vanished client by 2 s"
    assert host.wait(timeout=15) == 0
