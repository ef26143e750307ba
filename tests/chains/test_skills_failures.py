"""Declarative skills on the real ``a2e-host stdio --skills DIR`` (PROTOCOL.md §5 kind
``skill``; skills.py): a broken skill file stops the host at start, an inner failure is
named in the outer error, and cancelling reaches the inner chain."""

from __future__ import annotations

import json
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import anyio
import pytest

from tests.support.process import CLI, WAIT, open_host
from tests.support.requests import chain, error_of
from tests.support.stdio import Client, stdio_host

INNER_FAILS = """\
name: inner_fails
entry_node: first
nodes:
  - {node_id: first, kind: tool, name: echo, input: {v: 1}, next_node: boom}
  - {node_id: boom, kind: tool, name: fail, input: {message: inner exploded}}
"""

SLOW = """\
name: slow
entry_node: nap
nodes:
  - {node_id: nap, kind: tool, name: sleep, input: {seconds: 30}}
  - {node_id: nap2, kind: tool, name: sleep, input: {seconds: 30}}
"""


def skills_stdio(skills: Path) -> AbstractAsyncContextManager[Client]:
    """The real stdio host with ``--skills``, a session granted ``skill``."""
    argv = [*CLI, "stdio", "--tools", "conformance", "--skills", str(skills)]
    return stdio_host(argv=argv, caps=("chains", "skill"))


@pytest.mark.parametrize("command", ["stdio", "serve"])
@pytest.mark.asyncio
async def test_a_broken_yaml_skill_file_stops_the_host_at_start_with_exit_2(
    tmp_path: Path, command: str
) -> None:
    """skills.py: "a broken file stops loading with SkillLoadError naming the file";
    commands/serve.py: exit code 2 for a bad configuration, with one clear line."""
    (tmp_path / "ok.yaml").write_text(INNER_FAILS, encoding="utf-8")
    (tmp_path / "broken.yaml").write_text("name: broken\nnodes: [ {node_id: a\n", "utf-8")
    argv = [*CLI, command, "--tools", "conformance", "--skills", str(tmp_path)]
    if command == "serve":
        argv += ["--port", "0"]
    with anyio.fail_after(WAIT + 5):
        async with anyio.create_task_group() as tg:
            host = await open_host(argv)
            tg.start_soon(host.collect_stderr)
            assert host.process.stdin is not None
            await host.process.stdin.aclose()
            with anyio.move_on_after(WAIT):
                await host.process.wait()
            running = host.process.returncode is None
            if running:
                host.process.kill()
            code = await host.wait()
    if running:
        pytest.fail(f"{command}: the host kept running with a broken skill file")
    stderr = host.stderr.decode("utf-8", "replace")
    assert code == 2, f"{command}: exit code {code}, expected 2; stderr begins: {stderr[:800]}"
    assert "broken.yaml" in stderr, stderr[-1500:]
    assert "Traceback" not in stderr and '"frames"' not in stderr, (
        f"{command}: a broken skill file must be one clear line, not a traceback dump: "
        f"{stderr[:600]}"
    )


@pytest.mark.asyncio
async def test_a_skill_whose_inner_node_fails_names_the_inner_node(tmp_path: Path) -> None:
    (tmp_path / "inner_fails.yaml").write_text(INNER_FAILS, encoding="utf-8")
    nodes = [{"node_id": "s", "kind": "skill", "name": "inner_fails", "next_node": "after"},
             {"node_id": "after", "kind": "tool", "name": "echo"}]
    async with skills_stdio(tmp_path) as client:
        events, resp = await client.run(chain("f", nodes))
        err = error_of(resp)
        assert (err["code"], err["node_id"]) == ("chain_node_error", "s"), err
        assert "s/boom" in err["message"] and "inner exploded" in err["message"], err
        phases = [(e["node_id"], e["phase"]) for e in events]
        assert phases == [("s", "start"), ("s/first", "start"), ("s/first", "done"),
                          ("s/boom", "start"), ("s/boom", "error"), ("s", "error")], phases
        assert resp["outputs"] == {} and resp["nodes_run"] == 1, resp
        await client.assert_alive("after")


@pytest.mark.asyncio
async def test_cancelling_while_a_skills_inner_chain_runs_ends_inner_nodes_too(
    tmp_path: Path,
) -> None:
    (tmp_path / "slow.yaml").write_text(SLOW, encoding="utf-8")
    nodes = [{"node_id": "s", "kind": "skill", "name": "slow"}]
    async with skills_stdio(tmp_path) as client:
        await client.send(chain("c", nodes))
        started = []
        while {"s/nap", "s/nap2"} - set(started):
            event = await client.host.receive()
            assert event["phase"] == "start", event
            started.append(event["node_id"])
        await client.send({"type": "chain/cancel", "id": "x", "req_id": "c"})
        events = []
        while True:
            got = await client.host.receive()
            if got["type"] != "chain/event":
                break
            events.append(got)
        assert (got["type"], got["req_id"]) == ("chain/resp", "c"), got
        assert error_of(got)["code"] == "cancelled", got
        ended = {e["node_id"]: e["phase"] for e in events}
        assert ended == {"s/nap": "error", "s/nap2": "error", "s": "error"}, (
            f"every running node, inner ones included, gets one error event: {events}"
        )
        seqs = [e["seq"] for e in events]
        assert seqs == list(range(len(started) + 1, len(started) + 1 + len(events))), seqs
        await client.assert_alive("after")
        _, again = await client.run(chain("again", [{"node_id": "e", "kind": "tool",
                                                     "name": "echo", "input": {"k": 1}}]))
        assert again["final_output"] == {"k": 1}, json.dumps(again)
