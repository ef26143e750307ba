"""``a2e-host runs`` and ``graph --run`` on the store a real ``a2e-host stdio --store`` wrote:
exact statuses and outcomes of durable runs that succeeded, failed and were cancelled."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.cli_inprocess import run_cli
from tests.support.process import CLI, open_host
from tests.support.requests import chain, tool
from tests.support.stdio import Client, handshake, stdio_process


async def _durable(client: Client, message: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Send a durable chain; its run id (from ``chain/accepted``) and its response."""
    events, accepted = await client.run({**message, "durable": True})
    assert accepted["type"] == "chain/accepted" and not events, accepted
    while True:
        got = await client.host.receive()
        if got["type"] != "chain/event":
            assert got["type"] == "chain/resp", got
            return accepted["run_id"], got


async def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``a2e-host *args`` by the CLI's ``main`` in a worker thread of this process (the
    command runs its own event loop), reading the store beside the host process."""
    return await anyio.to_thread.run_sync(lambda: run_cli(*args))


@pytest.mark.asyncio
async def test_runs_list_and_graph_show_what_a_real_host_stored(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite3"
    argv = [*CLI, "stdio", "--tools", "conformance", "--store", str(store)]
    async with stdio_process(argv) as host:
        client = Client(host, await handshake(host))
        ok_run, ok = await _durable(client, chain("ok", [
            tool("a", "upper", input={"text": "x"}, next_node="b"),
            tool("b", "concat", input_map={"parts": "[a.output.text, 'y']"})]))
        assert ok["success"] is True, ok
        bad_run, bad = await _durable(client, chain("bad", [
            tool("a", "upper", input={"text": "x"}, next_node="b"),
            tool("b", "fail", input={"message": "no"}, next_node="c"),
            tool("c", "upper", input={"text": "never"})]))
        assert bad["success"] is False, bad
        await client.send({**chain("slow", [tool("s", "sleep", input={"seconds": 30})]),
                           "durable": True})
        accepted = await client.reply()
        assert accepted["type"] == "chain/accepted", accepted
        started = await client.host.receive()
        assert (started["node_id"], started["phase"]) == ("s", "start"), started
        # read beside the serving host: the run in flight, its node running
        live = await cli("runs", "list", "--status", "running", "--json", "--store", str(store))
        assert live.returncode == 0, live.stderr
        assert [(r["run_id"], r["req_id"], r["status"]) for r in
                json.loads(live.stdout)["runs"]] == [(accepted["run_id"], "slow", "running")]
        drawn = await cli("graph", "--run", accepted["run_id"], "--store", str(store))
        assert drawn.returncode == 0, drawn.stderr
        assert "    class s running" in drawn.stdout.splitlines()
        await client.send({"type": "chain/cancel", "id": "x", "req_id": "slow"})
        cancelled = await client.reply()
        assert cancelled["type"] == "chain/resp" and cancelled["error"]["code"] == "cancelled"
        slow_run = accepted["run_id"]

    listed = await cli("runs", "list", "--store", str(store), "--json")
    assert listed.returncode == 0, listed.stderr
    runs = json.loads(listed.stdout)["runs"]
    assert [(r["run_id"], r["req_id"], r["status"]) for r in runs] == [
        (slow_run, "slow", "cancelled"), (bad_run, "bad", "failed"),
        (ok_run, "ok", "succeeded")]
    assert [r["last_seq"] for r in runs] == [2, 4, 4]

    shown = await cli("runs", "show", bad_run, "--events", "--store", str(store))
    assert shown.returncode == 0, shown.stderr
    events = shown.stdout.split("events:\n")[1].splitlines()
    assert [line.split()[1:3] for line in events] == [
        ["a", "start"], ["a", "done"], ["b", "start"], ["b", "error"]]
    assert "response:        failed (chain_node_error) at node 'b'" in shown.stdout

    drawn = await cli("graph", "--run", bad_run, "--store", str(store))
    assert drawn.returncode == 0, drawn.stderr
    assert [line.strip() for line in drawn.stdout.splitlines()
            if line.strip().startswith("class ")] == ["class a done", "class b error",
                                                       "class c never_started"]


@pytest.mark.asyncio
async def test_graph_and_runs_show_a_node_a_restart_interrupted(tmp_path: Path) -> None:
    """kill -9 while a non-idempotent tool sleeps; the restarted host resumes the run and
    ends that node ``interrupted``: the stored outcome the operator commands show."""
    store = tmp_path / "runs.sqlite3"
    argv = [*CLI, "stdio", "--tools", "conformance", "--store", str(store)]
    nodes = [tool("a", "upper", input={"text": "x"}, next_node="s"),
             tool("s", "sleep", input={"seconds": 60})]
    async with anyio.create_task_group() as tg:
        first = await open_host(argv)
        tg.start_soon(first.collect_stderr)
        await handshake(first)
        await first.send({**chain("cut", nodes), "durable": True})
        accepted = await first.receive()
        assert accepted["type"] == "chain/accepted", accepted
        seen = [await first.receive() for _ in range(3)]  # a start, a done, s start
        assert [(e["node_id"], e["phase"]) for e in seen] == [
            ("a", "start"), ("a", "done"), ("s", "start")]
        first.process.kill()  # SIGKILL: no chance to write anything more
        await first.wait()
        tg.cancel_scope.cancel()
    run_id = accepted["run_id"]
    async with stdio_process(argv) as host:  # resumes the run as it starts
        client = Client(host, await handshake(host))
        await client.send({"type": "chain/attach", "id": "att", "run_id": run_id,
                           "since_seq": 3})
        got = await client.reply()
        assert got["type"] == "chain/accepted", got
        with anyio.fail_after(30):
            resp = await client.reply()
        assert resp["type"] == "chain/resp" and resp["success"] is False, resp

    drawn = await cli("graph", "--run", run_id, "--store", str(store))
    assert drawn.returncode == 0, drawn.stderr
    assert [line.strip() for line in drawn.stdout.splitlines()
            if line.strip().startswith("class ")] == ["class a done", "class s interrupted"]
    shown = await cli("runs", "show", run_id, "--events", "--store", str(store))
    assert shown.returncode == 0, shown.stderr
    last = shown.stdout.splitlines()[-1].split(None, 3)
    assert last[:3] == ["4", "s", "error"], last
    assert last[3].startswith("error [interrupted]: ") and last[3].endswith("(resumed)")
    listed = await cli("runs", "list", "--store", str(store), "--json")
    assert [r["status"] for r in json.loads(listed.stdout)["runs"]] == ["interrupted"]
