"""Recovery over the wire: the real ``a2e-host stdio`` with the conformance tools
(PROTOCOL.md §5 Recovery, §7 ``flaky``). The features are advertised, a flaky tool is
retried with its attempts streamed as progress events, the step cache is the host's
(shared by its sessions' chains), and the new ceiling is published."""

from __future__ import annotations

import anyio
import pytest

from tests.support.stdio import stdio_host

RETRY = {"max_attempts": 3, "interval": 0.01, "backoff_rate": 1.0, "jitter": "none"}


@pytest.mark.asyncio
async def test_a_flaky_tool_is_retried_over_stdio_with_its_attempts_streamed() -> None:
    with anyio.fail_after(60):
        async with stdio_host() as client:
            meta = client.handshake["accepted_caps"][0]["metadata"]
            assert {"chain/node.retry", "chain/node.timeout", "chain/node.fallback",
                    "chain/cache"} <= set(meta["features"])
            assert meta["limits"]["max_attempts"] == 10
            events, resp = await client.run({
                "type": "chain/req", "id": "r1",
                "nodes": [
                    {"node_id": "f", "kind": "tool", "name": "flaky",
                     "input": {"key": "wire-1", "failures": 2}, "retry": RETRY,
                     "next_node": "e"},
                    {"node_id": "e", "kind": "tool", "name": "echo",
                     "input_map": {"n": "f.output.attempts"}, "cache": True},
                ],
                "entry_node": "f",
            })
            assert [(e["seq"], e["node_id"], e["phase"], e["kind"]) for e in events] == [
                (1, "f", "start", "status"), (2, "f", "start", "progress"),
                (3, "f", "start", "progress"), (4, "f", "done", "status"),
                (5, "e", "start", "status"), (6, "e", "done", "status"),
            ]
            assert [e["data"] for e in events[1:3]] == [
                {"attempt": n, "of": 3, "code": "chain_node_error", "retry_in_s": 0.01,
                 "error": f"flaky: call {n} for key 'wire-1' fails on purpose (2 failures "
                          "asked); retry it"}
                for n in (1, 2)
            ]
            assert events[0]["data"] == {}
            assert events[3]["output"] == {"attempts": 3}
            assert events[3]["data"]["attempts"] == 3
            assert events[3]["data"]["fallback_used"] is False
            assert events[3]["data"]["tool"] == "flaky"
            assert events[5]["data"]["cache"] == "miss"
            assert resp["type"] == "chain/resp" and resp["success"] is True
            assert resp["outputs"] == {"f": {"attempts": 3}, "e": {"n": 3}}
            # the same call in another chain is answered from the host's cache
            events, resp = await client.run({
                "type": "chain/req", "id": "r2", "cache": True,
                "nodes": [{"node_id": "e", "kind": "tool", "name": "echo",
                           "input": {"n": 3}}],
                "entry_node": "e",
            })
            assert events[-1]["data"] == {"attempts": 0, "errors": [], "fallback_used": False,
                                          "tool": "echo", "cache": "hit"}
            assert resp["outputs"] == {"e": {"n": 3}}
            await client.assert_alive("after")


@pytest.mark.asyncio
async def test_a_session_lowering_max_attempts_is_refused_a_larger_retry() -> None:
    with anyio.fail_after(60):
        async with stdio_host(max_attempts=2) as client:
            assert client.handshake["accepted_caps"][0]["metadata"]["limits"][
                "max_attempts"] == 2
            events, resp = await client.run({
                "type": "chain/req", "id": "r",
                "nodes": [{"node_id": "f", "kind": "tool", "name": "flaky",
                           "input": {"key": "wire-2", "failures": 0}, "retry": RETRY}],
                "entry_node": "f",
            })
            assert events == []
            assert resp["success"] is False and resp["nodes_run"] == 0
            error = resp["error"]
            assert error["code"] == "chain_limit"
            assert {k: error["details"][k] for k in ("ceiling", "scope", "limit",
                                                     "requested")} == {
                "ceiling": "max_attempts", "scope": "session", "limit": 2, "requested": 3}
