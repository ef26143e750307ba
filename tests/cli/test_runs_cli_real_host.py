"""``a2e-host runs`` and ``graph --run`` on the store a real ``a2e-host stdio --store`` wrote:
exact statuses and outcomes of durable runs that succeeded, failed and were cancelled."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.process import CLI
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


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "a2e_host", *args], capture_output=True,
                          text=True, timeout=60)


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
        live = await anyio.to_thread.run_sync(
            cli, "runs", "list", "--status", "running", "--json", "--store", str(store))
        assert live.returncode == 0, live.stderr
        assert [(r["run_id"], r["req_id"], r["status"]) for r in
                json.loads(live.stdout)["runs"]] == [(accepted["run_id"], "slow", "running")]
        drawn = await anyio.to_thread.run_sync(
            cli, "graph", "--run", accepted["run_id"], "--store", str(store))
        assert drawn.returncode == 0, drawn.stderr
        assert "    class s running" in drawn.stdout.splitlines()
        await client.send({"type": "chain/cancel", "id": "x", "req_id": "slow"})
        cancelled = await client.reply()
        assert cancelled["type"] == "chain/resp" and cancelled["error"]["code"] == "cancelled"
        slow_run = accepted["run_id"]

    listed = cli("runs", "list", "--store", str(store), "--json")
    assert listed.returncode == 0, listed.stderr
    runs = json.loads(listed.stdout)["runs"]
    assert [(r["run_id"], r["req_id"], r["status"]) for r in runs] == [
        (slow_run, "slow", "cancelled"), (bad_run, "bad", "failed"),
        (ok_run, "ok", "succeeded")]
    assert [r["last_seq"] for r in runs] == [2, 4, 4]

    shown = cli("runs", "show", bad_run, "--events", "--store", str(store))
    assert shown.returncode == 0, shown.stderr
    events = shown.stdout.split("events:\n")[1].splitlines()
    assert [line.split()[1:3] for line in events] == [
        ["a", "start"], ["a", "done"], ["b", "start"], ["b", "error"]]
    assert "response:        failed (chain_node_error) at node 'b'" in shown.stdout

    drawn = cli("graph", "--run", bad_run, "--store", str(store))
    assert drawn.returncode == 0, drawn.stderr
    assert [line.strip() for line in drawn.stdout.splitlines()
            if line.strip().startswith("class ")] == ["class a done", "class b error"]
