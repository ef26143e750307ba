"""Hostile agents against the ``tools``, ``skill`` and ``proc`` capabilities of a real
``a2e-host serve`` on 127.0.0.1 (issue 15, PROTOCOL.md §9–§11): no request may grow the
host's memory past its ceilings, and every error names what was wrong in a sentence of
bounded size."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.support.process import CLI, current_rss, peak_rss, reset_peak_rss
from tests.support.procs import PROC_FLAGS
from tests.support.sdk import assert_sdk_accepts
from tests.support.skills import write_versioned_skills
from tests.support.ws import receive, serving_argv

pytestmark = pytest.mark.timeout(120)

MIB = 1024 * 1024


@asynccontextmanager
async def session(url: str, caps: list[str]) -> AsyncIterator[ClientConnection]:
    """A handshaken WebSocket session asking ``caps``."""
    async with connect(url, subprotocols=["a2e.v1"], max_size=None) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps({"type": "handshake/req", "id": "h", "agent_caps": caps}))
        resp = await receive(ws)
        assert resp["ok"], resp
        yield ws


async def replies_until(ws: ClientConnection, *wanted: str) -> dict[str, dict[str, Any]]:
    """Every reply (not a read event) by ``req_id`` until each of ``wanted`` came."""
    replies: dict[str, dict[str, Any]] = {}
    while not set(wanted) <= replies.keys():
        message = await receive(ws)
        if message["type"] != "proc/read/event":
            replies[message["req_id"]] = message
    return replies


@pytest.mark.asyncio
async def test_writes_waiting_for_stdin_hold_at_most_one_message_of_bytes_per_session() -> None:
    # eight processes that never read stdin, four 3 MiB writes each: 96 MiB of data the
    # host would hold (twice: the text and its bytes) if only the count per process counted
    limit = 4 * MIB
    async with serving_argv(CLI, "--port", "0", *PROC_FLAGS,
                            A2E_MAX_MESSAGE_BYTES=str(limit)) as (url, host):
        pid = host.process.pid
        async with session(url, ["proc"]) as ws:
            for n in range(8):
                await ws.send(json.dumps({"type": "proc/spawn/req", "id": f"s{n}",
                                          "cmd": ["sh", "-c", "exec sleep 60"]}))
            spawned = await replies_until(ws, *(f"s{n}" for n in range(8)))
            proc_ids = sorted(r["proc_id"] for r in spawned.values() if r.get("ok"))
            assert len(proc_ids) == 8, spawned
            reset_peak_rss(pid)
            before = current_rss(pid)
            data = "x" * (3 * MIB)
            writes = [f"w-{p}-{n}" for p in proc_ids for n in range(4)]
            for write_id in writes:
                await ws.send(json.dumps({"type": "proc/write/req", "id": write_id,
                                          "proc_id": write_id.split("-")[1], "data": data}))
            await ws.send(json.dumps({"type": "ping", "id": "after-writes"}))
            refused = await replies_until(ws, "after-writes")
            grown = peak_rss(pid) - before
            # the first write waits; the second would take the session past one message
            busy = {k: v for k, v in refused.items() if k != "after-writes"}
            assert sorted(busy) == sorted(writes[1:]), sorted(busy)
            first = busy[writes[1]]
            assert_sdk_accepts(first)
            assert (first["code"], first["retryable"]) == ("busy", True)
            assert first["message"] == (
                f"{3 * MIB} bytes of this session's writes are waiting for stdin already and "
                f"{3 * MIB} more would pass {limit} (max_message_bytes); wait for a "
                "proc/write/resp before sending more")
            assert grown < 40 * MIB, f"the host grew {grown / MIB:.0f} MiB holding writes"
            for n, proc_id in enumerate(proc_ids):
                await ws.send(json.dumps({"type": "proc/kill/req", "id": f"k{n}",
                                          "proc_id": proc_id}))
            ended = await replies_until(ws, writes[0], *(f"k{n}" for n in range(8)))
            assert ended[writes[0]]["type"] == "proc/write/resp"
            assert ended[writes[0]]["ok"] is False


async def ask(ws: ClientConnection, message: dict[str, Any]) -> dict[str, Any]:
    """Send ``message``; its reply (``chain/event`` and ``skill/event`` frames skipped)."""
    await ws.send(json.dumps(message))
    while True:
        reply = await receive(ws)
        if reply["type"] not in ("chain/event", "skill/event"):
            assert reply["req_id"] == message["id"], reply
            return reply


@pytest.mark.asyncio
async def test_a_skill_version_of_thousands_of_digits_is_an_unknown_version_not_a_host_failure(
        tmp_path: Path) -> None:
    # PEP 440 parsing raises ValueError past int()'s 4300 digits, not InvalidVersion
    skills = write_versioned_skills(tmp_path / "skills")
    ref = "shout@" + "9" * 5000
    async with serving_argv(CLI, "--port", "0", "--tools", "conformance",
                            "--skills", str(skills)) as (url, _):
        async with session(url, ["chains", "skill"]) as ws:
            called = await ask(ws, {"type": "skill/call/req", "id": "c", "name": ref,
                                    "arguments": {"parts": ["a"]}})
            chained = await ask(ws, {"type": "chain/req", "id": "r", "session_id": "",
                                     "entry_node": "s",
                                     "nodes": [{"node_id": "s", "kind": "skill", "name": ref,
                                                "input": {"parts": ["a"]}}]})
            served = await ask(ws, {"type": "skill/call/req", "id": "ok", "name": "shout",
                                    "arguments": {"parts": ["a"]}})
    assert_sdk_accepts(called)
    shown = "'" + "9" * 60 + "'… (5,000 characters)"
    assert called["data"] is None
    assert called["error"] == {
        "code": "unknown_skill",
        "message": f"skill 'shout' has no version {shown} (versions: 1 deprecated, 2 active, "
                   "10 draft); name one of its versions, or 'shout' alone for the newest "
                   "active one",
        "retryable": False,
        "details": {"hint": "name one of its versions, or 'shout' alone for the newest "
                            "active one"},
    }
    assert chained["type"] == "chain/resp" and chained["success"] is False, chained
    assert chained["error"]["code"] == "chain_invalid", chained["error"]
    assert f"has no version {shown}" in chained["error"]["message"]
    assert len(json.dumps(chained)) < 4096, "the refusal repeats the whole reference"
    assert (served["type"], served["data"]["success"]) == ("skill/call/resp", True), served


@pytest.mark.asyncio
@pytest.mark.parametrize("ref", ["a@b@c", "@", "@2", "shout@2@x"])
async def test_a_skill_reference_with_no_name_or_two_ats_is_refused_as_such(
        tmp_path: Path, ref: str) -> None:
    skills = write_versioned_skills(tmp_path / "skills")
    async with serving_argv(CLI, "--port", "0", "--tools", "conformance",
                            "--skills", str(skills)) as (url, _):
        async with session(url, ["skill"]) as ws:
            called = await ask(ws, {"type": "skill/call/req", "id": "c", "name": ref,
                                    "arguments": {}})
    assert_sdk_accepts(called)
    assert called["error"]["code"] == "unknown_skill"
    assert called["error"]["message"] == (
        f"skill reference {ref!r} is not 'name' or 'name@version'; name a skill, with at "
        "most one '@' before its version (skill/discover/req lists them)")


@pytest.mark.asyncio
@pytest.mark.parametrize("seconds", [0, -1])
async def test_a_skill_call_timeout_under_one_second_is_named_as_the_timeout_not_the_arguments(
        tmp_path: Path, seconds: int) -> None:
    skills = write_versioned_skills(tmp_path / "skills")
    async with serving_argv(CLI, "--port", "0", "--tools", "conformance",
                            "--skills", str(skills)) as (url, _):
        async with session(url, ["skill"]) as ws:
            called = await ask(ws, {"type": "skill/call/req", "id": "c", "name": "shout",
                                    "arguments": {"parts": ["a"]}, "timeout": seconds})
    assert_sdk_accepts(called)
    error = called["error"]
    assert (error["code"], error["details"]["path"]) == ("schema_violation", "$.timeout")
    assert error["message"] == (
        f"skill/call/req timeout must be positive seconds, got {seconds}; send a positive "
        "int, or leave it out for min(60, max_timeout)")


@pytest.mark.asyncio
async def test_proc_refusals_repeat_a_bounded_part_of_a_megabyte_field() -> None:
    # a refusal that echoes the field whole answers a 10 MiB request with 20 MiB, past
    # the max_message_bytes the agent was told: its client drops the connection instead
    huge = "q" * MIB
    shown = "'" + "q" * 256 + "'… (1,048,576 characters)"
    asked: list[tuple[dict[str, Any], str]] = [
        ({"type": "proc/spawn/req", "cmd": [huge]}, f"executable {shown} is not allowed"),
        ({"type": "proc/spawn/req", "cmd": ["cat"], "cwd": huge},
         f"cwd {shown} is not a directory under the root"),
        ({"type": "proc/spawn/req", "cmd": ["cat"], "env": {huge: "1"}},
         f"env key {shown} is not allowed"),
        ({"type": "proc/spawn/req", "cmd": ["cat"],
          "env": {f"LD_{n:05}": "1" for n in range(20_000)}},
         "env may not set LD_00000, LD_00001, LD_00002 and 19997 more: dynamic-loader"),
        ({"type": "proc/kill/req", "proc_id": huge}, f"this session has no process {shown}"),
        ({"type": "proc/status/req", "proc_id": huge},
         f"this session has no process {shown}"),
        ({"type": "proc/kill/req", "proc_id": "p1", "signal": huge},
         f"proc/kill/req: signal {shown} is not one of"),
    ]
    async with serving_argv(CLI, "--port", "0", *PROC_FLAGS) as (url, _):
        async with session(url, ["proc"]) as ws:
            for n, (request, said) in enumerate(asked):
                reply = await ask(ws, {"id": f"r{n}", **request})
                assert_sdk_accepts(reply)
                text = reply.get("error") or reply.get("message")
                assert text.startswith(said) or text.startswith(f"proc: {said}"), text
                assert len(json.dumps(reply)) < 2048, (n, len(json.dumps(reply)))


@pytest.mark.asyncio
@pytest.mark.parametrize("field", ["filter_tags", "filter_categories"])
async def test_skill_discovery_takes_a_bounded_filter_and_answers_the_next_one(
        tmp_path: Path, field: str) -> None:
    # the filters were matched on the connection's reader, anew for every version: 1.4
    # million tags held the event loop (every session's pings) for seconds
    skills = write_versioned_skills(tmp_path / "skills")
    async with serving_argv(CLI, "--port", "0", "--skills", str(skills),
                            "--tools", "conformance") as (url, _):
        async with session(url, ["skill"]) as ws:
            refused = await ask(ws, {"type": "skill/discover/req", "id": "d",
                                     field: [f"t{n}" for n in range(101)]})
            kept = await ask(ws, {"type": "skill/discover/req", "id": "k",
                                  field: [f"t{n}" for n in range(98)] + ["text", "none"]})
    assert_sdk_accepts(refused)
    assert (refused["type"], refused["code"], refused["detail"]) == (
        "error", "schema_violation", {"path": f"$.{field}"})
    assert refused["message"] == (
        f"skill/discover/req {field} lists 101 entries, over 100; filter by fewer")
    assert kept["type"] == "skill/discover/resp"
