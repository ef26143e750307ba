"""Malformed and odd messages to the real ``a2e-host stdio --tools conformance``
(PROTOCOL.md §1, §2, §8): each gets one specific error naming the request and, for a
schema violation, the field's path; nesting and numbers are bounded at decode time; text
round-trips with U+2028/U+2029 escaped; and the host keeps answering afterwards."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anyio
import pytest
import pytest_asyncio

from tests.support.requests import chain, tool
from tests.support.stdio import Client, shared_stdio_host


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    """One stdio host for the module: no malformed message ends its session, so the cases
    run one after another on the same session."""
    async with shared_stdio_host(tmp_path_factory.mktemp("host")) as shared:
        yield shared


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


def nested_request(req_id: str, depth: int) -> bytes:
    head = json.dumps(chain(req_id, [tool("a", "echo", input_map={"d": "input.d"})],
                            initial_input={"d": "@@"}, streaming=False))
    return head.replace('"@@"', '{"a":' * depth + "0" + "}" * depth).encode()


@pytest.mark.asyncio(loop_scope="module")
async def test_malformed_lines_interleaved_with_chains_get_one_specific_error_each(
    client: Client,
) -> None:
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


@pytest.mark.asyncio(loop_scope="module")
async def test_5000_levels_of_initial_input_is_parse_error_and_200_levels_round_trip(
    client: Client,
) -> None:
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


@pytest.mark.asyncio(loop_scope="module")
async def test_host_message_types_from_the_agent_are_invalid_message(client: Client) -> None:
    sent = [
        {"type": "chain/resp", "id": "r1", "req_id": "x", "success": True},
        {"type": "chain/event", "id": "e1", "req_id": "x", "phase": "done"},
        {"type": "pong", "id": "p1"},
        {"type": "handshake/resp", "id": "h1"},
        {"type": "error", "id": "x1", "code": "busy", "message": "m"},
    ]
    for message in sent:
        await client.send(message)
        err = await client.reply()
        assert (err["type"], err["code"], err["req_id"]) == (
            "error", "invalid_message", message["id"]
        ), err
        assert f"'{message['type']}'" in err["message"]
    await client.assert_alive("after")


@pytest.mark.asyncio(loop_scope="module")
async def test_non_ascii_and_u2028_node_ids_and_outputs_round_trip_escaped(client: Client) -> None:
    node_id = "n\u2028é中😀"
    text = "a\u2028b\u2029cé😀"
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
