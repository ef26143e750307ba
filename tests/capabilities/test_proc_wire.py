"""The ``proc`` capability over the real stdio CLI and a real WebSocket server (issue 15,
PROTOCOL.md §10): spawn, write, read, kill, status with exact states and exit codes, every
message decoded by the public SDK's models; refusals (executable, ``proc_limit``,
capability); and no process left once the agent is gone."""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.support.process import CLI, WAIT, open_host
from tests.support.procs import (
    ESCAPE,
    PROC_FLAGS,
    ProcWire,
    alive,
    cat_round_trip,
    gone,
    kill_if_alive,
    proc_entry,
    stdout_of,
)
from tests.support.sdk import assert_sdk_accepts
from tests.support.stdio import handshake, stdio_process
from tests.support.ws import receive, serving_argv, wait_closed

pytestmark = pytest.mark.timeout(90)


@asynccontextmanager
async def stdio_wire(caps: list[str], *flags: str, **limits: int
                     ) -> AsyncIterator[tuple[ProcWire, dict[str, Any]]]:
    """The real ``a2e-host stdio`` with ``flags``, handshaken asking ``caps``."""
    async with stdio_process([*CLI, "stdio", *flags]) as host:
        resp = await handshake(host, caps, **limits)
        yield ProcWire(host.send, host.receive), resp


@asynccontextmanager
async def ws_wire(url: str, caps: list[str], **limits: int
                  ) -> AsyncIterator[tuple[ProcWire, dict[str, Any], ClientConnection]]:
    async with connect(url, subprotocols=["a2e.v1"]) as ws:  # type: ignore[list-item]
        hello: dict[str, Any] = {"type": "handshake/req", "id": "h", "agent_caps": caps}
        if limits:
            hello["limits"] = limits
        await ws.send(json.dumps(hello))
        resp = await receive(ws)
        assert resp["ok"], resp

        async def send(message: dict[str, Any]) -> None:
            await ws.send(json.dumps(message))

        yield ProcWire(send, lambda: receive(ws)), resp, ws


@pytest.mark.asyncio
async def test_an_agent_spawns_writes_reads_kills_and_asks_status_over_stdio() -> None:
    async with stdio_wire(["proc"], *PROC_FLAGS) as (wire, resp):
        assert_sdk_accepts(resp)
        assert [c["capability"] for c in resp["accepted_caps"]] == ["proc"]
        meta = proc_entry(resp)["metadata"]
        assert (meta["namespace"], meta["priority"], meta["executables"],
                meta["executables_total"], meta["proc_limit"]) == ("proc/*", 40, ["cat", "sh"],
                                                                   2, 8)
        await cat_round_trip(wire)


@pytest.mark.asyncio
async def test_an_agent_spawns_writes_reads_kills_and_asks_status_over_websocket() -> None:
    async with serving_argv(CLI, "--port", "0", *PROC_FLAGS) as (url, _):
        async with ws_wire(url, ["chains", "proc"]) as (wire, resp, _ws):
            assert [c["capability"] for c in resp["accepted_caps"]] == ["chains", "proc"]
            await cat_round_trip(wire)


@pytest.mark.asyncio
async def test_a_disallowed_executable_is_refused_in_the_spawn_response() -> None:
    async with stdio_wire(["proc"], *PROC_FLAGS) as (wire, _):
        for cmd in (["ls"], ["/bin/ls"], ["cat "], ["./cat"]):
            refused = await wire.spawn(cmd)
            assert {k: refused[k] for k in ("type", "ok", "proc_id", "pid", "error_code")} == {
                "type": "proc/spawn/resp", "ok": False, "proc_id": "", "pid": 0,
                "error_code": "proc_denied"}, cmd
            assert refused["error"] == (
                f"executable {cmd[0]!r} is not allowed (allowed: cat, sh); give one of those "
                "names as cmd[0], or have the operator allow it with --allow-proc")
        bad = await wire.spawn("cat /etc/passwd")  # type: ignore[arg-type]
        assert (bad["type"], bad["code"], bad["detail"]["path"]) == (
            "error", "schema_violation", "$.cmd")
        escape = await wire.spawn(["cat"], cwd="../..")
        assert (escape["ok"], escape["error_code"]) == (False, "invalid_input")
        assert escape["error"].startswith("cwd '../..' is refused")
        env = await wire.spawn(["cat"], env={"LD_PRELOAD": "/tmp/x.so"})
        assert (env["ok"], env["error_code"]) == (False, "invalid_input")
        assert "LD_PRELOAD" in env["error"]


@pytest.mark.asyncio
async def test_proc_limit_refuses_the_process_past_it_until_one_ends() -> None:
    async with stdio_wire(["proc"], *PROC_FLAGS, proc_limit=2) as (wire, resp):
        assert proc_entry(resp)["metadata"]["proc_limit"] == 2
        first, second = await wire.spawn(["cat"]), await wire.spawn(["cat"])
        pids = [first["pid"], second["pid"]]
        try:
            assert (first["ok"], second["ok"]) == (True, True)
            third = await wire.spawn(["cat"])
            assert {k: third[k] for k in ("type", "code", "detail", "retryable",
                                          "capability_name")} == {
                "type": "error", "code": "proc_limit", "retryable": True,
                "capability_name": "proc",
                "detail": {"ceiling": "proc_limit", "scope": "session", "limit": 2,
                           "requested": 3}}
            assert third["message"] == (
                "this session has 2 live processes and proc_limit is 2 at session scope; end "
                "one (proc/kill/req) or wait for its exit event before spawning another")
            killed = await wire.request({"type": "proc/kill/req", "proc_id": "p1",
                                         "signal": "SIGKILL"})
            assert (killed["state"], killed["exit_code"]) == ("stopped", -9)
            again = await wire.spawn(["cat"])
            pids.append(again["pid"])
            assert (again["ok"], again["proc_id"]) == (True, "p3")
        finally:
            kill_if_alive(*pids)


@pytest.mark.asyncio
async def test_the_host_ceiling_is_configured_like_any_ceiling() -> None:
    async with stdio_process([*CLI, "stdio", *PROC_FLAGS], A2E_PROC_LIMIT="1") as host:
        resp = await handshake(host, ["proc"])
        assert proc_entry(resp)["metadata"]["proc_limit"] == 1
        wire = ProcWire(host.send, host.receive)
        first = await wire.spawn(["cat"])
        try:
            refused = await wire.spawn(["cat"])
            assert (refused["code"], refused["detail"]) == ("proc_limit", {
                "ceiling": "proc_limit", "scope": "host", "limit": 1, "requested": 2})
        finally:
            kill_if_alive(first["pid"])


async def _tree(wire: ProcWire) -> list[int]:
    """Spawn ``cat`` and a shell whose ``setsid`` grandchild escapes its session; every pid."""
    cat = await wire.spawn(["cat"])
    shell = await wire.spawn(["sh", "-c", ESCAPE])
    events = await wire.until_output(shell["req_id"], "\n")
    grandchild = int(stdout_of(events))
    pids = [cat["pid"], shell["pid"], grandchild]
    assert all(alive(pid) for pid in pids)
    return pids


@pytest.mark.asyncio
async def test_a_websocket_agent_going_away_ends_every_process_tree_of_its_session() -> None:
    async with serving_argv(CLI, "--port", "0", *PROC_FLAGS) as (url, _):
        async with ws_wire(url, ["proc"]) as (wire, _, ws):
            pids = await _tree(wire)
            await ws.close()
        try:
            assert [pid for pid in pids if not gone(pid)] == []
        finally:
            kill_if_alive(*pids)


@pytest.mark.asyncio
async def test_the_host_stopping_ends_every_process_tree_of_its_sessions() -> None:
    async with serving_argv(CLI, "--port", "0", *PROC_FLAGS) as (url, host):
        async with ws_wire(url, ["proc"]) as (wire, _, ws):
            pids = await _tree(wire)
            host.process.send_signal(signal.SIGTERM)  # the grace period: stdin closed, 2 s
            assert await wait_closed(ws) == 1001
        try:
            assert [pid for pid in pids if not gone(pid)] == []
        finally:
            kill_if_alive(*pids)


@pytest.mark.asyncio
async def test_a_stdio_agent_going_away_ends_every_process_tree_of_its_session() -> None:
    host = await open_host([*CLI, "stdio", *PROC_FLAGS])
    pids: list[int] = []
    try:
        await handshake(host, ["proc"])
        pids = await _tree(ProcWire(host.send, host.receive))
        assert host.process.stdout is not None and host.process.stdin is not None
        await host.process.stdout.aclose()  # the agent is gone: nobody reads, nobody writes
        await host.process.stdin.aclose()
        with anyio.fail_after(WAIT):
            await host.process.wait()
        assert [pid for pid in pids if not gone(pid)] == []
    finally:
        kill_if_alive(*pids)
        await host.process.aclose()


@pytest.mark.asyncio
async def test_end_of_input_closes_stdin_and_ends_what_still_runs_then_exits_0() -> None:
    async with stdio_process([*CLI, "stdio", *PROC_FLAGS]) as host:
        await handshake(host, ["proc"])
        wire = ProcWire(host.send, host.receive)
        pids = await _tree(wire)
        assert host.process.stdin is not None
        await host.process.stdin.aclose()
        try:
            cat = await wire.until_exit("spawn-1")
            shell = await wire.until_exit("spawn-2")
            # cat ends by itself on EOF; the shell ignores its stdin and is ended
            assert (cat[-1]["data"]["state"], cat[-1]["data"]["exit_code"]) == ("stopped", 0)
            assert (shell[-1]["data"]["state"], shell[-1]["data"]["exit_code"]) == (
                "stopped", -15)
            assert [pid for pid in pids if not gone(pid)] == []
        finally:
            kill_if_alive(*pids)


@pytest.mark.asyncio
async def test_a_session_not_granted_proc_gets_capability_missing() -> None:
    async with stdio_wire(["chains"], *PROC_FLAGS) as (wire, resp):
        assert [c["capability"] for c in resp["accepted_caps"]] == ["chains"]
        for message in ({"type": "proc/spawn/req", "cmd": ["cat"]},
                        {"type": "proc/status/req"},
                        {"type": "proc/kill/req", "proc_id": "p1"}):
            err = await wire.request(message)
            assert (err["type"], err["code"], err["capability_name"]) == (
                "error", "capability_missing", "proc")


@pytest.mark.asyncio
async def test_a_host_allowing_no_executable_does_not_grant_proc() -> None:
    async with stdio_wire(["chains", "proc"]) as (wire, resp):
        assert [c["capability"] for c in resp["accepted_caps"]] == ["chains"]
        assert resp["accepted_caps"][0]["metadata"]["gates"] == []
        err = await wire.request({"type": "proc/spawn/req", "cmd": ["cat"]})
        assert (err["type"], err["code"], err["capability_name"]) == (
            "error", "capability_missing", "proc")


@pytest.mark.asyncio
async def test_unknown_and_ended_processes_are_named_errors() -> None:
    async with stdio_wire(["proc"], *PROC_FLAGS) as (wire, _):
        for message in ({"type": "proc/write/req", "proc_id": "p9", "data": "x"},
                        {"type": "proc/kill/req", "proc_id": "p9"},
                        {"type": "proc/status/req", "proc_id": "p9"}):
            err = await wire.request(message)
            assert (err["code"], err["detail"]) == ("unknown_proc", {"proc_id": "p9"})
        done = await wire.spawn(["sh", "-c", "exit 0"], stdin_mode="null")
        await wire.until_exit(done["req_id"])
        err = await wire.request({"type": "proc/kill/req", "proc_id": "p1"})
        assert (err["code"], err["detail"]) == (
            "proc_dead", {"proc_id": "p1", "state": "stopped", "exit_code": 0})
        bad = await wire.request({"type": "proc/kill/req", "proc_id": "p1", "signal": "SIGFOO"})
        assert (bad["code"], bad["detail"]["path"]) == ("schema_violation", "$.signal")


@pytest.mark.asyncio
async def test_proc_nodes_still_run_for_a_session_that_asks_proc_and_not_for_one_that_does_not(
) -> None:
    node = {"node_id": "p", "kind": "proc", "input": {"argv": ["sh", "-c", "echo hi"]}}
    chain = {"type": "chain/req", "nodes": [node], "entry_node": "p", "streaming": False}
    async with stdio_wire(["chains", "proc"], *PROC_FLAGS) as (wire, _):
        done = await wire.request(chain)
        assert (done["success"], done["outputs"]["p"]["stdout"]) == (True, "hi\n")
    async with stdio_wire(["chains"], *PROC_FLAGS) as (wire, _):
        refused = await wire.request(chain)
        assert refused["success"] is False
        assert "proc" in refused["error"]["message"]


@pytest.mark.asyncio
async def test_end_of_input_right_behind_a_spawn_still_closes_that_process() -> None:
    # the process is still starting when the session stops taking work: it must be
    # closed as it comes up, or the host would wait for a cat that never ends
    async with stdio_process([*CLI, "stdio", *PROC_FLAGS]) as host:
        await handshake(host, ["proc"])
        assert host.process.stdin is not None
        await host.send({"type": "proc/spawn/req", "id": "s", "cmd": ["cat"]})
        await host.process.stdin.aclose()
        wire = ProcWire(host.send, host.receive)
        spawned = await host.receive()
        assert (spawned["type"], spawned["ok"]) == ("proc/spawn/resp", True)
        try:
            events = await wire.until_exit("s")
            assert (events[-1]["data"]["state"], events[-1]["data"]["exit_code"]) == (
                "stopped", 0)
        finally:
            kill_if_alive(spawned["pid"])
