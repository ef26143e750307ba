"""One tool-name matcher for ``[auth.tool_grants]``, ``[secrets]`` ``tools`` and
``remote_tools``: a glob matches a tool's ``<name>`` or ``<pack>.<name>`` (README
"Configuration", PROTOCOL.md §5 Secrets, §11 Tool grants). A real WebSocket host for
grants; the real ``a2e-host run`` for a secret scoped by a pack glob."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from a2e_host.grants import ToolGrant
from a2e_host.secrets import Secret
from a2e_host.tool_patterns import tool_matches
from a2e_host.tools.model import tool
from a2e_host.tools.remote import marked_remote
from tests.support.process import CLI, host_env
from tests.support.secret_values import digest, probe_records
from tests.support.tools import TOOL_CAPS, call_events, call_req, list_req
from tests.support.ws import call, receive, reply, serving_argv

ENV = {"A2E_AUTH_TOKENS": "alice:tok-a",
       "A2E_TOOL_GRANTS": "alice:conformance.upper|json.*"}
ALICE_TOOLS = ["csv_parse", "json_dump", "json_parse", "json_value", "upper"]


def test_a_pattern_matches_a_tool_by_name_or_by_pack_dot_name() -> None:
    assert tool_matches(("fs.*",), "list_dir", "fs")
    assert tool_matches(("conformance.upper",), "upper", "conformance")
    assert tool_matches(("upper",), "upper", "conformance")
    assert not tool_matches(("fs.*",), "upper", "conformance")
    assert not tool_matches(("fs.*",), "list_dir", "")  # no pack: the name alone
    assert tool_matches(("time.*",), "time.convert_time", "")  # a dotted name itself
    # the three users of patterns agree
    assert ToolGrant("alice", ("fs.*",)).allows("list_dir", "fs")
    assert Secret("K", "x" * 16, tools=("llm.*",)).allows_tool("chat", "llm")

    @tool(name="list_dir")
    def list_dir(path: str) -> dict[str, str]:
        return {}

    [marked] = marked_remote([list_dir], "fs", ("fs.*",))
    assert marked.remote


@pytest.mark.asyncio
async def test_a_grant_by_pack_glob_lists_calls_and_validates_the_packs_tools() -> None:
    flags = ["--port", "0", "--tools", "conformance,json"]
    async with serving_argv(CLI, *flags, **ENV) as (url, _):
        async with connect(url) as ws:
            resp = await call(ws, {"type": "handshake/req", "id": "h", "auth_token": "tok-a",
                                   "agent_caps": list(TOOL_CAPS)})
            assert resp["ok"], resp
            listing = await call(ws, list_req("l1"))
            assert [t["name"] for t in listing["tools"]] == ALICE_TOOLS
            await ws.send(json.dumps(call_req("c1", "json_parse", {"text": "[1]"})))
            _, done = await call_events(lambda: receive(ws), "c1")
            assert (done["data"]["success"], done["data"]["data"]) == (True, {"value": [1]})
            denied = await call(ws, call_req("c2", "add", {"a": 1, "b": 2}))
            assert (denied["type"], denied["code"]) == ("error", "tool_denied")
            chain = {"type": "chain/req", "id": "r1", "entry_node": "u", "nodes": [
                {"node_id": "u", "kind": "tool", "name": "upper", "input": {"text": "hi"},
                 "next_node": "a"},
                {"node_id": "a", "kind": "tool", "name": "add", "input": {"a": 1, "b": 2}}]}
            await ws.send(json.dumps(chain))
            refused = await reply(ws)
            assert [(p["code"], p["node_id"]) for p in refused["error"]["details"]["errors"]
                    ] == [("tool_denied", "a")]
            chain["id"], chain["nodes"] = "r2", chain["nodes"][:1]
            del chain["nodes"][0]["next_node"]
            await ws.send(json.dumps(chain))
            ran = await reply(ws)
            assert (ran["success"], ran["final_output"]) == (True, {"text": "HI"})


def test_a_secret_scoped_by_pack_glob_reaches_that_packs_tools_only(tmp_path: Path) -> None:
    value = "pack-scoped-secret-value-1"
    (tmp_path / "host.toml").write_text(
        f"root = {json.dumps(str(tmp_path))}\ntools = [\"secretprobe\", \"conformance\"]\n"
        "[secrets]\nKEY = {env = \"PACK_KEY\", tools = [\"secretprobe.*\"]}\n")

    def run(name: str) -> subprocess.CompletedProcess[str]:
        chain = {"entry_node": "n", "nodes": [{"node_id": "n", "kind": "tool", "name": name,
                                               "input": {"a": {"$secret": "KEY"}, "b": "x"}}]}
        (tmp_path / "chain.json").write_text(json.dumps(chain))
        return subprocess.run(
            [*CLI, "run", str(tmp_path / "chain.json"), "--config", str(tmp_path / "host.toml"),
             "--json"], capture_output=True, text=True, timeout=60, cwd=tmp_path,
            env=host_env(PACK_KEY=value))

    allowed = run("secret_echo")
    response = json.loads(allowed.stdout)
    assert (allowed.returncode, response["success"]) == (0, True), allowed.stderr
    assert response["final_output"]["a"] == "«secret:KEY»"
    assert probe_records(tmp_path) == [{"tool": "secret_echo", "a": digest(value),
                                        "b": digest("x")}]
    denied = run("echo")  # the conformance pack's: not matched by secretprobe.*
    problems = json.loads(denied.stdout)["error"]["details"]["errors"]
    assert [(p["code"], p["node_id"]) for p in problems] == [("secret_denied", "n")]
