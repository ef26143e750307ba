"""A ``skill/call/req`` runs with a skill node's guarantees (issue 15): it counts against
``max_parallel`` (apart from chains), ends when its connection drops, is bounded by its
``timeout`` within ``max_timeout``, and sends at most ``MAX_EVENTS`` events (the rest
counted in ``events_dropped``). In-process host, the whole host path."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from a2e_chains import ChainPlugin
from a2e_skills import MAX_EVENTS, SkillPlugin

from a2e_host.chains.skill_messages import SkillCallResponse, SkillEvent
from a2e_host.chains.skills import load_skills
from a2e_host.chains.toolbox import Toolbox
from a2e_host.client import HostError, connect_memory
from a2e_host.config import HostConfig
from a2e_host.runtime.host import Host
from a2e_host.tools import load_tools, tool
from tests.support.sdk import assert_sdk_accepts

FAN = {"name": "fan", "description": "Echo every item.", "entry_node": "m",
       "nodes": [{"node_id": "m", "kind": "map", "items_path": "input.items", "map_node": "e"},
                 {"node_id": "e", "kind": "tool", "name": "echo",
                  "input_map": {"item": "item"}}]}


class Holder:
    """A Python skill that runs until cancelled, and says when it started and ended."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.cancelled = anyio.Event()

        @tool(name="hold", blocking=False)
        async def hold() -> dict[str, int]:
            """Wait until cancelled."""
            self.started.set()
            try:
                await anyio.sleep_forever()
            finally:
                self.cancelled.set()
            return {}  # pragma: no cover - never reached

        self.tool = hold


@asynccontextmanager
async def host_with(tmp_path: Path, holder: Holder, **limits: int) -> AsyncIterator[Any]:
    skills = tmp_path / "skills"
    skills.mkdir()
    (skills / "fan.json").write_text(json.dumps(FAN), encoding="utf-8")
    config = HostConfig(tools=("conformance",), skills_dirs=(str(skills),))
    box = Toolbox(load_tools(config))
    box.skills = load_skills(config, box, python_skills=[holder.tool])
    box.executors["skill"] = box.skills.run_skill
    host = Host(config, plugins=[ChainPlugin(config, box), SkillPlugin(config, box)])
    async with host.running(), connect_memory(host, agent_caps=["chains", "skill"],
                                              limits=limits or None) as client:
        yield client


@pytest.mark.asyncio
async def test_a_dropped_connection_cancels_its_skill_call(tmp_path: Path) -> None:
    holder = Holder()
    with anyio.fail_after(20):
        async with host_with(tmp_path, holder) as client:
            call = await client.call_skill("hold").start()
            await holder.started.wait()
            assert not holder.cancelled.is_set()
        await call.aclose()
        await holder.cancelled.wait()  # the connection closed: the call was cancelled


@pytest.mark.asyncio
async def test_skill_calls_beyond_max_parallel_are_busy_apart_from_chains(
        tmp_path: Path) -> None:
    holder = Holder()
    nodes = [{"node_id": "a", "kind": "tool", "name": "add", "input": {"a": 1, "b": 2}}]
    with anyio.fail_after(20):
        async with host_with(tmp_path, holder, max_parallel=1) as client:
            held = await client.call_skill("hold").start()
            await holder.started.wait()
            with pytest.raises(HostError) as refused:
                await client.call_skill("fan", {"items": [1]}).result()
            chain = await client.run_chain(nodes, "a").result()  # chains count apart
            await held.aclose()
    assert refused.value.code == "busy"
    assert "max_parallel limit is 1" in str(refused.value)
    assert chain.final_output == {"sum": 3}


@pytest.mark.asyncio
async def test_a_skill_call_is_bounded_by_its_timeout_within_max_timeout(
        tmp_path: Path) -> None:
    holder = Holder()
    with anyio.fail_after(20):
        async with host_with(tmp_path, holder, max_timeout=30) as client:
            timed_out_call = client.call_skill("hold", timeout=1)
            timed_out_result = await timed_out_call.result()
            too_long_call = client.call_skill("hold", timeout=31)
            too_long_result = await too_long_call.result()
    timed_out, too_long = timed_out_call.response, too_long_call.response
    assert timed_out is not None and too_long is not None
    assert timed_out.error is None and timed_out.data is timed_out_result
    assert (timed_out_result.success, timed_out_result.error_code) == (False, "timeout")
    assert holder.cancelled.is_set()
    assert too_long.data is None and too_long.error is not None
    assert too_long.error["code"] == "chain_limit"
    assert (too_long_result.success, too_long_result.error_code, too_long_result.error) == (
        False, "chain_limit", too_long.error["message"])
    assert {k: too_long.error["details"][k] for k in ("ceiling", "scope", "limit",
                                                      "requested")} == {
        "ceiling": "max_timeout", "scope": "session", "limit": 30, "requested": 31}
    for response in (timed_out, too_long):
        assert_sdk_accepts(msgspec.to_builtins(response))


@pytest.mark.asyncio
async def test_a_skill_call_sends_at_most_max_events_and_counts_the_rest(
        tmp_path: Path) -> None:
    holder = Holder()
    items = list(range(600))
    with anyio.fail_after(60):
        async with host_with(tmp_path, holder) as client:
            messages = [m async for m in client.call_skill("fan", {"items": items})]
    events, response = messages[:-1], messages[-1]
    assert isinstance(response, SkillCallResponse) and response.data is not None
    assert response.data.data == [{"item": i} for i in items]
    # skill start, map start, 600 items × (start, done), map done: 1,203 events
    assert len(events) == MAX_EVENTS == 1000
    assert all(isinstance(e, SkillEvent) for e in events)
    assert [e.seq for e in events] == list(range(1, 1001))
    assert response.events_dropped == 203
