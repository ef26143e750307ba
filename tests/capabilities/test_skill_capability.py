"""The ``skill`` capability (issue 15) over the real transports: an agent discovers skills
with their versions and lifecycle and calls a versioned skill directly with events, over
stdio (the real CLI spawned) and WebSocket (a real server on 127.0.0.1); every response
decodes with the public SDK's models; a session not granted ``skill`` gets
``capability_missing``; a session granted ``chains`` only behaves as before."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from a2e_host.chains.messages import ChainEvent, ChainResponse
from a2e_host.chains.skill_messages import SkillCallResponse, SkillEvent
from a2e_host.client import HostError, connect_ws, spawn_stdio
from tests.support.process import CLI, STARTUP
from tests.support.sdk import assert_sdk_accepts
from tests.support.skills import write_versioned_skills
from tests.support.ws import shared_serving

TRANSPORTS = ["stdio", "ws"]


@pytest.fixture(scope="module")
def ws_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One WebSocket host for the module's ``ws`` cases, on the same versioned skills each
    case writes for its stdio host; each ``ws`` case is a session of its own."""
    skills = write_versioned_skills(tmp_path_factory.mktemp("ws") / "skills")
    with shared_serving([*CLI, "serve", "--port", "0", "--tools", "conformance", "--skills",
                         str(skills)]) as url:
        yield url


@asynccontextmanager
async def agent(transport: str, skills: Path, caps: list[str], ws_url: str = ""
                ) -> AsyncIterator[Any]:
    """A client of a stdio host spawned on ``skills``, or a session of the module's
    WebSocket host (``ws_url``)."""
    flags = ["--tools", "conformance", "--skills", str(skills)]
    with anyio.fail_after(60):
        if transport == "stdio":
            async with spawn_stdio([*CLI, "stdio", *flags], agent_caps=caps,
                                   handshake_timeout=STARTUP) as client:
                yield client
        else:
            async with connect_ws(ws_url, agent_caps=caps) as client:
                yield client


def wire(message: Any) -> dict[str, Any]:
    """The message as the agent received it, checked against the SDK's model."""
    data: dict[str, Any] = msgspec.to_builtins(message)
    assert_sdk_accepts(data)
    return data


async def call(client: Any, name: str, arguments: dict[str, Any]) -> tuple[
        list[dict[str, Any]], dict[str, Any]]:
    messages = [m async for m in client.call_skill(name, arguments)]
    assert all(isinstance(m, SkillEvent) for m in messages[:-1])
    assert isinstance(messages[-1], SkillCallResponse)
    return [wire(m) for m in messages[:-1]], wire(messages[-1])


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_agent_discovers_every_skill_version_with_its_lifecycle(
        transport: str, tmp_path: Path, ws_url: str) -> None:
    skills = write_versioned_skills(tmp_path / "skills")
    async with agent(transport, skills, ["skill"], ws_url) as client:
        assert client.accepted_caps == ["skill"]
        meta = client.handshake.accepted_caps[0].metadata
        found = await client.discover_skills()
        texts = await client.discover_skills(tags=["text"])
        none = await client.discover_skills(categories=["nothing"])
        raw = msgspec.to_builtins(client.handshake)
    assert_sdk_accepts(raw)
    listed = [(s.name, s.version, s.lifecycle, s.status) for s in found]
    assert listed == [
        ("gone", "1", "retired", "Archived"), ("gone", "2", "active", "Published"),
        ("legacy", "1", "deprecated", "Published"), ("lost", "1", "retired", "Archived"),
        ("shout", "1", "deprecated", "Published"), ("shout", "2", "active", "Published"),
        ("shout", "10", "draft", "Created"), ("sketch", "0.1", "draft", "Created"),
    ]
    assert meta["skills"] == [{"name": n, "version": v, "lifecycle": life}
                              for n, v, life, _ in listed]
    assert (meta["namespace"], meta["priority"], meta["skills_total"]) == ("skill/*", 30, 8)
    assert [(s.name, s.version) for s in texts] == [("shout", "1"), ("shout", "2"),
                                                   ("shout", "10")]
    assert none == []
    shout2 = wire_definition(found[5])
    assert shout2 == {
        "name": "shout", "version": "2", "description": "Join the parts and upper-case "
        "them (v2).", "triggers": [], "status": "Published", "lifecycle": "active",
        "input_schema": {"type": "object", "required": ["parts"],
                         "properties": {"parts": {"type": "array"}}},
        "output_schema": {}, "arguments": ["parts"],
        "when_to_use": "Join the parts and upper-case them (v2).",
        "argument_hint": "an object with parts (required)", "source": "project",
        "category": "text", "tags": ["text"], "timeout_seconds": None}


def wire_definition(definition: Any) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.to_builtins(definition)
    assert_sdk_accepts({"type": "skill/discover/resp", "id": "x", "version": "1.0",
                        "ts": 1.0, "req_id": "r", "skills": [data]})
    return data


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_agent_calls_a_versioned_skill_directly_and_gets_its_events(
        transport: str, tmp_path: Path, ws_url: str) -> None:
    skills = write_versioned_skills(tmp_path / "skills")
    async with agent(transport, skills, ["skill"], ws_url) as client:
        events, response = await call(client, "shout@2", {"parts": ["a", "b"]})
        bare_events, bare = await call(client, "shout", {"parts": ["c"]})
    assert [(e["seq"], e["kind"], e["data"]["node_id"], e["data"]["phase"]) for e in events] == [
        (1, "status", "skill", "start"),
        (2, "status", "skill/join", "start"), (3, "status", "skill/join", "done"),
        (4, "status", "skill/up", "start"), (5, "status", "skill/up", "done"),
        (6, "status", "skill/mark", "start"), (7, "status", "skill/mark", "done"),
    ]
    assert events[2]["data"]["output"] == {"text": "ab"}
    assert {e["req_id"] for e in events} == {response["req_id"]}
    assert response["name"] == "shout@2"
    assert response["error"] is None
    assert response["skill"] == {"name": "shout", "version": "2", "lifecycle": "active"}
    assert response["events_dropped"] == 0
    result = response["data"]
    assert (result["success"], result["data"], result["error"], result["error_code"]) == (
        True, {"v": 2, "text": "AB"}, None, None)
    assert result["duration_ms"] >= 0
    assert bare["data"]["data"] == {"v": 2, "text": "C"}
    assert len(bare_events) == 7


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_deprecated_skill_call_warns_and_a_retired_one_is_refused_with_the_hint(
        transport: str, tmp_path: Path, ws_url: str) -> None:
    skills = write_versioned_skills(tmp_path / "skills")
    async with agent(transport, skills, ["chains", "skill"], ws_url) as client:
        old_events, old = await call(client, "shout@1", {"parts": ["a"]})
        gone_events, gone = await call(client, "gone@1", {})
        draft_events, draft = await call(client, "sketch", {})
        failed_events, failed = await call(client, "shout@2", {})
    warning = "skill 'shout@1' is deprecated; use 'shout@2'"
    assert old_events[0]["data"] == {"node_id": "skill", "phase": "start", "warning": warning,
                                     "skill": "shout", "version": "1",
                                     "lifecycle": "deprecated"}
    assert old["data"]["data"] == {"text": "A"}
    assert old["skill"] == {"name": "shout", "version": "1", "lifecycle": "deprecated",
                            "warning": warning}
    assert gone_events == [] and gone["data"] is None
    assert gone["error"] == {
        "code": "unknown_skill", "retryable": False,
        "message": "skill 'gone@1' is retired; use 'gone@2', its active version (or 'gone' "
                   "alone)",
        "details": {"hint": "use 'gone@2', its active version (or 'gone' alone)"}}
    assert draft_events == [] and draft["error"]["code"] == "unknown_skill"
    assert draft["error"]["message"] == (
        "skill 'sketch' has no active version (versions: 0.1 draft); name a version "
        "exactly, e.g. 'sketch@0.1'")
    # the arguments are held to the skill's input schema before anything runs
    assert failed_events == [] and failed["data"] is None
    assert failed["error"]["code"] == "schema_violation"
    assert failed["error"]["details"]["errors"][0]["field"] == "input.parts"


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_skill_that_runs_and_fails_answers_success_false_with_skill_error(
        transport: str, tmp_path: Path, ws_url: str) -> None:
    skills = write_versioned_skills(tmp_path / "skills")
    async with agent(transport, skills, ["skill"], ws_url) as client:
        events, response = await call(client, "shout", {"parts": "not a list"})
    assert response["error"] is None
    result = response["data"]
    assert (result["success"], result["error_code"], result["data"]) == (
        False, "skill_error", None)
    assert "join" in result["error"]
    assert [(e["data"]["node_id"], e["data"]["phase"]) for e in events] == [
        ("skill", "start"), ("skill/join", "start"), ("skill/join", "error")]


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_session_not_granted_skill_gets_capability_missing_and_chains_as_before(
        transport: str, tmp_path: Path, ws_url: str) -> None:
    skills = write_versioned_skills(tmp_path / "skills")
    nodes = [{"node_id": "s", "kind": "skill", "name": "shout", "input": {"parts": ["a"]}}]
    async with agent(transport, skills, ["chains"], ws_url) as client:
        with pytest.raises(HostError) as discovering:
            await client.discover_skills()
        with pytest.raises(HostError) as calling:
            await client.call_skill("shout", {"parts": ["a"]}).result()
        refused = await client.run_chain(nodes, "s").result()
    for raised in (discovering.value, calling.value):
        assert raised.code == "capability_missing"
        assert raised.error.capability_name == "skill"
        assert_sdk_accepts(msgspec.to_builtins(raised.error))
    assert refused.error is not None
    assert refused.error.details["errors"][0]["message"] == (
        "skill nodes need the 'skill' capability, which this session was not granted")


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_session_asking_chains_and_skill_runs_skill_nodes_by_version(
        transport: str, tmp_path: Path, ws_url: str) -> None:
    skills = write_versioned_skills(tmp_path / "skills")
    nodes = [{"node_id": "s", "kind": "skill", "name": "shout@1", "input": {"parts": ["a"]}}]
    async with agent(transport, skills, ["chains", "skill"], ws_url) as client:
        assert client.accepted_caps == ["chains", "skill"]
        messages = [m async for m in client.run_chain(nodes, "s")]
    response = messages[-1]
    assert isinstance(response, ChainResponse) and response.final_output == {"text": "A"}
    first = messages[0]
    assert isinstance(first, ChainEvent) and first.data["warning"] == (
        "skill 'shout@1' is deprecated; use 'shout@2'")


@pytest.mark.asyncio
async def test_call_skill_and_call_tool_results_are_both_the_sdk_result_object(
        tmp_path: Path) -> None:
    from a2e_host.chains.skill_messages import SkillResult
    from a2e_host.tools.messages import ToolCallResponse, ToolResult

    skills = write_versioned_skills(tmp_path / "skills")
    async with agent("stdio", skills, ["skill", "tools"]) as client:
        skill_call = client.call_skill("shout@2", {"parts": ["a", "b"]})
        skill = await skill_call.result()
        tool_call = client.call_tool("add", {"a": 1, "b": 2})
        tool = await tool_call.result()
        unknown_call = client.call_skill("nope", {})
        unknown = await unknown_call.result()
    assert isinstance(skill, SkillResult) and isinstance(tool, ToolResult)
    assert (skill.success, skill.data, skill.error) == (True, {"v": 2, "text": "AB"}, None)
    assert (tool.success, tool.data, tool.error) == (True, {"sum": 3}, None)
    assert isinstance(skill_call.response, SkillCallResponse)
    assert skill_call.response.data is skill
    assert skill_call.response.skill == {
        "name": "shout", "version": "2", "lifecycle": "active"}
    assert isinstance(tool_call.response, ToolCallResponse) and tool_call.response.data is tool
    assert unknown_call.response is not None and unknown_call.response.error is not None
    assert (unknown.success, unknown.data, unknown.error_code, unknown.error) == (
        False, None, "unknown_skill", unknown_call.response.error["message"])
