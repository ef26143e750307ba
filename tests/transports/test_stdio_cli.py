"""``a2e-host stdio`` as a real subprocess: NDJSON in, NDJSON out, logs on stderr
(PROTOCOL.md §1). Cases needing chains use the fake chains plugin injected through
``python -m tests.support.fakes stdio`` (the same command code, plugin injected)."""

from __future__ import annotations

import json
import os
import subprocess

import anyio
import pytest

from tests.support import REPO
from tests.support.fakes import FAKE
from tests.support.process import CLI, WAIT, HostProcess, host_env, open_host

HANDSHAKE = {"type": "handshake/req", "id": "h", "agent_caps": ["chains"]}


async def start(argv: list[str], tg: anyio.abc.TaskGroup, **env: str) -> HostProcess:
    host = await open_host(argv, **env)
    tg.start_soon(host.collect_stderr)
    return host


@pytest.mark.asyncio
async def test_bad_lines_get_one_error_each_in_order_then_a_ping_works() -> None:
    async with anyio.create_task_group() as tg:
        host = await start([*CLI, "stdio"], tg)
        await host.send(
            b"this is not json",
            b"[1, 2, 3]",
            {"type": "chain/whatever", "id": "u"},
            {"type": "ping", "id": "v", "version": "2.0"},
            {"type": "chain/req", "id": "early", "nodes": []},
            {"type": "ping", "id": "p"},
        )
        got = [await host.receive() for _ in range(6)]
        await host.process.stdin.aclose()  # type: ignore[union-attr]
        assert await host.wait() == 0
    assert [(m["type"], m.get("code"), m["req_id"]) for m in got] == [
        ("error", "parse_error", ""),
        ("error", "invalid_message", ""),
        ("error", "unknown_type", "u"),
        ("error", "version_mismatch", "v"),
        ("error", "handshake_required", "early"),
        ("pong", None, "p"),
    ]


@pytest.mark.asyncio
async def test_a_200kb_line_works_and_an_oversized_line_gets_exactly_one_error() -> None:
    async with anyio.create_task_group() as tg:
        host = await start([*CLI, "stdio"], tg, A2E_MAX_MESSAGE_BYTES=str(300_000))
        await host.send({"type": "ping", "id": "big", "padding": "x" * 200_000})
        big = await host.receive()
        await host.send({"type": "ping", "id": "huge", "padding": "y" * 400_000})
        await host.send({"type": "ping", "id": "after"})
        refused = await host.receive()
        after = await host.receive()
        await host.process.stdin.aclose()  # type: ignore[union-attr]
        rest = await host.read_rest()
        assert await host.wait() == 0
    assert (big["type"], big["req_id"]) == ("pong", "big")
    assert (refused["type"], refused["code"]) == ("error", "message_too_large")
    assert refused["detail"]["limit"] == 300_000
    assert (after["type"], after["req_id"]) == ("pong", "after")
    assert rest == b""


@pytest.mark.asyncio
async def test_piped_requests_are_all_answered_and_the_host_exits_zero_at_eof() -> None:
    lines = b"".join(
        json.dumps({"type": "ping", "id": f"p{i}"}).encode() + b"\n" for i in range(100)
    )
    async with anyio.create_task_group() as tg:
        host = await start([*CLI, "stdio"], tg, A2E_LOG_LEVEL="info")
        await host.process.stdin.send(lines)  # type: ignore[union-attr]
        await host.process.stdin.aclose()  # type: ignore[union-attr]
        out = await host.read_rest()
        assert await host.wait() == 0
    replies = [json.loads(line) for line in out.splitlines()]
    assert [r["req_id"] for r in replies] == [f"p{i}" for i in range(100)]
    assert b"end of input" in host.stderr  # logs are on stderr, as JSON lines


@pytest.mark.asyncio
async def test_print_in_a_tool_and_a_child_writing_stdout_never_reach_stdout() -> None:
    async with anyio.create_task_group() as tg:
        host = await start([*FAKE, "stdio"], tg)
        await host.send(
            HANDSHAKE,
            {"type": "chain/req", "id": "n", "initial_input": {"op": "noisy"}},
        )
        await host.process.stdin.aclose()  # type: ignore[union-attr]
        out = await host.read_rest()
        assert await host.wait() == 0
    replies = [json.loads(line) for line in out.splitlines()]  # every line is JSON
    assert [r["type"] for r in replies] == ["handshake/resp", "chain/resp"]
    assert replies[1]["success"] is True
    assert b"noise from a tool's print()" in host.stderr
    assert b"noise from a child" in host.stderr


@pytest.mark.asyncio
async def test_a_blocking_tool_does_not_delay_a_ping() -> None:
    async with anyio.create_task_group() as tg:
        host = await start([*FAKE, "stdio"], tg)
        await host.send(
            HANDSHAKE,
            {"type": "chain/req", "id": "slow", "initial_input": {"op": "block", "seconds": 30}},
        )
        assert (await host.receive())["type"] == "handshake/resp"
        with anyio.fail_after(WAIT):
            await host.wait_stderr("fake chain started slow")
        await host.send({"type": "ping", "id": "p"})
        pong = await host.receive()  # bounded well under the tool's 30 s
        assert (pong["type"], pong["req_id"]) == ("pong", "p")
        await host.send({"type": "shutdown", "id": "s", "timeout": 0})
        cancelled = await host.receive()
        assert await host.wait() == 0
    assert (cancelled["req_id"], cancelled["error"]["code"]) == ("slow", "cancelled")


@pytest.mark.asyncio
async def test_stdin_and_stdout_closed_while_work_runs_cancels_it_and_exits() -> None:
    read_end, write_end = os.pipe()  # our own pipe, so that we can really close its reader
    process = await anyio.open_process(
        [*FAKE, "stdio"], stdin=subprocess.PIPE, stdout=write_end, stderr=subprocess.PIPE,
        cwd=REPO, env=host_env(A2E_LOG_LEVEL="info"),
    )
    os.close(write_end)
    host = HostProcess(process)
    async with anyio.create_task_group() as tg:
        tg.start_soon(host.collect_stderr)
        await host.send(
            HANDSHAKE,
            {"type": "chain/req", "id": "w", "initial_input": {"op": "block", "seconds": 60}},
        )
        with anyio.fail_after(WAIT):
            first = await anyio.to_thread.run_sync(os.read, read_end, 65536)
            await host.wait_stderr("fake chain started w")
        os.close(read_end)
        await process.stdin.aclose()  # type: ignore[union-attr]
        assert await host.wait() == 0  # long before the tool's 60 s
    assert b'"handshake/resp"' in first
    assert b"peer gone" in host.stderr


@pytest.mark.asyncio
async def test_shutdown_with_work_in_flight_sends_its_response_then_exits() -> None:
    async with anyio.create_task_group() as tg:
        host = await start([*FAKE, "stdio"], tg)
        await host.send(
            HANDSHAKE,
            {"type": "chain/req", "id": "w", "initial_input": {"op": "block", "seconds": 0.2}},
            {"type": "shutdown", "id": "s", "timeout": 30},
        )
        out = await host.read_rest()
        assert await host.wait() == 0
    replies = [json.loads(line) for line in out.splitlines()]
    assert [(r["type"], r.get("success")) for r in replies] == [
        ("handshake/resp", None), ("chain/resp", True)
    ]
