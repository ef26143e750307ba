"""Per-principal tool grants (PROTOCOL.md §11 Tool grants): a real WebSocket host with two
named tokens, ``alice`` granted ``e*`` and ``upper``, ``bob`` without a grant; and the
configuration that declares them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from a2e_host.config import load_config
from tests.support.sdk import assert_sdk_accepts
from tests.support.skills import write_versioned_skills
from tests.support.tools import TOOL_CAPS, call_events, call_req, list_req
from tests.support.ws import SERVE, call, receive, reply, serving, shared_serving

ALL_TOOLS = ["add", "big", "concat", "count", "echo", "fail", "flaky", "progress", "sleep",
             "upper"]
ENV = {"A2E_AUTH_TOKENS": "alice:tok-a,bob:tok-b", "A2E_TOOL_GRANTS": "alice:e*|upper"}
ALICE_DENIED = ("tool 'add' is not granted to principal 'alice' (its tool grants: e*, upper)")
ALICE_HINT = ("use a granted tool (tool/list/req lists them), or have an operator add a "
              "pattern matching 'add' to 'alice' in [auth.tool_grants] (A2E_TOOL_GRANTS) and "
              "restart the host")


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    """One host for the module's cases on the conformance tools with :data:`ENV`'s tokens
    and grants; each case makes sessions of its own."""
    with shared_serving(SERVE, **ENV) as served:
        yield served


@asynccontextmanager
async def session(url: str, token: str) -> AsyncIterator[tuple[ClientConnection, dict]]:
    async with connect(url) as ws:
        resp = await call(ws, {"type": "handshake/req", "id": "h", "auth_token": token,
                               "agent_caps": list(TOOL_CAPS)})
        assert resp["type"] == "handshake/resp" and resp["ok"], resp
        meta = next(c["metadata"] for c in resp["accepted_caps"] if c["capability"] == "tools")
        yield ws, meta


def add_chain(req_id: str, *extra: dict[str, Any]) -> dict[str, Any]:
    return {"type": "chain/req", "id": req_id, "entry_node": extra[0]["node_id"] if extra
            else "a", "nodes": list(extra) or [
                {"node_id": "a", "kind": "tool", "name": "add", "input": {"a": 1, "b": 2}}]}


def denied_problem(node_id: str, field: str = "name") -> dict[str, Any]:
    return {"code": "tool_denied", "node_id": node_id, "field": field,
            "message": ALICE_DENIED, "hint": ALICE_HINT, "tool": "add"}


@pytest.mark.asyncio
async def test_a_granted_principal_is_shown_and_listed_only_its_tools_others_every_tool(
    url: str,
) -> None:
    async with session(url, "tok-a") as (ws, meta):
        assert (meta["tool_count"], meta["tools"], meta["toolkits"]) == (
            2, ["echo", "upper"], ["conformance"])
        listing = await call(ws, list_req("l1"))
        assert_sdk_accepts(listing)
        assert [t["name"] for t in listing["tools"]] == ["echo", "upper"]
        searched = await call(ws, list_req("l2", query="add"))
        assert searched["tools"] == []
    async with session(url, "tok-b") as (ws, meta):
        assert (meta["tool_count"], meta["tools"]) == (10, ALL_TOOLS)
        listing = await call(ws, list_req("l1"))
        assert [t["name"] for t in listing["tools"]] == ALL_TOOLS
        searched = await call(ws, list_req("l2", query="add"))
        assert [t["name"] for t in searched["tools"]] == ["add"]


@pytest.mark.asyncio
async def test_calling_a_tool_outside_the_grant_is_tool_denied_naming_the_grant(url: str) -> None:
    async with session(url, "tok-a") as (ws, _):
        denied = await call(ws, call_req("c1", "add", {"a": 1, "b": 2}))
        assert_sdk_accepts(denied)
        assert (denied["type"], denied["req_id"], denied["code"]) == (
            "error", "c1", "tool_denied")
        assert denied["message"] == f"tool/call/req: {ALICE_DENIED}; {ALICE_HINT}"
        assert denied["detail"] == {"tool": "add"}
        unknown = await call(ws, call_req("c2", "nope", {}))
        assert (unknown["code"], unknown["detail"]["tool"]) == ("unknown_tool", "nope")
        await ws.send(json.dumps(call_req("c3", "upper", {"text": "hi"})))
        events, resp = await call_events(lambda: receive(ws), "c3")
        assert (events, resp["data"]["success"], resp["data"]["data"]) == (
            [], True, {"text": "HI"})
    async with session(url, "tok-b") as (ws, _):
        await ws.send(json.dumps(call_req("c1", "add", {"a": 1, "b": 2})))
        _, resp = await call_events(lambda: receive(ws), "c1")
        assert (resp["data"]["success"], resp["data"]["data"]) == (True, {"sum": 3})


@pytest.mark.asyncio
async def test_a_chain_naming_an_ungranted_tool_is_refused_at_validation_node_by_node(
    url: str,
) -> None:
    nodes = [
        {"node_id": "a", "kind": "tool", "name": "add", "input": {"a": 1, "b": 2},
         "next": "m"},
        {"node_id": "m", "kind": "map", "items_path": "[`1`, `2`]", "map_node": "t",
         "next": "f"},
        {"node_id": "t", "kind": "tool", "name": "add", "input_map": {"a": "item", "b": "item"}},
        {"node_id": "f", "kind": "tool", "name": "echo", "input": {"a": 1, "b": 2},
         "fallback": "add"},
    ]
    async with session(url, "tok-a") as (ws, _):
        await ws.send(json.dumps(add_chain("r1", *nodes)))
        resp = await reply(ws)
        assert (resp["type"], resp["req_id"], resp["success"]) == ("chain/resp", "r1", False)
        error = resp["error"]
        assert (error["code"], error["node_id"]) == ("chain_invalid", "a")
        assert error["details"]["errors"] == [
            denied_problem("a"), denied_problem("t"), denied_problem("f", "fallback")]
    async with session(url, "tok-b") as (ws, _):
        await ws.send(json.dumps(add_chain("r1", *nodes)))
        resp = await reply(ws)
        assert (resp["req_id"], resp["success"], resp["error"]) == ("r1", True, None)


def test_tool_grants_load_from_the_auth_table_and_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "host.toml"
    path.write_text('[auth.tokens]\nalice = "tok-a"\nbob = "tok-b"\n'
                    '[auth.tool_grants]\nalice = ["fs.*", "text.upper"]\nbob = []\n',
                    encoding="utf-8")
    config = load_config(path, environ={})
    assert config.tool_grants == {"alice": ("fs.*", "text.upper"), "bob": ()}
    grant = config.tool_grant("alice")
    assert grant is not None
    assert [grant.allows(n) for n in ("fs.read", "text.upper", "text.lower")] == [
        True, True, False]
    assert config.tool_grant("carol") is None
    empty = config.tool_grant("bob")
    assert empty is not None and not empty.allows("fs.read")
    env = load_config(environ={"A2E_AUTH_TOKENS": "alice:t", "A2E_TOOL_GRANTS": "alice:a|b.*"})
    assert env.tool_grants == {"alice": ("a", "b.*")}


@pytest.mark.parametrize(("environ", "match"), [
    ({"A2E_AUTH_TOKENS": "alice:t", "A2E_TOOL_GRANTS": "alcie:fs.*"},
     "names principal 'alcie', which no token gives \\(principals: alice\\)"),
    ({"A2E_TOOL_GRANTS": "alice:fs.*"},
     "names principal 'alice', which no token gives \\(principals: anonymous\\)"),
    ({"A2E_AUTH_TOKENS": "alice:t", "A2E_TOOL_GRANTS": "alice"},
     "tool_grants from environment variable A2E_TOOL_GRANTS must be name:pattern"),
])
def test_a_grant_of_an_unknown_principal_or_a_malformed_one_is_refused(
    environ: dict[str, str], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        load_config(environ=environ)


@pytest.mark.asyncio
async def test_a_skill_cannot_widen_the_grant_its_sub_chain_is_held_to_it(tmp_path: Path) -> None:
    skills = write_versioned_skills(tmp_path / "skills")  # shout@2 runs concat, upper, echo
    node = {"node_id": "s", "kind": "skill", "name": "shout", "input": {"parts": ["a", "b"]}}
    request = {"type": "chain/req", "id": "r1", "entry_node": "s", "nodes": [node]}
    async with serving("--skills", str(skills), env=ENV) as (url, _):
        for token, expected in (("tok-a", None), ("tok-b", {"v": 2, "text": "AB"})):
            async with connect(url) as ws:
                resp = await call(ws, {"type": "handshake/req", "id": "h", "auth_token": token,
                                       "agent_caps": ["chains", "skill"]})
                assert resp["ok"], resp
                await ws.send(json.dumps(request))
                resp = await reply(ws)
                assert resp["final_output"] == expected
                if token == "tok-b":
                    assert (resp["success"], resp["error"]) == (True, None)
                    continue
                error = resp["error"]
                assert (resp["success"], error["code"], error["node_id"]) == (
                    False, "chain_node_error", "s")
                assert [(p["code"], p["node_id"], p["tool"]) for p in error["details"]["errors"]
                        ] == [("tool_denied", "join", "concat")]
