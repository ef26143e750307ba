"""Issue 19, traces: a ``skill/call`` gets a span of its own, the parent of its nodes'
spans (README "Observability")."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from a2e_host.chains.skill_messages import SkillCallRequest, SkillCallResponse
from a2e_host.config import HostConfig
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import open_memory_client
from tests.support.memory import handshaken
from tests.support.telemetry import recorded_spans, span_tree

SHOUT = {"name": "shout", "version": "1", "entry_node": "join",
         "input_schema": {"type": "object", "properties": {"parts": {"type": "array"}}},
         "nodes": [
             {"node_id": "join", "kind": "tool", "name": "concat",
              "input_map": {"parts": "input.parts"}, "next_node": "up"},
             {"node_id": "up", "kind": "tool", "name": "upper",
              "input_map": {"text": "join.output.text"}},
         ]}


@pytest.mark.asyncio
async def test_a_skill_call_is_one_span_tree_under_an_a2e_skill_call_span(
    tmp_path: Path,
) -> None:
    (tmp_path / "shout.json").write_text(json.dumps(SHOUT))
    host = Host(HostConfig(tools=("conformance",), skills_dirs=(str(tmp_path),)))
    with recorded_spans() as exporter, anyio.fail_after(20):
        async with open_memory_client(host) as client:
            await handshaken(client, ("chains", "skill"))
            client.send(SkillCallRequest(id="k1", name="shout",
                                         arguments={"parts": ["a", "b"]}))
            while not isinstance(answer := await client.receive(), SkillCallResponse):
                pass
        spans = exporter.get_finished_spans()
    assert answer.error is None and answer.data is not None, answer
    assert span_tree(spans) == [
        ("a2e.node", "skill", "a2e.skill.call"),
        ("a2e.node", "skill/join", "skill"),
        ("a2e.node", "skill/up", "skill"),
        ("a2e.skill.call", "", "-"),
    ]
    call = next(s for s in spans if s.name == "a2e.skill.call")
    assert dict(call.attributes or {}) == {
        "a2e.req_id": "k1", "a2e.chain_id": "skill-k1", "a2e.node.kind": "skill",
        "a2e.tool.name": "shout", "a2e.skill.version": "1", "a2e.outcome": "ok",
        "a2e.nodes_run": 1,
    }
    assert {s.context.trace_id for s in spans} == {call.context.trace_id}
