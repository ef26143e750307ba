"""A session asking a capability the host does not serve is told, in the
``capability_missing`` answer, how an operator makes the host serve it: each plugin's
``Plugin.how_to_serve`` (PROTOCOL.md §2). The real CLI over stdio."""

from __future__ import annotations

import json
import subprocess

import pytest

from a2e_host.plugin import Plugin
from tests.support.process import CLI
from tests.support.sdk import assert_sdk_accepts

pytestmark = pytest.mark.timeout(60)


def test_capability_missing_names_the_flag_that_serves_tools_or_proc() -> None:
    lines = [
        {"type": "handshake/req", "id": "h1", "agent_caps": ["chains", "tools", "proc"]},
        {"type": "tool/list/req", "id": "t1"},
        {"type": "proc/status/req", "id": "p1"},
    ]
    done = subprocess.run([*CLI, "stdio"], input="".join(json.dumps(x) + "\n" for x in lines),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    errors = {m["req_id"]: m for m in map(json.loads, done.stdout.splitlines())
              if m["type"] == "error"}
    granted = "which this session was not granted; this host does not serve it; to serve it,"
    assert errors["t1"]["message"] == (
        f"'tool/list/req' needs capability 'tools', {granted} start the host with "
        "--tools PACK (e.g. --tools fs,text,json; 'a2e-host tools --all' lists the "
        "installed packs), or tools in its config (A2E_TOOLS)")
    assert errors["p1"]["message"] == (
        f"'proc/status/req' needs capability 'proc', {granted} start the host with "
        "--allow-proc NAME for each executable it may run, or allow_proc in its config")
    for error in errors.values():
        assert error["code"] == "capability_missing"
        assert_sdk_accepts(error)


def test_a_plugin_states_how_to_serve_it_through_the_public_plugin_api() -> None:
    assert Plugin.how_to_serve == ""
    from a2e_chains.runs import RunsPlugin
    from a2e_proc import ProcPlugin
    from a2e_skills import SkillPlugin
    from a2e_tools import ToolsPlugin

    hints = {p.capability: p.how_to_serve for p in (ToolsPlugin, ProcPlugin, SkillPlugin,
                                                    RunsPlugin)}
    assert hints == {
        "tools": "start the host with --tools PACK (e.g. --tools fs,text,json; "
                 "'a2e-host tools --all' lists the installed packs), or tools in its "
                 "config (A2E_TOOLS)",
        "proc": "start the host with --allow-proc NAME for each executable it may run, "
                "or allow_proc in its config",
        "skill": "start the host with --skills DIR (declarative skills), or install a "
                 "skill package",
        "runs": "start the host with --store PATH (a run store), or A2E_STORE",
    }
