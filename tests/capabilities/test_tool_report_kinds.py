"""A tool's ``log`` and ``artifact`` reports (issue 15: ``tool/event`` kinds ``progress``
/ ``log`` / ``artifact``): a direct call sends each as a ``tool/event`` of that kind, which
the SDK's model decodes; in a chain each is a ``chain/event`` of kind ``progress`` whose
``data.report`` names it, the node's phase unchanged. In-process host, the whole host
path."""

from __future__ import annotations

import base64
from typing import Any

import msgspec
import pytest
from a2e_chains import ChainPlugin
from a2e_tools import ToolsPlugin

from a2e_host import tools
from a2e_host.chains.toolbox import Toolbox
from a2e_host.client import connect_memory
from a2e_host.config import HostConfig
from a2e_host.runtime.host import Host
from a2e_host.tools import Tool
from tests.support.sdk import assert_sdk_accepts

CHUNK = base64.b64encode(b"a,b\n1,2\n").decode()
REPORTS = [
    ("log", {"level": "info", "message": "reading"}),
    ("artifact", {"name": "out.csv", "mime": "text/csv", "chunk": CHUNK, "final": True}),
    ("log", {"level": "warning", "message": "done"}),
]


def reporting(args: dict[str, Any]) -> dict[str, Any]:
    sent = [tools.report(kind, data) for kind, data in REPORTS]
    return {"sent": sent}


def host() -> Host:
    config = HostConfig(tools=["conformance"])
    registry = tools.load_tools(config)
    registry.register(Tool("reporting", reporting, blocking=True))
    return Host(config, plugins=[ChainPlugin(config, toolbox=Toolbox(registry)),
                                 ToolsPlugin(config, tools=registry)])


@pytest.mark.asyncio
async def test_log_and_artifact_reports_are_tool_events_of_their_kind_the_sdk_decodes() -> None:
    async with connect_memory(host(), agent_caps=["chains", "tools"]) as client:
        call = client.call_tool("reporting", {}, streaming=True)
        messages = [m async for m in call]
    *events, response = [msgspec.json.decode(msgspec.json.encode(m)) for m in messages]
    for frame in (*events, response):
        assert_sdk_accepts(frame)
    assert [(e["type"], e["kind"], e["seq"], e["data"]) for e in events] == [
        ("tool/event", kind, i + 1, data) for i, (kind, data) in enumerate(REPORTS)]
    assert (response["data"]["success"], response["data"]["data"]) == (
        True, {"sent": [True, True, True]})


@pytest.mark.asyncio
async def test_in_a_chain_log_and_artifact_reports_are_progress_events_naming_their_kind(
) -> None:
    async with connect_memory(host(), agent_caps=["chains", "tools"]) as client:
        run = client.run_chain([{"node_id": "r", "kind": "tool", "name": "reporting"}], "r")
        events = [m async for m in run]
    response = events.pop()
    assert response.success and response.final_output == {"sent": [True, True, True]}
    assert [(e.seq, e.node_id, e.phase, e.kind, e.data) for e in events] == [
        (1, "r", "start", "status", {}),
        *[(i + 2, "r", "start", "progress", {"report": kind, **data})
          for i, (kind, data) in enumerate(REPORTS)],
        (5, "r", "done", "status", {}),
    ]
