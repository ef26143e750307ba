"""An abandoned attempt of a retried node reports nothing once it ended (PROTOCOL.md §5
Tool reports): its worker thread, still running during the retry, cannot send events for
the node nor use up the node's report cap; the retry's reports go out. In-process host."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest
from a2e_chains import ChainPlugin

from a2e_host import tools
from a2e_host.chains.toolbox import Toolbox
from a2e_host.client import connect_memory
from a2e_host.config import HostConfig
from a2e_host.runtime.host import Host
from a2e_host.tools import Tool

FLOOD = 300


class Abandoned:
    """A blocking tool whose first attempt ignores its timeout and floods reports once
    the second attempt runs; the second reports twice after that flood and succeeds."""

    def __init__(self) -> None:
        self.calls = 0
        self.second_started = threading.Event()
        self.flooded = threading.Event()
        self.delivered: list[bool] = []

    def run(self, args: dict[str, Any]) -> dict[str, int]:
        ctx = tools.context()
        assert ctx is not None
        self.calls += 1
        if self.calls == 1:
            assert self.second_started.wait(30)
            self.delivered = [ctx.report("log", {"level": "info", "message": "old"})
                              for _ in range(FLOOD)]
            self.flooded.set()
            return {"attempt": 1}
        self.second_started.set()
        assert self.flooded.wait(30)
        for n in (1, 2):
            ctx.report("progress", {"pct": 50 * n, "message": f"new {n}"})
        return {"attempt": 2}


@pytest.mark.asyncio
async def test_an_abandoned_attempt_cannot_report_during_the_retry() -> None:
    tool = Abandoned()
    config = HostConfig(tools=["conformance"])
    registry = tools.load_tools(config)
    registry.register(Tool("abandoned", tool.run))
    host = Host(config, plugins=[ChainPlugin(config, toolbox=Toolbox(registry))])
    with anyio.fail_after(60):
        async with connect_memory(host, agent_caps=["chains"]) as client:
            run = client.run_chain(
                [{"node_id": "a", "kind": "tool", "name": "abandoned", "timeout": 1,
                  "retry": {"max_attempts": 2, "interval": 0,
                            "retry_on": ["timeout"]}}], "a", timeout=60)
            messages = [m async for m in run]
    response = messages.pop()
    assert response.success, response.error
    assert response.final_output == {"attempt": 2}
    reports = [e.data for e in messages if e.kind == "progress" and "report" in e.data]
    assert reports == [{"report": "progress", "pct": 50, "message": "new 1"},
                       {"report": "progress", "pct": 100, "message": "new 2"}]
    assert tool.delivered == [False] * FLOOD
