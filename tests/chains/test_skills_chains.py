"""Skills end to end: declarative skills used from chains on the real stdio host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from a2e_host.chains.messages import ChainEvent, ChainResponse
from a2e_host.client import spawn_stdio
from tests.support.process import CLI, STARTUP

SHOUT = """\
name: shout
description: Join the parts and upper-case them.
input_schema: {type: object, required: [parts]}
entry_node: join
nodes:
  - {node_id: join, kind: tool, name: concat, input_map: {parts: input.parts}, next_node: up}
  - {node_id: up, kind: tool, name: upper, input_map: {text: join.output.text}}
"""

LOOP = """\
name: loop
description: Calls itself; only max_depth stops it.
entry_node: again
nodes:
  - {node_id: again, kind: skill, name: loop, input_map: {n: input.n}}
"""


async def run(skills: Path, nodes: list[dict[str, Any]], entry: str, **kw: Any) -> list[Any]:
    argv = [*CLI, "stdio", "--tools", "conformance", "--skills", str(skills)]
    with anyio.fail_after(30):
        async with spawn_stdio(argv, stderr="capture", **kw, handshake_timeout=STARTUP) as client:
            return [m async for m in client.run_chain(nodes, entry)]


@pytest.mark.asyncio
async def test_declarative_skill_runs_as_a_nested_chain_with_prefixed_events(
    tmp_path: Path,
) -> None:
    (tmp_path / "shout.yaml").write_text(SHOUT, encoding="utf-8")
    nodes = [
        {"node_id": "s", "kind": "skill", "name": "shout", "input": {"parts": ["ab", "c"]},
         "next_node": "after"},
        {"node_id": "after", "kind": "tool", "name": "echo", "input_map": {"got": "s.output"}},
    ]
    messages = await run(tmp_path, nodes, "s")
    events = [m for m in messages if isinstance(m, ChainEvent)]
    response = messages[-1]
    assert isinstance(response, ChainResponse)
    assert response.success is True
    assert response.outputs == {"s": {"text": "ABC"}, "after": {"got": {"text": "ABC"}}}
    assert [(e.node_id, e.phase) for e in events] == [
        ("s", "start"),
        ("s/join", "start"),
        ("s/join", "done"),
        ("s/up", "start"),
        ("s/up", "done"),
        ("s", "done"),
        ("after", "start"),
        ("after", "done"),
    ]
    assert [e.seq for e in events] == list(range(1, 9))
    assert response.nodes_run == 2  # declared nodes of the request only


@pytest.mark.asyncio
async def test_a_skill_that_calls_itself_is_stopped_by_max_depth(tmp_path: Path) -> None:
    (tmp_path / "loop.yaml").write_text(LOOP, encoding="utf-8")
    nodes = [{"node_id": "top", "kind": "skill", "name": "loop", "input": {"n": 1}}]
    messages = await run(tmp_path, nodes, "top", limits={"max_depth": 3})
    response = messages[-1]
    assert isinstance(response, ChainResponse)
    assert response.success is False
    assert response.error is not None
    assert response.error.code == "chain_limit"
    assert response.error.node_id == "top"
    assert response.error.details == {
        "ceiling": "max_depth", "scope": "session", "limit": 3, "requested": 4,
    }
    started = [m.node_id for m in messages if isinstance(m, ChainEvent) and m.phase == "start"]
    # its root node always calls it again: sure to pass max_depth, refused at once
    assert started == ["top"]


@pytest.mark.asyncio
async def test_skill_nodes_need_the_skill_capability(tmp_path: Path) -> None:
    (tmp_path / "shout.yaml").write_text(SHOUT, encoding="utf-8")
    nodes = [{"node_id": "s", "kind": "skill", "name": "shout", "input": {"parts": ["x"]}}]
    messages = await run(tmp_path, nodes, "s", agent_caps=["chains"])
    assert len(messages) == 1
    response = messages[0]
    assert isinstance(response, ChainResponse)
    assert response.error is not None and response.error.code == "chain_invalid"
    assert "skill" in response.error.message


NAP = """\
name: nap
description: Sleeps longer than any caller waits.
entry_node: z
nodes:
  - {node_id: z, kind: tool, name: sleep, input: {seconds: 30}}
"""

PING = """\
name: ping
entry_node: p
nodes:
  - {node_id: p, kind: skill, name: pong}
"""

PONG = """\
name: pong
entry_node: q
nodes:
  - {node_id: q, kind: skill, name: ping}
"""


@pytest.mark.asyncio
async def test_the_outer_deadline_bounds_a_skill_and_its_inner_nodes_say_so(
    tmp_path: Path,
) -> None:
    (tmp_path / "nap.yaml").write_text(NAP, encoding="utf-8")
    argv = [*CLI, "stdio", "--tools", "conformance", "--skills", str(tmp_path)]
    with anyio.fail_after(30):
        async with spawn_stdio(argv, stderr="capture", handshake_timeout=STARTUP) as client:
            started = anyio.current_time()
            messages = [m async for m in client.run_chain(
                [{"node_id": "s", "kind": "skill", "name": "nap"}], "s", timeout=1)]
            took = anyio.current_time() - started
    response = messages[-1]
    assert isinstance(response, ChainResponse)
    assert response.error is not None and response.error.code == "timeout"
    assert took < 3.0
    errors = {m.node_id: m.error for m in messages
              if isinstance(m, ChainEvent) and m.phase == "error"}
    assert set(errors) == {"s", "s/z"}
    assert all("timed out after 1 s" in text for text in errors.values()), errors


@pytest.mark.asyncio
async def test_indirect_skill_recursion_is_stopped_by_max_depth(tmp_path: Path) -> None:
    (tmp_path / "ping.yaml").write_text(PING, encoding="utf-8")
    (tmp_path / "pong.yaml").write_text(PONG, encoding="utf-8")
    nodes = [{"node_id": "top", "kind": "skill", "name": "ping"}]
    messages = await run(tmp_path, nodes, "top", limits={"max_depth": 4})
    response = messages[-1]
    assert isinstance(response, ChainResponse)
    assert response.error is not None and response.error.code == "chain_limit"
    assert response.error.details["ceiling"] == "max_depth"
    started = [m.node_id for m in messages if isinstance(m, ChainEvent) and m.phase == "start"]
    assert started == ["top"]  # ping's root always starts pong, whose root starts ping
