"""One host, one chain engine's parts (PROTOCOL.md §5 Recovery, §9; DECISIONS.md
``max_procs``): the chains, skill and tools plugins of a host share one tool registry,
one proc policy (so ``max_procs`` counts proc nodes of chains and of skill calls
together) and one step cache. In-process host built from the installed plugins."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from a2e_chains import ChainPlugin
from a2e_skills import SkillPlugin
from a2e_tools import ToolsPlugin

from a2e_host.client import connect_memory
from a2e_host.config import HostConfig
from a2e_host.runtime.host import Host

#: A proc node that runs until the file ``go`` appears in its cwd (the root).
WAIT_FOR_GO = "while [ ! -e go ]; do sleep 0.05; done; echo chain"
SAY = {"name": "say", "description": "Say it from a process.", "entry_node": "p",
       "nodes": [{"node_id": "p", "kind": "proc",
                  "input": {"argv": ["sh", "-c", "echo skill"]}}]}


async def until(check: Callable[[], bool]) -> None:
    """Wait (polling the host's state, bounded) until ``check()`` holds."""
    for _ in range(3000):
        if check():
            return
        await anyio.sleep(0.01)
    raise AssertionError("the host never reached the state waited for")


def host_of(tmp_path: Path) -> Host:
    skills = tmp_path / "skills"
    skills.mkdir()
    (skills / "say.json").write_text(json.dumps(SAY), encoding="utf-8")
    config = HostConfig(tools=("conformance",), skills_dirs=(str(skills),),
                        allow_proc=("sh",), root=str(tmp_path), max_procs=1)
    return Host(config)


def test_the_chains_skill_and_tools_plugins_share_one_engine(tmp_path: Path) -> None:
    host = host_of(tmp_path)
    chains, = (p for p in host.plugins if isinstance(p, ChainPlugin))
    skill, = (p for p in host.plugins if isinstance(p, SkillPlugin))
    tools, = (p for p in host.plugins if isinstance(p, ToolsPlugin))
    assert skill.toolbox is chains.toolbox
    assert skill.toolbox.proc is chains.toolbox.proc
    assert skill.engine.step_cache is chains.step_cache
    assert tools.toolbox.tools is chains.toolbox.tools


@pytest.mark.asyncio
async def test_max_procs_counts_a_chain_proc_node_and_a_skill_call_proc_node_together(
        tmp_path: Path) -> None:
    host = host_of(tmp_path)
    chains, = (p for p in host.plugins if isinstance(p, ChainPlugin))
    policy = chains.toolbox.proc
    assert policy.max_procs == 1
    with anyio.fail_after(60):
        async with host.running(), \
                connect_memory(host, agent_caps=["chains", "skill", "proc"]) as client:
            chain = await client.run_chain(
                [{"node_id": "w", "kind": "proc",
                  "input": {"argv": ["sh", "-c", WAIT_FOR_GO]}}], "w", timeout=60).start()
            await until(lambda: policy.procs_running == 1)  # the chain's node holds it
            call = await client.call_skill("say", timeout=60).start()
            await until(lambda: policy.slots.statistics().tasks_waiting == 1)  # the call's
            assert policy.procs_running == 1
            (tmp_path / "go").touch()
            said = await call.result()
            done = await chain.result()
    assert done.success, done.error
    assert done.final_output["stdout"] == "chain\n"
    assert said.success, said.error
    assert said.data["stdout"] == "skill\n"
