"""Versioned skills (issue 15): a skill is registered by (name, version) with a lifecycle;
a ``skill`` node names ``name@version`` or ``name`` (the newest active version); a
deprecated version runs with a warning in its start event's ``data``; a retired one is
refused before anything runs with a hint naming the active version; a draft runs only
when named exactly."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from a2e_chains import ChainPlugin

from a2e_host.chains.messages import ChainEvent, ChainResponse
from a2e_host.chains.skill_versions import VersionTable, parse_ref
from a2e_host.chains.skills import PythonSkill, SkillLoadError, load_skills
from a2e_host.client import connect_memory, spawn_stdio
from a2e_host.config import HostConfig
from a2e_host.runtime.host import Host
from a2e_host.tools import tool
from tests.support.process import CLI, STARTUP
from tests.support.skills import write_versioned_skills


def table() -> VersionTable[str]:
    t: VersionTable[str] = VersionTable()
    for version, life in (("1", "deprecated"), ("2", "active"), ("1.5", "active"),
                          ("10", "draft"), ("0.9", "retired")):
        t.add("s", version, life, f"s{version}")
    return t


def test_a_bare_name_picks_the_newest_active_version_in_pep_440_order() -> None:
    found = table().resolve("s")
    assert (found.entry, found.version, found.lifecycle, found.warning) == (
        "s2", "2", "active", "")


def test_an_exact_version_picks_that_version_whatever_its_lifecycle_but_retired() -> None:
    t = table()
    assert t.resolve("s@10").entry == "s10"  # a draft, named exactly
    assert t.resolve("s@1.5").entry == "s1.5"
    assert t.resolve("s@2.0").version == "2"  # PEP 440: 2.0 is 2


def test_a_deprecated_version_resolves_with_a_warning_naming_the_active_one() -> None:
    found = table().resolve("s@1")
    assert (found.entry, found.lifecycle) == ("s1", "deprecated")
    assert found.warning == "skill 's@1' is deprecated; use 's@2'"


def test_a_retired_version_is_refused_with_a_hint_naming_the_active_version() -> None:
    found = table().resolve("s@0.9")
    assert found.entry is None
    assert found.message == "skill 's@0.9' is retired"
    assert found.hint == "use 's@2', its active version (or 's' alone)"


def test_a_name_with_only_drafts_or_retired_versions_is_refused_bare() -> None:
    t: VersionTable[str] = VersionTable()
    t.add("d", "0.1", "draft", "d")
    t.add("r", "1", "retired", "r")
    t.add("old", "1", "deprecated", "old")
    assert t.resolve("d").message == "skill 'd' has no active version (versions: 0.1 draft)"
    assert t.resolve("d").hint == "name a version exactly, e.g. 'd@0.1'"
    assert t.resolve("r@1").hint == "every version of 'r' is retired; use another skill"
    # a skill whose only version is deprecated still runs bare, with its warning
    assert t.resolve("old").warning == "skill 'old@1' is deprecated; it has no active version yet"


def test_unknown_versions_and_bad_registrations_are_named() -> None:
    t = table()
    assert t.resolve("s@3").message == (
        "skill 's' has no version '3' (versions: 0.9 retired, 1 deprecated, 1.5 active, "
        "2 active, 10 draft)")
    assert t.resolve("nope").known is False
    assert parse_ref("a@b@c") == ("a", "b@c")
    with pytest.raises(ValueError, match="'s@2.0' is defined twice"):
        t.add("s", "2.0", "active", "again")
    with pytest.raises(ValueError, match="'latest' is not a PEP 440 version"):
        t.add("s", "latest", "active", "x")
    with pytest.raises(ValueError, match="status 'live' is not one of draft, active"):
        t.add("s", "4", "live", "x")


def test_a_skill_file_with_a_bad_status_stops_loading_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text(
        '{"name": "x", "version": "1", "status": "gone", "entry_node": "e", '
        '"nodes": [{"node_id": "e", "kind": "tool", "name": "echo"}]}', encoding="utf-8")
    with pytest.raises(SkillLoadError, match=r"x.json: skill 'x@1': status 'gone' is not one"):
        load_skills(HostConfig(skills_dirs=(str(tmp_path),)), python_skills=[])


def test_python_skills_default_to_version_1_active_and_may_carry_a_lifecycle() -> None:
    @tool(version="1")
    def double(n: int) -> dict[str, int]:
        return {"n": 2 * n}

    @tool(name="double", version="2")
    def double2(n: int) -> dict[str, int]:
        return {"n": 4 * n}

    registry = load_skills(HostConfig(), python_skills=[
        double, PythonSkill(double2, status="deprecated")])
    assert [(v.name, v.version, v.lifecycle) for v in registry.versions()] == [
        ("double", "1", "active"), ("double", "2", "deprecated")]
    assert registry.get("double") is double  # the newest *active* one
    assert registry.get("double@2") is double2


@asynccontextmanager
async def memory_client(tmp_path: Path) -> AsyncIterator[Any]:
    config = HostConfig(tools=("conformance",),
                        skills_dirs=(str(write_versioned_skills(tmp_path / "skills")),))
    host = Host(config, plugins=[ChainPlugin])
    async with host.running(), connect_memory(host, agent_caps=["chains", "skill"]) as c:
        yield c


async def run(client: Any, name: str) -> tuple[list[ChainEvent], ChainResponse]:
    nodes = [{"node_id": "s", "kind": "skill", "name": name, "input": {"parts": ["a", "b"]}}]
    with anyio.fail_after(20):
        messages = [m async for m in client.run_chain(nodes, "s")]
    assert isinstance(messages[-1], ChainResponse)
    return messages[:-1], messages[-1]


@pytest.mark.asyncio
async def test_a_skill_node_naming_the_bare_name_runs_the_newest_active_version(
        tmp_path: Path) -> None:
    async with memory_client(tmp_path) as client:
        await _scenario_0(client)


async def _scenario_0(client: Any) -> None:
    events, response = await run(client, "shout")
    assert response.success and response.final_output == {"v": 2, "text": "AB"}
    assert [(e.node_id, e.phase, e.data) for e in events][:1] == [("s", "start", {})]


@pytest.mark.asyncio
async def test_a_skill_node_naming_a_version_runs_it_and_a_draft_only_by_exact_version(
        tmp_path: Path) -> None:
    async with memory_client(tmp_path) as client:
        await _scenario_1(client)


async def _scenario_1(client: Any) -> None:
    _, draft = await run(client, "shout@10")
    assert draft.final_output == {"v": 10, "text": "AB"}
    _, bare = await run(client, "sketch")
    assert bare.error is not None and bare.error.code == "chain_invalid"
    problem = bare.error.details["errors"][0]
    assert (problem["node_id"], problem["field"], problem["message"], problem["hint"]) == (
        "s", "name", "skill 'sketch' has no active version (versions: 0.1 draft)",
        "name a version exactly, e.g. 'sketch@0.1'")


@pytest.mark.asyncio
async def test_a_deprecated_version_runs_with_a_warning_in_its_start_event(tmp_path: Path) -> None:
    async with memory_client(tmp_path) as client:
        await _scenario_2(client)


async def _scenario_2(client: Any) -> None:
    events, response = await run(client, "shout@1")
    assert response.success and response.final_output == {"text": "AB"}
    start = events[0]
    assert (start.node_id, start.phase, start.kind) == ("s", "start", "status")
    assert start.data == {"warning": "skill 'shout@1' is deprecated; use 'shout@2'",
                          "skill": "shout", "version": "1", "lifecycle": "deprecated"}
    assert [e.data for e in events[1:]] == [{}] * (len(events) - 1)


@pytest.mark.asyncio
async def test_a_retired_version_is_refused_before_anything_runs_naming_the_active_one(
        tmp_path: Path) -> None:
    async with memory_client(tmp_path) as client:
        await _scenario_3(client)


async def _scenario_3(client: Any) -> None:
    events, response = await run(client, "gone@1")
    assert events == [] and response.nodes_run == 0
    assert response.error is not None and response.error.code == "chain_invalid"
    problem = response.error.details["errors"][0]
    assert (problem["field"], problem["message"], problem["hint"]) == (
        "name", "skill 'gone@1' is retired",
        "use 'gone@2', its active version (or 'gone' alone)")


@pytest.mark.asyncio
async def test_an_unknown_skill_name_still_gets_a_did_you_mean(tmp_path: Path) -> None:
    async with memory_client(tmp_path) as client:
        await _scenario_4(client)


async def _scenario_4(client: Any) -> None:
    _, response = await run(client, "shuot")
    assert response.error is not None
    assert response.error.details["errors"][0]["message"] == (
        "unknown skill 'shuot'; did you mean 'shout'?")


@pytest.mark.asyncio
async def test_a_declared_skill_may_name_another_skill_by_version(tmp_path: Path) -> None:
    skills = write_versioned_skills(tmp_path / "skills")
    (skills / "outer.json").write_text(
        '{"name": "outer", "entry_node": "call", "nodes": [{"node_id": "call", '
        '"kind": "skill", "name": "shout@1", "input_map": {"parts": "input.parts"}}]}',
        encoding="utf-8")
    argv = [*CLI, "stdio", "--tools", "conformance", "--skills", str(skills)]
    nodes = [{"node_id": "o", "kind": "skill", "name": "outer", "input": {"parts": ["x"]}}]
    with anyio.fail_after(30):
        async with spawn_stdio(argv, agent_caps=["chains", "skill"],
                               handshake_timeout=STARTUP) as c:
            messages = [m async for m in c.run_chain(nodes, "o")]
    response = messages[-1]
    assert isinstance(response, ChainResponse) and response.final_output == {"text": "X"}
    warned = [(m.node_id, m.data.get("warning")) for m in messages[:-1]
              if isinstance(m, ChainEvent) and m.data]
    assert warned == [("o/call", "skill 'shout@1' is deprecated; use 'shout@2'")]
