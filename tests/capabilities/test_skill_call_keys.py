"""A ``skill/call/req``'s idempotency keys derive from its session and request id
(PROTOCOL.md §5, §11): two sessions sending the same request id get different keys, as a
chain or a direct tool call does. In-process host."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from a2e_chains import ChainPlugin
from a2e_skills import SkillPlugin

from a2e_host import tools
from a2e_host.chains.nodes import idempotency_key
from a2e_host.chains.skills import load_skills
from a2e_host.chains.toolbox import Toolbox
from a2e_host.client import connect_memory
from a2e_host.client.skills import SkillCall, skill_call_request
from a2e_host.config import HostConfig
from a2e_host.runtime.host import Host
from a2e_host.tools import Tool, load_tools

KEYED = {"name": "keyed", "description": "Return the idempotency key its tool sees.",
         "entry_node": "k", "nodes": [{"node_id": "k", "kind": "tool", "name": "key"}]}


def key(args: dict[str, Any]) -> dict[str, str]:
    """Return the running node's idempotency key."""
    ctx = tools.context()
    assert ctx is not None
    return {"key": ctx.idempotency_key}


@pytest.mark.asyncio
async def test_two_sessions_calling_a_skill_with_one_request_id_get_different_keys(
        tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    skills.mkdir()
    (skills / "keyed.json").write_text(json.dumps(KEYED), encoding="utf-8")
    config = HostConfig(tools=("conformance",), skills_dirs=(str(skills),))
    registry = load_tools(config)
    registry.register(Tool("key", key, blocking=False))
    box = Toolbox(registry)
    box.skills = load_skills(config, box)
    box.executors["skill"] = box.skills.run_skill
    host = Host(config, plugins=[ChainPlugin(config, box), SkillPlugin(config, box)])
    seen: list[tuple[str, str]] = []
    async with host.running():
        for _ in range(2):
            async with connect_memory(host, agent_caps=["skill"]) as client:
                request = msgspec.structs.replace(
                    skill_call_request("keyed", session_id=client.session_id), id="same-id")
                result = await SkillCall(client, request).result()
                assert result.success, result.error
                seen.append((client.session_id, result.data["key"]))
    (first_session, first_key), (second_session, second_key) = seen
    assert first_session != second_session
    assert first_key != second_key
    # the key of the skill's node "k" (shown as "skill/k") of the run "<session>/<req_id>"
    assert first_key == idempotency_key(f"{first_session}/same-id", "skill/k")
    assert second_key == idempotency_key(f"{second_session}/same-id", "skill/k")
