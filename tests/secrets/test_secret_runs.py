"""Secrets in an in-process host's runs (PROTOCOL.md §5 Secrets): resolved only from a node's
static input, when its tool is called; an object an expression builds is never resolved;
a node with a reference is never answered from the step cache; a tool's output that
echoes a value is redacted before anything reads it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from a2e_chains import ChainPlugin
from a2e_skills import SkillPlugin
from a2e_tools import ToolsPlugin

from a2e_host import secrets
from a2e_host.chains.messages import ChainEvent, ChainNode, ChainRequest, ChainResponse
from a2e_host.chains.secret_refs import SecretResolver
from a2e_host.client import connect_memory
from a2e_host.config import load_config
from a2e_host.exceptions import NodeError
from a2e_host.runtime.host import Host
from a2e_host.secrets import RequestSecretPolicy
from tests.support.secret_values import HOST_VALUE, REQUEST_VALUE, digest, probe_records

CONFIG = """\
tools = ["secretprobe", "conformance"]
allow_proc = ["printenv"]
proc_env_keys = ["TOKEN"]

[secrets]
HOSTKEY = {file = "hostkey.txt", tools = ["secret_*", "echo"], executables = ["printenv"]}

[request_secrets]
tools = ["echo", "secret_echo"]
"""


SKILL = {"name": "probe_skill", "version": "1", "entry_node": "e", "input_schema": {
    "type": "object"}, "nodes": [{"node_id": "e", "kind": "tool", "name": "secret_echo",
                                  "input": {"a": {"$secret": "HOSTKEY"}, "b": "from-skill"}}]}


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    (tmp_path / "hostkey.txt").write_text(HOST_VALUE + "\n", encoding="utf-8")
    (tmp_path / "skills").mkdir()
    (tmp_path / "skills" / "probe_skill.json").write_text(json.dumps(SKILL), encoding="utf-8")
    path = tmp_path / "host.toml"
    path.write_text(CONFIG, encoding="utf-8")
    config = load_config(path, overrides={"root": str(tmp_path), "skills_dirs": [
        str(tmp_path / "skills")]}, environ={})
    chains = ChainPlugin(config)
    yield Host(config, plugins=[chains, ToolsPlugin(config), SkillPlugin(config)])
    anyio.run(chains.aclose)  # its secrets leave the process-wide registry


async def _run(host: Host, nodes: list[dict[str, Any]], **fields: Any) -> tuple[
        list[ChainEvent], ChainResponse]:
    request = ChainRequest(nodes=[ChainNode(**n) for n in nodes],
                           entry_node=nodes[0]["node_id"], **fields)
    with anyio.fail_after(10):
        async with connect_memory(host, agent_caps=["chains", "proc", "skill"]) as client:
            messages = [m async for m in client.send_request(request)]
    events = [m for m in messages if isinstance(m, ChainEvent)]
    response = messages[-1]
    assert isinstance(response, ChainResponse)
    return events, response


@pytest.mark.asyncio
async def test_a_configured_file_secret_and_a_request_secret_reach_the_tool_redacted_after(
    host: Host, tmp_path: Path,
) -> None:
    events, response = await _run(host, [{
        "node_id": "e", "kind": "tool", "name": "secret_echo",
        "input": {"a": {"$secret": "HOSTKEY"}, "b": {"$secret": "REQKEY"}}}],
        secrets={"REQKEY": REQUEST_VALUE})
    assert response.success, response.error
    assert response.final_output == {"text": "a=«secret:HOSTKEY» b=«secret:REQKEY»",
                                      "a": "«secret:HOSTKEY»",
                                      "pair": ["«secret:HOSTKEY»", "«secret:REQKEY»"]}
    assert [(r["a"], r["b"]) for r in probe_records(tmp_path)] == [
        (digest(HOST_VALUE), digest(REQUEST_VALUE))]  # the file's newline is not part of it
    assert secrets.redactor() is not None  # the host's own secret stays known while it lives


@pytest.mark.asyncio
async def test_a_reference_an_expression_builds_is_passed_as_data_never_resolved(
    host: Host,
) -> None:
    _, response = await _run(host, [{
        "node_id": "e", "kind": "tool", "name": "echo",
        "input_map": {"got": "input.smuggled"}}],
        initial_input={"smuggled": {"$secret": "HOSTKEY"}})
    assert response.success, response.error
    assert response.final_output == {"got": {"$secret": "HOSTKEY"}}


@pytest.mark.asyncio
async def test_a_node_with_a_reference_is_never_answered_from_the_step_cache(
    host: Host,
) -> None:
    node = {"node_id": "e", "kind": "tool", "name": "echo", "cache": True,
            "input": {"token": {"$secret": "REQKEY"}}}
    first_events, first = await _run(host, [node], secrets={"REQKEY": "first-value-1"})
    second_events, second = await _run(host, [node], secrets={"REQKEY": "second-value-2"})
    assert first.final_output == second.final_output == {"token": "«secret:REQKEY»"}
    done = [e.data for e in (*first_events, *second_events) if e.phase == "done"]
    assert [d["cache"] for d in done] == ["off", "off"]


@pytest.mark.asyncio
async def test_a_request_secrets_are_forgotten_when_their_run_ends(host: Host) -> None:
    value = "forgotten-after-the-run"
    await _run(host, [{"node_id": "e", "kind": "tool", "name": "echo",
                       "input": {"t": {"$secret": "GONE"}}}], secrets={"GONE": value})
    assert secrets.redact(value) == value
    assert secrets.redact(HOST_VALUE) == "«secret:HOSTKEY»"


@pytest.mark.asyncio
async def test_a_proc_node_gets_a_secret_in_its_environment_and_its_echo_is_redacted(
    host: Host,
) -> None:
    _, response = await _run(host, [{
        "node_id": "p", "kind": "proc",
        "input": {"argv": ["printenv", "TOKEN"], "env": {"TOKEN": {"$secret": "HOSTKEY"}}}}])
    assert response.success, response.error
    assert response.final_output["stdout"] == "«secret:HOSTKEY»\n"  # the child printed it


def test_a_request_secret_is_not_resolved_in_a_run_resumed_without_it() -> None:
    policy = RequestSecretPolicy(tools=("echo",))
    resumed = SecretResolver({"REQKEY": policy.secret("REQKEY", "«secret:REQKEY»")})
    node = ChainNode(node_id="e", kind="tool", name="echo",
                     input={"t": {"$secret": "REQKEY"}})
    with pytest.raises(NodeError, match="not kept across a host restart"):
        resumed.resolve(node, dict(node.input))
    live = SecretResolver({"REQKEY": policy.secret("REQKEY", REQUEST_VALUE)})
    assert live.resolve(node, dict(node.input)) == {"t": REQUEST_VALUE}
    other = ChainNode(node_id="o", kind="tool", name="upper", input=node.input)
    with pytest.raises(NodeError, match="may not be passed to tool 'upper'"):
        live.resolve(other, dict(other.input))


@pytest.mark.asyncio
async def test_a_direct_tool_call_resolves_a_configured_secret_and_redacts_its_echo(
    host: Host, tmp_path: Path,
) -> None:
    with anyio.fail_after(10):
        async with connect_memory(host, agent_caps=["tools"]) as client:
            result = await client.call_tool("secret_echo", {
                "a": {"$secret": "HOSTKEY"}, "b": "plain-value"}).result()
    assert result.success, result.error
    assert result.data["text"] == "a=«secret:HOSTKEY» b=plain-value"
    assert probe_records(tmp_path)[0]["a"] == digest(HOST_VALUE)


@pytest.mark.asyncio
async def test_malformed_request_secrets_are_refused_before_any_value_is_registered(
    host: Host, monkeypatch: pytest.MonkeyPatch,
) -> None:
    registered: list[dict[str, str]] = []
    real = secrets.register

    def spy(values: dict[str, str]) -> int:
        registered.append(dict(values))
        return real(values)

    monkeypatch.setattr("a2e_chains.register", spy)
    events, response = await _run(host, [{"node_id": "e", "kind": "tool", "name": "echo",
                                           "input": {"t": "the letter e"}}],
                                  secrets={"SHORT": "e", "OK": "long-enough-value"})
    assert events == [] and response.error is not None
    assert response.error.code == "chain_invalid"
    assert [(p["code"], p["field"]) for p in response.error.details["errors"]] == [
        ("secret_invalid", "secrets.SHORT")]
    assert registered == []
    _, many = await _run(host, [{"node_id": "e", "kind": "tool", "name": "echo"}],
                         secrets={f"K{i}": f"value-{i:05d}" for i in range(5000)})
    assert many.error is not None and many.error.details["requested"] == 5000
    assert registered == []


@pytest.mark.asyncio
async def test_a_declared_skill_names_a_host_secret_by_node_and_by_call(
    host: Host, tmp_path: Path,
) -> None:
    _, response = await _run(host, [{"node_id": "s", "kind": "skill", "name": "probe_skill"}])
    assert response.success, response.error
    assert response.final_output["text"] == "a=«secret:HOSTKEY» b=from-skill"
    with anyio.fail_after(10):
        async with connect_memory(host, agent_caps=["skill"]) as client:
            called = await client.call_skill("probe_skill", {}).result()
    assert called.success, called
    assert [r["a"] for r in probe_records(tmp_path)] == [digest(HOST_VALUE)] * 2
