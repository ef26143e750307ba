"""Hostile and odd input against the real ``a2e-host stdio --tools conformance`` subprocess
(PROTOCOL.md §1-§8): every case gets a specific error or a correct ``chain/resp``, and the
host stays up and answers a ping afterwards."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import anyio
import pytest

from tests.support import REPO
from tests.support.process import HostProcess, host_env, open_host, peak_rss_kib
from tests.support.requests import chain, error_of, mapping, sleeper, tool
from tests.support.stdio import STDIO, stdio_host

# ── malformed frames ─────────────────────────────────────────────────────────────


MALFORMED: list[tuple[bytes, str, str, str | None]] = [
    # raw line, expected code, expected req_id, expected detail.path
    (b"\xef\xbb\xbf\xff not utf-8", "parse_error", "", None),
    (b'{"type":"ping","id":"nul\x00"}', "parse_error", "", None),
    (b'{"type":"ping","id":"a1"}{"type":"ping","id":"a2"}', "parse_error", "", None),
    (b'{"type":"ping","id":"nan","x":NaN}', "parse_error", "", None),
    (b"null", "invalid_message", "", None),
    (b'"a string"', "invalid_message", "", None),
    (b'{"type":5,"id":"t5"}', "invalid_message", "t5", None),
    (b'{"id":"notype"}', "invalid_message", "notype", None),
    (b'{"type":"chain/req","id":"nd","nodes":{}}', "schema_violation", "nd", "$.nodes"),
    (
        b'{"type":"chain/req","id":"im","entry_node":"a",'
        b'"nodes":[{"node_id":"a","kind":"tool","name":"echo","input_map":[]}]}',
        "schema_violation", "im", "$.nodes[0].input_map",
    ),
    (b'{"type":"chain/req","id":"ii","initial_input":[1]}', "schema_violation", "ii",
     "$.initial_input"),
    (b'{"type":"chain/req","id":"hi","initial_input":{"n":1' + b"0" * 5000 + b"}}",
     "parse_error", "", None),
    (b'{"type":"chain/cancel","id":"cn","req_id":5}', "schema_violation", "cn", "$.req_id"),
]


@pytest.mark.asyncio
async def test_malformed_lines_interleaved_with_chains_get_one_specific_error_each() -> None:
    async with stdio_host() as client:
        for n, (raw, code, req_id, path) in enumerate(MALFORMED):
            await client.send(raw)
            err = await client.reply()
            assert (err["type"], err["code"], err["req_id"]) == ("error", code, req_id), (
                f"line {raw[:60]!r}: expected {code} for {req_id!r}, got {err}"
            )
            assert err["message"], f"line {raw[:60]!r}: empty error message"
            if path is not None:
                assert err["detail"]["path"] == path, f"line {raw[:60]!r}: {err['detail']}"
            _, resp = await client.run(
                chain(f"ok{n}", [tool("a", "add", input={"a": n, "b": 1})], streaming=False)
            )
            assert resp["success"] and resp["final_output"] == {"sum": n + 1}, resp
        for blank in (b"", b"   ", b'{"type":"ping","id":"crlf"}\r'):
            await client.send(blank)
        pong = await client.reply()
        assert (pong["type"], pong["req_id"]) == ("pong", "crlf"), "blank lines must be ignored"
        await client.assert_alive("end")


# ── graph shape and ceilings ─────────────────────────────────────────────────────


@pytest.mark.asyncio
async def test_self_loop_and_two_node_cycle_are_chain_cycle_with_the_path() -> None:
    async with stdio_host() as client:
        events, resp = await client.run(chain("self", [tool("a", "echo", next_node="a")]))
        err = error_of(resp)
        assert (err["code"], err["node_id"], resp["nodes_run"], events) == (
            "chain_cycle", "a", 0, []
        )
        assert "a → a" in err["message"], err
        nodes = [tool("a", "echo", next_node="b"), tool("b", "echo", input_map={"x": "a.output"})]
        nodes.append(tool("c", "echo", next_node="a"))
        nodes[1]["next_node"] = "a"
        events, resp = await client.run(chain("ring", nodes, "c"))
        err = error_of(resp)
        assert err["code"] == "chain_cycle" and events == [], err
        cycles = [p for p in err["details"]["errors"] if p["code"] == "chain_cycle"]
        assert cycles and set(cycles[0]["path"]) == {"a", "b"}, cycles
        await client.assert_alive("after")


@pytest.mark.asyncio
async def test_10001_nodes_is_chain_limit_naming_max_nodes_at_host_scope() -> None:
    nodes = [tool(f"n{i}", "echo", next_node=f"n{i + 1}" if i < 10_000 else "")
             for i in range(10_001)]
    async with stdio_host() as client:
        events, resp = await client.run(chain("many", nodes, streaming=True))
        err = error_of(resp)
        assert (err["code"], resp["nodes_run"], events) == ("chain_limit", 0, [])
        limit = [p for p in err["details"]["errors"] if p["code"] == "chain_limit"]
        assert limit and {k: limit[0][k] for k in ("ceiling", "scope", "limit", "requested")} == {
            "ceiling": "max_nodes", "scope": "host", "limit": 10_000, "requested": 10_001,
        }, limit
        await client.assert_alive("after")


@pytest.mark.asyncio
async def test_five_thousand_way_fan_out_runs_every_branch_with_contiguous_seq() -> None:
    nodes = [tool("root", "echo", input={"v": 1})]
    nodes += [tool(f"f{i}", "add", input={"b": i}, input_map={"a": "root.output.v"})
              for i in range(5_000)]
    async with stdio_host() as client:
        events, resp = await client.run(chain("fan", nodes))
    assert resp["success"] and resp["nodes_run"] == 5_001, resp.get("error")
    assert resp["outputs"]["f1234"] == {"sum": 1_235}
    assert resp["final_output"] == {"sum": 5_000}  # f4999, the last terminal declared
    assert [e["seq"] for e in events] == list(range(1, 10_003))


@pytest.mark.asyncio
async def test_map_over_100001_items_is_chain_limit_at_host_scope() -> None:
    """PROTOCOL.md §6: no session or request lowered max_map_items, so the refusing scope
    is ``host`` (and on a tie the broader scope is named)."""
    nodes = mapping("input.xs", tool("t", "echo", input_map={"i": "index"}))
    async with stdio_host() as client:
        _, resp = await client.run(
            chain("huge", nodes, initial_input={"xs": list(range(100_001))}, streaming=False)
        )
        await client.assert_alive("after")
    err = error_of(resp)
    assert (err["code"], err["node_id"]) == ("chain_limit", "m"), err
    assert {k: err["details"][k] for k in ("ceiling", "limit", "requested")} == {
        "ceiling": "max_map_items", "limit": 100_000, "requested": 100_001,
    }
    assert err["details"]["scope"] == "host", (
        f"max_map_items was only set by the host, yet the refusal names scope "
        f"{err['details']['scope']!r} (PROTOCOL.md §6)"
    )


@pytest.mark.asyncio
async def test_map_over_a_session_lowered_max_map_items_names_the_session_scope() -> None:
    nodes = mapping("input.xs", tool("t", "echo", input_map={"i": "index"}))
    async with stdio_host(max_map_items=50) as client:
        _, at = await client.run(
            chain("at", nodes, initial_input={"xs": list(range(50))}, streaming=False)
        )
        _, over = await client.run(
            chain("over", nodes, initial_input={"xs": list(range(51))}, streaming=False)
        )
    assert at["success"] and at["final_output"] == [{"i": i} for i in range(50)]
    assert error_of(over)["details"] == {
        "ceiling": "max_map_items", "scope": "session", "limit": 50, "requested": 51,
    }


@pytest.mark.asyncio
async def test_map_over_20000_items_completes_in_order_with_bounded_memory() -> None:
    nodes = mapping("input.xs", tool("t", "add", input={"b": 1}, input_map={"a": "item"}))
    async with stdio_host() as client:
        pid = client.host.process.pid
        before = peak_rss_kib(pid)
        events, resp = await client.run(
            chain("m20k", nodes, initial_input={"xs": list(range(20_000))})
        )
        grown = peak_rss_kib(pid) - before
    assert resp["success"] and resp["nodes_run"] == 1, resp.get("error")
    assert resp["final_output"] == [{"sum": i + 1} for i in range(20_000)]
    assert [e["seq"] for e in events] == list(range(1, 40_003))
    assert {e["node_id"] for e in events if e["phase"] == "done"} == (
        {"m"} | {f"t[{i}]" for i in range(20_000)}
    )
    assert grown < 300 * 1024, f"host peak memory grew by {grown} KiB for a 20,000-item map"


# ── nesting, size, numbers ───────────────────────────────────────────────────────


def nested_request(req_id: str, depth: int) -> bytes:
    head = json.dumps(chain(req_id, [tool("a", "echo", input_map={"d": "input.d"})],
                            initial_input={"d": "@@"}, streaming=False))
    return head.replace('"@@"', '{"a":' * depth + "0" + "}" * depth).encode()


@pytest.mark.asyncio
async def test_5000_levels_of_initial_input_is_parse_error_and_200_levels_round_trip() -> None:
    async with stdio_host() as client:
        await client.send(nested_request("deep", 5_000))
        err = await client.reply()
        assert (err["type"], err["code"]) == ("error", "parse_error"), err
        assert "nested" in err["message"], err
        _, resp = await client.run(json.loads(nested_request("ok", 200)))
        await client.assert_alive("after")
    value = resp["final_output"]["d"]
    depth = 0
    while isinstance(value, dict):
        value, depth = value["a"], depth + 1
    assert (resp["success"], depth, value) == (True, 200, 0)


@pytest.mark.asyncio
async def test_big_output_over_a_session_lowered_max_output_bytes_is_chain_limit() -> None:
    async with stdio_host(max_output_bytes=1000) as client:
        _, over = await client.run(chain("over", [tool("a", "big", input={"bytes": 2000})]))
        _, under = await client.run(chain("under", [tool("a", "big", input={"bytes": 900})]))
        _, echoed = await client.run(chain(
            "echo", [tool("a", "echo", input_map={"s": "input.s"})],
            initial_input={"s": "y" * 5000}, streaming=False,
        ))
    err = error_of(over)
    assert (err["code"], err["node_id"]) == ("chain_limit", "a"), err
    assert err["details"] == {
        "ceiling": "max_output_bytes", "scope": "session", "limit": 1000, "requested": 2011,
    }
    assert under["success"] and under["final_output"] == {"data": "x" * 900}
    assert error_of(echoed)["details"]["requested"] == 5008


@pytest.mark.asyncio
async def test_big_output_over_the_host_max_output_bytes_names_the_host_scope() -> None:
    """PROTOCOL.md §6: only the host set max_output_bytes (8 MiB), so ``scope`` is ``host``."""
    async with stdio_host() as client:
        _, resp = await client.run(
            chain("big", [tool("a", "big", input={"bytes": 9 * 2**20})], streaming=False)
        )
        await client.assert_alive("after")
    err = error_of(resp)
    assert (err["code"], err["details"]["limit"]) == ("chain_limit", 8 * 2**20), err
    assert err["details"]["scope"] == "host", (
        f"max_output_bytes was only set by the host, yet the refusal names scope "
        f"{err['details']['scope']!r} (PROTOCOL.md §6)"
    )


# ── failing tools and expressions ────────────────────────────────────────────────


RUNTIME_FAILURES: list[tuple[dict[str, Any], dict[str, Any], tuple[str, ...]]] = [
    # node, initial_input, words the error message must contain
    (tool("a", "fail", input={"message": "boom here"}), {}, ("'a'", "boom here")),
    (tool("a", "add", input={"a": 1}), {}, ("'a'", "'add'", "'b'")),
    (tool("a", "upper", input={"text": 5}), {}, ("'a'", "'upper'", "text")),
    (tool("a", "echo", input_map={"x": "sort_by(input.xs, &v)"}),
     {"xs": [{"v": 1}, {"v": "s"}]}, ("'a'", "input_map.x", "sort_by")),
    (tool("a", "echo", input_map={"x": "merge(input.n, input.n)"}), {},
     ("'a'", "input_map.x", "merge")),
    (tool("a", "echo", input_map={"x": "input.xs[::0]"}), {"xs": [1, 2]},
     ("'a'", "input_map.x", "step")),
    (tool("a", "echo", input_map={"x": "to_number('1e999')"}), {}, ("'a'", "non-finite")),
    (tool("a", "echo", input_map={"x": "sum(input.xs)"}), {"xs": [1e308, 1e308]},
     ("'a'", "non-finite")),
    (tool("a", "echo", input_map={"x": "abs(input.s)"}), {"s": "str"}, ("'a'", "abs")),
]


@pytest.mark.parametrize(("node", "initial_input", "words"), RUNTIME_FAILURES)
@pytest.mark.asyncio
async def test_a_failing_tool_or_expression_is_chain_node_error_naming_node_and_cause(
    node: dict[str, Any], initial_input: dict[str, Any], words: tuple[str, ...]
) -> None:
    async with stdio_host() as client:
        events, resp = await client.run(chain("r", [node], initial_input=initial_input))
        await client.assert_alive("after")
    err = error_of(resp)
    assert (err["code"], err["node_id"], resp["nodes_run"]) == ("chain_node_error", "a", 1), err
    assert "Traceback" not in err["message"]
    for word in words:
        assert word in err["message"], f"{word!r} missing from {err['message']!r}"
    assert [(e["node_id"], e["phase"]) for e in events] == [("a", "start"), ("a", "error")]


@pytest.mark.asyncio
async def test_map_item_failure_names_its_index_and_skip_leaves_a_null() -> None:
    items = {"xs": ["a", "b", 3, "d"]}
    async with stdio_host() as client:
        _, aborted = await client.run(chain(
            "abort", mapping("input.xs", tool("t", "upper", input_map={"text": "item"})),
            initial_input=items, streaming=False,
        ))
        _, skipped = await client.run(chain(
            "skip",
            mapping("input.xs", tool("t", "upper", input_map={"text": "item"}, on_error="skip")),
            initial_input=items, streaming=False,
        ))
        _, not_list = await client.run(chain(
            "obj", mapping("input.xs", tool("t", "echo")), initial_input={"xs": {"k": 1}},
            streaming=False,
        ))
    err = error_of(aborted)
    assert (err["code"], err["node_id"], err["details"]["index"]) == ("chain_node_error", "m", 2)
    assert skipped["success"] and skipped["final_output"] == [
        {"text": "A"}, {"text": "B"}, None, {"text": "D"}
    ]
    err = error_of(not_list)
    assert err["node_id"] == "m" and "not a list" in err["message"], err


# ── protocol misuse on one connection ────────────────────────────────────────────


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
async def test_host_message_types_from_the_agent_are_invalid_message() -> None:
    sent = [
        {"type": "chain/resp", "id": "r1", "req_id": "x", "success": True},
        {"type": "chain/event", "id": "e1", "req_id": "x", "phase": "done"},
        {"type": "pong", "id": "p1"},
        {"type": "handshake/resp", "id": "h1"},
        {"type": "error", "id": "x1", "code": "busy", "message": "m"},
    ]
    async with stdio_host() as client:
        for message in sent:
            await client.send(message)
            err = await client.reply()
            assert (err["type"], err["code"], err["req_id"]) == (
                "error", "invalid_message", message["id"]
            ), err
            assert f"'{message['type']}'" in err["message"]
        await client.assert_alive("after")


@pytest.mark.asyncio
async def test_more_than_max_parallel_chains_get_busy_and_the_rest_finish() -> None:
    async with stdio_host() as client:
        assert client.handshake["max_parallel"] == 4
        for i in range(4):
            await client.send(sleeper(f"s{i}", 30))
        started = set()
        while len(started) < 4:
            event = await client.host.receive()
            assert event["phase"] == "start", event
            started.add(event["req_id"])
        await client.send(sleeper("fifth", 0))
        busy = await client.reply()
        assert (busy["type"], busy["code"], busy["req_id"], busy["retryable"]) == (
            "error", "busy", "fifth", True
        ), busy
        for i in range(4):
            await client.send({"type": "chain/cancel", "id": f"c{i}", "req_id": f"s{i}"})
        ended = set()
        while len(ended) < 4:
            resp = await client.reply()
            assert resp["type"] == "chain/resp" and resp["error"]["code"] == "cancelled", resp
            ended.add(resp["req_id"])
        _, resp = await client.run(chain("later", [tool("a", "echo", input={"k": 2})]))
        assert resp["success"], "a slot is free again after the cancels"


BAD_LIMITS: list[tuple[dict[str, Any], str]] = [
    ({"max_nodes": -1}, "$.limits.max_nodes"),
    ({"max_nodes": 0}, "$.limits.max_nodes"),
    ({"nope": 1}, "$.limits.nope"),
    ({"max_nodes": "x"}, "$.limits.max_nodes"),
    ({"max_nodes": 1.5}, "$.limits.max_nodes"),
]


@pytest.mark.parametrize(("limits", "path"), BAD_LIMITS)
@pytest.mark.asyncio
async def test_handshake_with_bad_limits_is_schema_violation_naming_the_ceiling(
    limits: dict[str, Any], path: str
) -> None:
    """PROTOCOL.md §1: a field of the wrong type is an error naming the field's path."""
    async with anyio.create_task_group() as tg:
        host = await open_host(STDIO)
        tg.start_soon(host.collect_stderr)
        await host.send(
            {"type": "handshake/req", "id": "h", "agent_caps": ["chains"], "limits": limits},
            {"type": "chain/req", "id": "early", "nodes": []},
            {"type": "ping", "id": "p"},
        )
        got = [await host.receive() for _ in range(3)]
        assert host.process.stdin is not None
        await host.process.stdin.aclose()
        assert await host.wait() == 0
    err = got[0]
    assert (err["type"], err["code"], err["req_id"]) == ("error", "schema_violation", "h"), err
    assert [(m["type"], m.get("code")) for m in got[1:]] == [
        ("error", "handshake_required"), ("pong", None)
    ]
    assert err["detail"]["path"] == path, (
        f"limits {limits}: detail.path is {err['detail']['path']!r}, should name {path!r}"
    )


@pytest.mark.asyncio
async def test_a_session_cannot_raise_a_ceiling_above_the_host() -> None:
    async with stdio_host(max_nodes=20_000) as client:
        meta = client.handshake["accepted_caps"][0]["metadata"]
        nodes = [tool(f"n{i}", "echo", next_node=f"n{i + 1}" if i < 10_000 else "")
                 for i in range(10_001)]
        _, resp = await client.run(chain("many", nodes, streaming=False))
    assert meta["limits"]["max_nodes"] == 10_000
    assert error_of(resp)["code"] == "chain_limit"


# ── text and streaming ───────────────────────────────────────────────────────────


@pytest.mark.asyncio
async def test_non_ascii_and_u2028_node_ids_and_outputs_round_trip_escaped() -> None:
    node_id = "n\u2028é中😀"
    text = "a\u2028b\u2029cé😀"
    async with stdio_host() as client:
        await client.send(chain("u", [tool(node_id, "echo", input={"t": text})]))
        raw = []
        while not raw or b'"chain/resp"' not in raw[-1]:
            assert client.host.stdout is not None
            with anyio.fail_after(15):
                raw.append(await client.host.stdout.receive_until(b"\n", 2**20))
    assert all(b"\xe2\x80\xa8" not in line and b"\xe2\x80\xa9" not in line for line in raw)
    messages = [json.loads(line) for line in raw]
    assert [(m.get("node_id"), m.get("phase")) for m in messages[:-1]] == [
        (node_id, "start"), (node_id, "done")
    ]
    assert messages[1]["output"] == {"t": text}
    assert messages[-1]["outputs"] == {node_id: {"t": text}}


@pytest.mark.asyncio
async def test_streaming_false_sends_only_the_response_even_on_failure() -> None:
    nodes = [tool("a", "echo", input={"v": 1}, next_node="b"),
             tool("b", "fail", input={"message": "no"}, on_error="skip", next_node="c"),
             tool("c", "add", input={"a": 1, "b": 2})]
    async with stdio_host() as client:
        events, ok = await client.run(chain("quiet", nodes, streaming=False))
        events_bad, bad = await client.run(
            chain("quiet2", [tool("a", "fail", input={"message": "x"})], streaming=False)
        )
    assert (events, events_bad) == ([], [])
    assert ok["success"] and ok["outputs"] == {"a": {"v": 1}, "c": {"sum": 3}}, ok
    assert error_of(bad)["code"] == "chain_node_error"


@pytest.mark.asyncio
async def test_client_closing_stdin_and_stdout_mid_chain_ends_the_host_before_the_tool() -> None:
    read_end, write_end = os.pipe()  # our own pipe, so that its reader can really be closed
    process = await anyio.open_process(
        STDIO, stdin=subprocess.PIPE, stdout=write_end, stderr=subprocess.PIPE,
        cwd=REPO, env=host_env(A2E_LOG_LEVEL="info"),
    )
    os.close(write_end)
    host = HostProcess(process)
    async with anyio.create_task_group() as tg:
        tg.start_soon(host.collect_stderr)
        await host.send({"type": "handshake/req", "id": "h", "agent_caps": ["chains"]},
                        sleeper("w", 600))
        with anyio.fail_after(15):
            seen = b""
            while b'"phase":"start"' not in seen:
                seen += await anyio.to_thread.run_sync(os.read, read_end, 65536)
        os.close(read_end)
        assert process.stdin is not None
        await process.stdin.aclose()
        assert await host.wait() == 0  # bounded by WAIT, far below the tool's 600 s
    assert b"peer gone" in host.stderr
    assert b"Traceback" not in host.stderr
