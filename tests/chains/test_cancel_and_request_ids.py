"""Request ids and ``chain/cancel`` on real hosts (PROTOCOL.md §2, §5): a running id
cannot be reused, a cancel of an unknown or finished id is an error naming it, and a
cancel racing a chain's completion never yields two responses."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from websockets.asyncio.client import connect

from tests.support.requests import chain, sleeper, tool
from tests.support.stdio import stdio_host
from tests.support.ws import (
    chain_frame,
    echo_node,
    hello,
    receive,
    send,
    serving,
    sleep_node,
)


@pytest.mark.asyncio
async def test_duplicate_running_id_is_refused_and_cancel_of_unknown_or_finished_id_errs() -> None:
    async with stdio_host() as client:
        await client.send(sleeper("dup"))
        start = await client.host.receive()
        assert (start["req_id"], start["phase"]) == ("dup", "start")
        await client.send(sleeper("dup"))
        refused = await client.reply()
        assert (refused["type"], refused["req_id"]) == ("error", "dup"), refused
        assert "already running" in refused["message"]
        for bad in ("nope", ""):
            await client.send({"type": "chain/cancel", "id": f"c-{bad}", "req_id": bad})
            err = await client.reply()
            assert (err["type"], err["req_id"]) == ("error", f"c-{bad}"), err
            assert f"'{bad}'" in err["message"]
        await client.send({"type": "chain/cancel", "id": "c1", "req_id": "dup"})
        ended = await client.host.receive()
        assert (ended["node_id"], ended["phase"]) == ("s", "error"), ended
        resp = await client.reply()
        assert (resp["req_id"], resp["error"]["code"]) == ("dup", "cancelled"), resp
        await client.send({"type": "chain/cancel", "id": "c2", "req_id": "dup"})
        late = await client.reply()
        assert (late["type"], late["req_id"]) == ("error", "c2"), "cancel of a finished chain"
        _, again = await client.run(chain("dup", [tool("a", "echo", input={"k": 1})]))
        assert again["success"] and again["final_output"] == {"k": 1}, "a finished id is reusable"


@pytest.mark.asyncio
async def test_cancel_racing_completion_never_gives_two_responses() -> None:
    rounds = 300
    async with serving() as (url, _), connect(url) as ws:
        await hello(ws)
        responses: Counter[str] = Counter()
        errors: list[dict[str, Any]] = []
        outcomes: Counter[str] = Counter()
        for first in range(0, rounds, 4):  # max_parallel chains at a time, each raced
            batch = range(first, min(first + 4, rounds))
            for n in batch:
                nodes = echo_node(n) if n % 2 else sleep_node(0.001 * (n % 7))
                await ws.send(chain_frame(f"r{n}", nodes))
                await send(ws, {"type": "chain/cancel", "id": f"c{n}", "req_id": f"r{n}"})
            while any(responses[f"r{n}"] == 0 for n in batch):
                message = await receive(ws)
                if message["type"] == "chain/resp":
                    responses[message["req_id"]] += 1
                    n = int(message["req_id"][1:])
                    if message["success"]:
                        expected = (
                            {"v": n} if n % 2 else {"slept": 0.001 * (n % 7), "value": None}
                        )
                        assert message["final_output"] == expected, message
                        outcomes["done"] += 1
                    else:
                        assert message["error"]["code"] == "cancelled", message
                        outcomes["cancelled"] += 1
                elif message["type"] == "error":
                    errors.append(message)
        await send(ws, {"type": "ping", "id": "end"})
        while (message := await receive(ws))["type"] != "pong":
            if message["type"] == "chain/resp":
                responses[message["req_id"]] += 1
            elif message["type"] == "error":
                errors.append(message)
    assert [r for r, k in responses.items() if k != 1] == [], "a request answered twice"
    assert set(responses) == {f"r{n}" for n in range(rounds)}
    assert {e["code"] for e in errors} <= {"invalid_message"}, errors[:3]
    assert all(e["req_id"].startswith("c") for e in errors), errors[:3]
    assert len(errors) <= outcomes["done"], (outcomes, len(errors))
