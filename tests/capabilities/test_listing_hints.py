"""A chain naming a tool or skill the host does not have is refused with a hint that names
the message listing them (issue 15: hints that pointed to the CLI now name
``tool/list/req``), on the real stdio CLI."""

from __future__ import annotations

import pytest

from tests.support.process import CLI
from tests.support.stdio import handshake, stdio_process

FLAGS = ["--tools", "conformance"]


@pytest.mark.asyncio
async def test_an_unknown_tool_or_skill_in_a_chain_is_refused_naming_the_listing_message(
) -> None:
    async with stdio_process([*CLI, "stdio", *FLAGS]) as host:
        await handshake(host, ["chains", "skill"])
        await host.send({"type": "chain/req", "id": "t", "streaming": False, "entry_node": "a",
                         "nodes": [{"node_id": "a", "kind": "tool", "name": "ad",
                                    "input": {"a": 1, "b": 2}}]})
        tool = await host.receive()
        await host.send({"type": "chain/req", "id": "s", "streaming": False, "entry_node": "s",
                         "nodes": [{"node_id": "s", "kind": "skill", "name": "nope",
                                    "input": {}}]})
        skill = await host.receive()
    assert (tool["type"], tool["req_id"], tool["error"]["code"]) == (
        "chain/resp", "t", "chain_invalid")
    assert tool["error"]["details"]["errors"] == [{
        "code": "chain_invalid", "node_id": "a", "field": "name",
        "message": "unknown tool 'ad'; did you mean 'add'?",
        "hint": "use a registered tool (tool/list/req lists them) or enable the pack that "
                "provides it"}]
    assert (skill["req_id"], skill["error"]["code"]) == ("s", "chain_invalid")
    [problem] = skill["error"]["details"]["errors"]
    assert (problem["field"], problem["hint"]) == (
        "name", "use a registered skill (skill/discover/req lists them)")
