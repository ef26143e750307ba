"""A retried node's tool sees its own attempt's deadline (PROTOCOL.md §5, §11): the node's
``timeout`` applies per attempt, so the second attempt has the whole timeout again, not
what the first one left. In-process host."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from a2e_chains import ChainPlugin

from a2e_host import tools
from a2e_host.chains.toolbox import Toolbox
from a2e_host.client import connect_memory
from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError
from a2e_host.runtime.host import Host
from a2e_host.tools import Tool


class Lagging:
    """Fails its first attempt after ``lag`` seconds; records what each attempt had left."""

    def __init__(self, lag: float) -> None:
        self.lag = lag
        self.left: list[float] = []

    async def run(self, args: dict[str, Any]) -> dict[str, int]:
        ctx = tools.context()
        assert ctx is not None and ctx.deadline is not None
        self.left.append(ctx.deadline - time.monotonic())
        if len(self.left) == 1:
            await anyio.sleep(self.lag)
            raise NodeError("fails on purpose", retryable=True)
        return {"attempts": len(self.left)}


@pytest.mark.asyncio
async def test_a_retried_attempt_sees_the_whole_node_timeout_again() -> None:
    lagging = Lagging(1.5)
    config = HostConfig(tools=["conformance"])
    registry = tools.load_tools(config)
    registry.register(Tool("lagging", lagging.run, blocking=False))
    host = Host(config, plugins=[ChainPlugin(config, toolbox=Toolbox(registry))])
    with anyio.fail_after(30):
        async with connect_memory(host, agent_caps=["chains"]) as client:
            response = await client.run_chain(
                [{"node_id": "l", "kind": "tool", "name": "lagging", "timeout": 2,
                  "retry": {"max_attempts": 2, "interval": 0}}], "l", timeout=60).result()
    assert response.success, response.error
    assert response.final_output == {"attempts": 2}
    first, second = lagging.left
    assert 1.5 < first <= 2
    # before: the first attempt's deadline, 0.5 s (or less on a loaded machine) left
    assert 1.5 < second <= 2
