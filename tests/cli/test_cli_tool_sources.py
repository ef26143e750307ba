"""What ``a2e-host validate`` and ``a2e-host tools`` say about tools they cannot show:
those of configured MCP servers (not started by these commands) and those ``remote_tools``
marks to run on Ray; and the warning for a ``remote_tools`` pattern that matches no tool."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.process import CLI, host_env
from tests.support.ws import serving_argv

MCP_CONFIG = """\
tools = ["conformance"]
[mcp.servers.time]
command = ["mcp-server-time", "--local-timezone", "UTC"]
"""
NOT_STARTED_HINT = (
    "'time.convert_time' would come from MCP server 'time' ([mcp.servers.time]), and "
    "validate does not start MCP servers; check the chain with the validate_chain tool of "
    "'a2e-host mcp --config FILE', or against a running host (tool/list/req lists its tools)")


def _cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env=host_env(**env))


def test_validate_says_an_mcp_servers_tool_is_unknown_because_it_starts_no_server(
    tmp_path: Path,
) -> None:
    (tmp_path / "host.toml").write_text(MCP_CONFIG)
    (tmp_path / "chain.json").write_text(json.dumps({"entry_node": "a", "nodes": [
        {"node_id": "a", "kind": "tool", "name": "time.convert_time", "input": {}},
        {"node_id": "b", "kind": "tool", "name": "nosuch.tool", "input": {}}]}))
    text = _cli(tmp_path, "validate", "chain.json", "--config", "host.toml")
    assert text.returncode == 1
    assert text.stdout.splitlines()[0] == (
        f"node 'a' field 'name': unknown tool 'time.convert_time' (fix: {NOT_STARTED_HINT})")
    assert "MCP" not in text.stdout.splitlines()[1]  # not a configured server's
    as_json = json.loads(_cli(tmp_path, "validate", "chain.json", "--config", "host.toml",
                              "--json").stdout)
    assert [p["hint"] for p in as_json["errors"]][0] == NOT_STARTED_HINT


def test_tools_lists_configured_mcp_servers_as_not_started(tmp_path: Path) -> None:
    (tmp_path / "host.toml").write_text(MCP_CONFIG)
    listed = _cli(tmp_path, "tools", "--config", "host.toml")
    assert listed.returncode == 0, listed.stderr
    assert ("  time.*  MCP server [mcp.servers.time] (not started by this command; its tools "
            "are listed by a running host's tool/list/req)") in listed.stdout.splitlines()
    as_json = json.loads(_cli(tmp_path, "tools", "--config", "host.toml", "--json").stdout)
    assert as_json["mcp_servers"] == ["time"]


def test_tools_shows_which_tools_remote_tools_marks(tmp_path: Path) -> None:
    (tmp_path / "host.toml").write_text(
        'tools = ["conformance"]\nremote_tools = ["conformance.upper", "nosuch.*"]\n')
    listed = _cli(tmp_path, "tools", "--config", "host.toml", "--json")
    assert listed.returncode == 0, listed.stderr
    tools = json.loads(listed.stdout)["tools"]  # stdout is the JSON alone: warnings on stderr
    assert [t["name"] for t in tools if t["remote"]] == ["upper"]
    warned = [json.loads(line) for line in listed.stderr.splitlines()]
    assert [(w["level"], w["pattern"]) for w in warned] == [("warning", "nosuch.*")]
    text = _cli(tmp_path, "tools", "--config", "host.toml").stdout
    assert [line.split()[0] for line in text.splitlines() if "(remote: a Ray task)" in line
            ] == ["upper"]


@pytest.mark.asyncio
async def test_serve_warns_once_per_remote_tools_pattern_matching_no_enabled_tool() -> None:
    flags = ["--port", "0", "--tools", "conformance"]
    async with serving_argv(CLI, *flags, A2E_REMOTE_TOOLS="nosuch.*,uper") as (_, host):
        lines = [json.loads(line) for line in host.stderr.decode().splitlines()
                 if line.startswith("{")]
    warned = [line["pattern"] for line in lines if "remote_tools pattern" in line["event"]]
    assert warned == ["nosuch.*", "uper"]
