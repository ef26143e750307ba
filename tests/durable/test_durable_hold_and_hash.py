"""What a durable run decides once and reuses stays right for every node it is reused for
(PROTOCOL.md §5 Resume): the start hold is decided per kind, name and ``resume`` (two
nodes of one tool, one opting in to ``resume: "rerun"``, are held differently), and the
plan hash, which looks each named tool up once, is the hash over every name the nodes
give (fallbacks included), as :func:`~a2e_host.chains.resume.plan_hash` defines it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from a2e_chains.resume import plan_hash_of

from a2e_host.chains.messages import ChainAccepted, ChainEvent, ChainNode, ChainRequest
from a2e_host.chains.resume import plan_hash
from a2e_host.chains.toolbox import Toolbox
from a2e_host.codec import encode_message
from a2e_host.runtime.memory import open_memory_client
from a2e_host.tools import Tool, ToolRegistry, tool
from tests.support.durable import Gates, durable_host, handshake_as, until_response
from tests.support.store import stored_events

WAIT = 30


def _committed(path: Path) -> list[tuple[int, str, str]]:
    """Every committed event ``(seq, node_id, phase)``, read on a connection of its own
    (rows and segments alike)."""
    return stored_events(str(path))


class _Effects(Gates):
    """Gates' tools plus ``effect`` (not idempotent), which notes, per call, what the
    store had committed when it ran."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.seen: dict[int, list[tuple[int, str, str]]] = {}

    def tools(self) -> list[Tool]:
        effects = self

        @tool(blocking=False)
        async def effect(v: int = 0) -> dict[str, Any]:
            """Has an effect that must not happen twice (not idempotent)."""
            effects.seen[v] = _committed(effects.path)
            return {"v": v}

        return [*super().tools(), effect]


@pytest.mark.asyncio
async def test_two_nodes_of_one_tool_are_held_by_their_own_resume_field(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    effects = _Effects(path)
    # the opted-in node first: were the decision shared by tool name, the second node
    # would run without its start stored
    nodes = [
        {"node_id": "again", "kind": "tool", "name": "effect", "input": {"v": 1},
         "resume": "rerun", "next_node": "once"},
        {"node_id": "once", "kind": "tool", "name": "effect", "input": {"v": 2}},
    ]
    with anyio.fail_after(WAIT):
        # every batch waits 1.5 s before it commits: a held start waits that long
        async with durable_host(path, effects, commit_delay=1.5) as host:
            async with open_memory_client(host) as client:
                await handshake_as(client)
                client.send(ChainRequest(id="r", nodes=nodes, entry_node="again",
                                         durable=True))
                assert isinstance(await client.receive(), ChainAccepted)
                got = await until_response(client)
    assert got[-1].success  # type: ignore[attr-defined]
    assert effects.seen[1] == []  # may run again: not held, nothing committed yet
    assert effects.seen[2] == [(1, "again", "start"), (2, "again", "done"),
                               (3, "once", "start")]
    assert [(m.node_id, m.phase) for m in got if isinstance(m, ChainEvent)] == [
        ("again", "start"), ("again", "done"), ("once", "start"), ("once", "done")]


def test_the_plan_hash_covers_every_tool_named_once_each_fallbacks_included() -> None:
    gates = Gates()
    toolbox = Toolbox(ToolRegistry(gates.tools()))
    nodes = [ChainNode(node_id=f"n{i}", kind="tool", name="echo", input={"v": i},
                       next_node=f"n{i + 1}") for i in range(5)]
    nodes.append(ChainNode(node_id="n5", kind="tool", name="wait_gate",
                           input={"name": "g"}, fallback="echo"))
    request = ChainRequest(id="h", nodes=nodes, entry_node="n0", durable=True)
    signatures = {
        f"tool:{name}": {"signature": msgspec.to_builtins(toolbox.signature_of("tool", name)),
                         "nodes": None}
        for name in ("echo", "wait_gate")
    }
    expected = plan_hash(encode_message(request), signatures)
    assert plan_hash_of(request, toolbox) == expected
    assert plan_hash_of(request, toolbox, encode_message(request)) == expected
    # a tool named only as a fallback counts: dropping it changes the hash
    assert plan_hash(encode_message(request), {"tool:wait_gate": signatures[
        "tool:wait_gate"]}) != expected
