"""Hostile expressions against the real ``a2e-host stdio`` subprocess (issue 12, items 1, 2
and 5; issue 13, item 2): each gets a precise ``chain/resp``, the host's memory stays small,
the protocol keeps being answered while an expression runs, and the host stays up."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from tests.support.process import WAIT, open_host
from tests.support.requests import chain, error_of, tool
from tests.support.stdio import STDIO, Client

DOUBLINGS = "|".join(["[@,@]"] * 40)
FLATTENED = "length(" + "|".join(["[@,@]"] * 28) + "|" + "|".join(["[]"] * 27) + ")"
LONG_FILTER = "length(input.items[?to_string(@)=='x'])"
MIB = 1024 * 1024


@asynccontextmanager
async def host(env: dict[str, str] | None = None) -> AsyncIterator[Client]:
    """The real CLI with ``env`` (e.g. ``A2E_MAX_EXPRESSION_STEPS``), handshake done; at
    the end EOF, and the host must exit 0 without a traceback."""
    async with anyio.create_task_group() as tg:
        process = await open_host(STDIO, **(env or {}))
        tg.start_soon(process.collect_stderr)
        await process.send({"type": "handshake/req", "id": "h", "agent_caps": ["chains"]})
        resp = await process.receive()
        assert resp["type"] == "handshake/resp" and resp["ok"], resp
        try:
            yield Client(process, resp)
        finally:
            assert process.process.stdin is not None
            await process.process.stdin.aclose()
            await process.read_rest()
            code = await process.wait()
            tg.cancel_scope.cancel()
        assert code == 0, process.stderr[-2000:]
        assert b"Traceback" not in process.stderr, process.stderr[-4000:].decode(errors="replace")


def peak_rss(client: Client) -> int | None:
    """The host process's peak resident set (VmHWM) in bytes, where /proc tells it."""
    status = Path(f"/proc/{client.host.process.pid}/status")
    if not status.exists():
        return None
    for line in status.read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


@pytest.mark.asyncio
async def test_the_handshake_publishes_the_expression_ceilings() -> None:
    async with host() as client:
        [chains] = [c for c in client.handshake["accepted_caps"] if c["capability"] == "chains"]
        limits = chains["metadata"]["limits"]
        assert (limits["max_expression_steps"], limits["max_expression_bytes"]) == (
            1_000_000, 8 * MIB)


@pytest.mark.asyncio
async def test_expression_value_bombs_fail_their_node_and_keep_the_host_small() -> None:
    """Issue 12.1: on main the first grows the host to gigabytes until it dies; the second
    freezes it."""
    async with host() as client:
        for n, text in enumerate([DOUBLINGS, FLATTENED]):
            events, resp = await client.run(
                chain(f"bomb{n}", [tool("x", "echo", input_map={"v": text})]))
            error = error_of(resp)
            assert (error["code"], error["node_id"]) == ("chain_limit", "x"), error
            details = error["details"]
            assert {k: details[k] for k in ("ceiling", "scope", "limit")} == {
                "ceiling": "max_expression_bytes", "scope": "host", "limit": 8 * MIB}
            assert details["requested"] > 8 * MIB
            assert "node 'x' field 'input_map.v'" in error["message"]
            assert [(e["node_id"], e["phase"]) for e in events] == [("x", "start"), ("x", "error")]
            await client.assert_alive(f"after-bomb{n}")
        peak = peak_rss(client)
        if peak is not None:
            assert peak < 400 * MIB, f"the host peaked at {peak / MIB:.0f} MiB"


NESTED = {
    "parentheses": "(" * 600 + "input" + ")" * 600,
    "brackets": "[" * 600 + "input" + "]" * 600,
    "not": "!" * 600 + "input",
    "function calls": "abs(" * 600 + "input" + ")" * 600,
    "backtick literal": "`" + "[" * 3000 + "]" * 3000 + "`",
}


@pytest.mark.asyncio
async def test_deeply_nested_expressions_get_a_chain_invalid_response() -> None:
    """Issue 12.2: on main each is a bare ``error runtime_error`` and no ``chain/resp``."""
    async with host() as client:
        for form, text in NESTED.items():
            req_id = "deep-" + form.replace(" ", "-")
            events, resp = await client.run(
                chain(req_id, [tool("x", "echo", input_map={"v": text})]))
            assert resp["type"] == "chain/resp", resp
            error = error_of(resp)
            assert (error["code"], error["node_id"]) == ("chain_invalid", "x"), error
            [problem] = error["details"]["errors"]
            assert problem["field"] == "input_map.v"
            assert "at most 64 are allowed" in problem["message"], problem
            assert events == [] and resp["nodes_run"] == 0
        await client.assert_alive("after-deep")


@pytest.mark.asyncio
async def test_a_long_expression_over_a_million_items_ends_at_the_chain_timeout() -> None:
    """Issue 12.5: on main the host froze for 8 s and the chain with ``timeout: 1``
    succeeded. Here the evaluation runs off the loop (the ping is answered while it runs)
    and the chain ends with ``timeout``. The host's step ceiling is raised so that only
    the timeout can end it."""
    request = chain(
        "long", [tool("x", "echo", input_map={"n": LONG_FILTER})],
        initial_input={"items": list(range(1_000_000))}, timeout=1,
    )
    async with host({"A2E_MAX_EXPRESSION_STEPS": str(10**9)}) as client:
        await client.send(request)
        started = await client.host.receive()
        assert (started["type"], started["node_id"], started["phase"]) == (
            "chain/event", "x", "start"), started
        await client.send({"type": "ping", "id": "during"})
        first = await client.host.receive()
        assert (first["type"], first.get("req_id")) == ("pong", "during"), (
            f"the ping waited behind the expression: {first}")
        rest = [await client.host.receive()]
        while rest[-1]["type"] != "chain/resp":
            rest.append(await client.host.receive())
        error = error_of(rest[-1])
        assert error["code"] == "timeout", error
        assert rest[-1]["duration_ms"] < 10_000
        await client.assert_alive("after-long")


@pytest.mark.asyncio
async def test_a_long_expression_with_default_ceilings_is_refused_as_chain_limit() -> None:
    request = chain("long", [tool("x", "echo", input_map={"n": LONG_FILTER})],
                    initial_input={"items": list(range(1_000_000))}, timeout=60)
    async with host() as client:
        await client.send(request)
        # a million steps take seconds of CPU, many more on a busy machine: each message
        # may take up to the chain's own timeout (then the code says timeout, not this)
        messages = [await client.host.receive(wait=60 + WAIT)]
        while messages[-1]["type"] == "chain/event":
            messages.append(await client.host.receive(wait=60 + WAIT))
        resp = messages[-1]
        assert resp.get("req_id") == "long", resp
        error = error_of(resp)
        assert (error["code"], error["details"]["ceiling"]) == (
            "chain_limit", "max_expression_steps"), error
        await client.assert_alive("after-steps")


@pytest.mark.asyncio
async def test_the_whole_context_reaches_a_tool_as_a_json_object() -> None:
    """Issue 13.2: on main ``$`` gave only the node's own keys and ``keys(@)`` failed."""
    nodes = [
        tool("a", "echo", input={"k": 1}, next_node="b"),
        tool("b", "echo", input_map={
            "whole": "$", "keys": "keys(@)", "n": "length(@)", "merged": "merge(@, `{}`)"}),
    ]
    async with host() as client:
        _, resp = await client.run(chain("whole", nodes, initial_input={"q": [1]}))
    assert resp["success"], resp.get("error")
    whole = {"input": {"q": [1]}, "a": {"output": {"k": 1}, "status": "done"},
             "output": {"k": 1}}
    assert resp["outputs"]["b"] == {
        "whole": whole, "keys": ["input", "a", "output"], "n": 3, "merged": whole}

