"""Decoding: bytes → message, or exactly one PROTOCOL.md §2 error code (with its path)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from a2e_host.chains.messages import (
    ChainCancel,
    ChainEvent,
    ChainNode,
    ChainRequest,
    ChainResponse,
    chain_codec,
)
from a2e_host.codec import encode_message
from a2e_host.errors import ChainFailure
from a2e_host.exceptions import RemoteProtocolError
from a2e_host.messages import (
    Capability,
    ErrorMessage,
    HandshakeRequest,
    HandshakeResponse,
    Message,
    Ping,
    Pong,
    Shutdown,
)

SEED_LINEAR = (
    b'{"type":"chain/req","id":"c1","version":"1.0","ts":1716123456.789,"session_id":"s1",'
    b'"chain_id":"abc123","nodes":[{"node_id":"read","kind":"tool","name":"read_file",'
    b'"input":{"path":"/data/input.txt"},"input_map":{},"next_node":"summarize",'
    b'"on_error":"abort"},{"node_id":"summarize","kind":"skill","name":"text_summarizer",'
    b'"input":{},"input_map":{"text":"read.output"},"on_error":"abort"}],"entry_node":"read",'
    b'"initial_input":{},"streaming":true,"timeout":300}'
)
PING = b'{"type":"ping","id":"p1","ts":5.0}'


def _nodes(n: int, **changes: Any) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = [
        {"node_id": f"n{i}", "kind": "tool", "name": "echo"} for i in range(n)
    ]
    for key, value in changes.items():
        index, field = key.split("__")
        nodes[int(index[1:])][field] = value
    return nodes


def _req(**fields: Any) -> bytes:
    return msgspec.json.encode({"type": "chain/req", "id": "r1", **fields})


def _error(data: bytes | str) -> RemoteProtocolError:
    with pytest.raises(RemoteProtocolError) as info:
        chain_codec.decode(data)
    return info.value


MESSAGES: list[Message] = [
    HandshakeRequest(id="h1", ts=1.0, agent_id="a", agent_caps=["chains"], auth_token="t",
                     limits={"max_nodes": 5}),
    HandshakeResponse(id="h2", ts=2.0, req_id="h1", session_id="s1", max_parallel=2,
                      accepted_caps=[Capability(capability="chains",
                                                metadata={"namespace": "chain/*"})]),
    HandshakeResponse(ok=False, reason="auth_failed"),
    Ping(),
    Pong(req_id="p1", uptime_seconds=12.25),
    Shutdown(timeout=3),
    ErrorMessage(req_id="x", code="schema_violation", message="m",
                 detail={"path": "$.nodes"}, retryable=True, capability_name="chains"),
    ChainRequest(session_id="s", chain_id="c", entry_node="a", initial_input={"k": [1, 2]},
                 correlation_id="turn-3", streaming=False, timeout=5,
                 nodes=[ChainNode(node_id="a", kind="tool", name="echo", input={"x": 1},
                                  input_map={"y": "input.k"}, next_node="b", on_error="skip"),
                        ChainNode(node_id="b", kind="branch", condition="a.output",
                                  true_node="c", false_node="d"),
                        ChainNode(node_id="m", kind="map", items_path="input.k",
                                  map_node="t", on_error="h")]),
    ChainEvent(req_id="r", seq=7, node_id="t[3]", phase="done",
               output={"deep": [1, 2.5, None, True, "\u2028\U0001f600", 2**70]}),
    ChainEvent(req_id="r", seq=8, node_id="n", phase="error", error="boom"),
    ChainResponse(req_id="r", chain_id="c", success=True, outputs={"a": 1, "b": None},
                  final_output=[1], duration_ms=12, nodes_run=2),
    ChainResponse(error=ChainFailure(code="chain_cycle", message="a → b → a", node_id="a",
                                     details={"errors": [{"code": "chain_cycle"}]})),
    ChainCancel(session_id="s", req_id="r"),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips_through_encode_and_decode(msg: Message) -> None:
    data = encode_message(msg)
    assert b"\n" not in data
    decoded = chain_codec.decode(data)
    assert type(decoded) is type(msg)
    assert decoded == msg


def test_the_seed_wire_example_decodes_to_typed_nodes() -> None:
    req = chain_codec.decode(SEED_LINEAR)
    assert isinstance(req, ChainRequest)
    assert (req.id, req.session_id, req.chain_id, req.entry_node) == ("c1", "s1", "abc123", "read")
    assert req.ts == 1716123456.789
    assert [n.node_id for n in req.nodes] == ["read", "summarize"]
    assert req.nodes[1].input_map == {"text": "read.output"}
    assert req.nodes[1].next_node == "" and req.nodes[1].on_error == "abort"


def test_a_str_is_decoded_like_its_utf8_bytes() -> None:
    assert chain_codec.decode(SEED_LINEAR.decode()) == chain_codec.decode(SEED_LINEAR)


# (name, bytes, expected class or error code, expected detail.path or None)
TABLE: list[tuple[str, bytes, type[Message] | str, str | None]] = [
    ("seed example", SEED_LINEAR, ChainRequest, None),
    ("minimal ping", b'{"type":"ping"}', Ping, None),
    ("unknown fields ignored", b'{"type":"ping","extra":{"x":[1]},"more":1}', Ping, None),
    ("a2e alias", b'{"type":"ping","a2e":"1.0"}', Ping, None),
    ("minor version", b'{"type":"ping","version":"1.9"}', Ping, None),
    ("leading whitespace", b' \t{"type":"ping"} ', Ping, None),
    ("invalid JSON", b'{"type":"ping",', "parse_error", None),
    ("not JSON at all", b"hello", "parse_error", None),
    ("empty input", b"", "parse_error", None),
    ("two values", b'{"type":"ping"}{"type":"ping"}', "parse_error", None),
    ("invalid UTF-8", b'{"type":"ping","id":"\xff\xfe"}', "parse_error", None),
    ("encoded surrogate", b'{"type":"ping","id":"\xed\xa0\x80"}', "parse_error", None),
    ("lone surrogate escape", b'{"type":"ping","id":"\\ud800"}', "parse_error", None),
    ("lone low surrogate", b'{"type":"ping","id":"\\udc00x"}', "parse_error", None),
    ("NaN", b'{"type":"chain/event","output":NaN}', "parse_error", None),
    ("Infinity", b'{"type":"chain/event","output":Infinity}', "parse_error", None),
    ("float beyond double", b'{"type":"chain/event","output":1e400}', "parse_error",
     "$.output"),
    ("5000-digit integer", b'{"type":"chain/event","output":' + b"7" * 5000 + b"}",
     "parse_error", "$.output"),
    ("array", b'[{"type":"ping"}]', "invalid_message", None),
    ("number", b"42", "invalid_message", None),
    ("string", b'"ping"', "invalid_message", None),
    ("null", b"null", "invalid_message", None),
    ("missing type", b'{"id":"x"}', "invalid_message", None),
    ("type not a string", b'{"type":7}', "invalid_message", None),
    ("type null", b'{"type":null}', "invalid_message", None),
    ("unknown type", b'{"type":"chain/frobnicate"}', "unknown_type", None),
    ("nodes as a string", _req(nodes="abc"), "schema_violation", "$.nodes"),
    ("kind as a number", _req(nodes=_nodes(4, n2__kind=3)), "schema_violation",
     "$.nodes[2].kind"),
    ("input_map not an object", _req(nodes=_nodes(4, n3__input_map=[1])), "schema_violation",
     "$.nodes[3].input_map"),
    ("input_map value not a string", _req(nodes=_nodes(4, n3__input_map={"x": 1})),
     "schema_violation", "$.nodes[3].input_map"),
    ("missing node_id", _req(nodes=[{"kind": "tool"}]), "schema_violation",
     "$.nodes[0].node_id"),
    ("timeout as a float", _req(timeout=2.5), "schema_violation", "$.timeout"),
    ("streaming as a string", _req(streaming="yes"), "schema_violation", "$.streaming"),
    ("id as a number", b'{"type":"ping","id":5}', "schema_violation", "$.id"),
    ("version as a number", b'{"type":"ping","version":2}', "schema_violation", "$.version"),
    ("error without code", b'{"type":"error"}', "schema_violation", "$.code"),
    # a ceiling's value is checked by the session, which names it ($.limits.max_nodes)
    ("limits not an object", b'{"type":"handshake/req","limits":[1]}',
     "schema_violation", "$.limits"),
    ("version 2.0", _req(version="2.0"), "version_mismatch", None),
    ("a2e 2.0", _req(a2e="2.0"), "version_mismatch", None),
    ("version 10.0", b'{"type":"ping","version":"10.0"}', "version_mismatch", None),
    ("empty version", b'{"type":"ping","version":""}', "version_mismatch", None),
    ("bad version and bad field", _req(version="2.0", nodes="x"), "version_mismatch", None),
]


@pytest.mark.parametrize(("name", "data", "expected", "path"), TABLE, ids=[r[0] for r in TABLE])
def test_bytes_decode_to_a_message_or_one_error_code(
    name: str, data: bytes, expected: type[Message] | str, path: str | None
) -> None:
    if isinstance(expected, type):
        assert type(chain_codec.decode(data)) is expected
        return
    err = _error(data)
    assert err.code == expected
    assert err.detail.get("path") == path
    assert err.message and "\n" not in err.message
    if path is not None:
        assert path in err.message
    # The decoder keeps no state: the next message decodes.
    assert chain_codec.decode(PING) == Ping(id="p1", ts=5.0)


def test_100000_nested_arrays_are_a_parse_error_not_a_recursion_error() -> None:
    for data in (b"[" * 100_000 + b"]" * 100_000, b'{"type":"chain/event","output":'
                 + b"[" * 100_000 + b"]" * 100_000 + b"}", b"[" * 100_000):
        assert _error(data).code == "parse_error"
    assert isinstance(chain_codec.decode(PING), Ping)


def test_a_str_with_a_lone_surrogate_is_a_parse_error() -> None:
    assert _error('{"type":"ping","id":"\ud800"}').code == "parse_error"


def test_the_largest_integer_the_decoder_takes_round_trips() -> None:
    big = int("9" * 4300)
    event = chain_codec.decode(b'{"type":"chain/event","output":' + str(big).encode() + b"}")
    assert isinstance(event, ChainEvent) and event.output == big
    assert chain_codec.decode(encode_message(event)) == event


def test_req_id_is_the_message_id_when_readable() -> None:
    assert _error(_req(version="2.0")).req_id == "r1"
    assert _error(_req(nodes="x")).req_id == "r1"
    assert _error(b'{"type":"nope","id":"u1"}').req_id == "u1"
    assert _error(b'{"id":"t1"}').req_id == "t1"


@pytest.mark.parametrize(
    "data",
    [
        b'{"type":"chain/req","version":"2.0"}',
        b'{"type":"ping","a2e":"3.1"}',
        b'{"type":"chain/req","version":"2.0","nodes":"x"}',
        b'{"type":"chain/req","id":7}',
        b'{"type":"nope","id":["x"]}',
        b'{"type":"ping","id":"\\ud800"}',
        b"[1]",
    ],
)
def test_req_id_is_empty_when_the_message_had_no_readable_id(data: bytes) -> None:
    assert _error(data).req_id == ""  # type: ignore[attr-defined]


def test_version_mismatch_names_the_versions_the_host_speaks() -> None:
    err = _error(_req(version="2.0"))
    assert err.detail == {"supported": ["1.x"], "got": "2.0"}
    assert "'2.0'" in err.message and "1.x" in err.message


def test_the_a2e_alias_becomes_version_and_is_never_emitted() -> None:
    msg = chain_codec.decode(b'{"type":"ping","id":"p","ts":1.0,"a2e":"1.2"}')
    assert msg.version == "1.2"
    assert msg.a2e is msgspec.UNSET
    assert encode_message(msg) == b'{"type":"ping","id":"p","version":"1.2","ts":1.0}'


def test_a2e_and_version_must_both_be_spoken() -> None:
    assert _error(b'{"type":"ping","a2e":"1.0","version":"2.0"}').code == "version_mismatch"
    assert _error(b'{"type":"ping","a2e":"2.0","version":"1.0"}').code == "version_mismatch"


def test_duplicate_keys_last_one_wins_the_type_tag_included() -> None:
    assert isinstance(chain_codec.decode(b'{"type":"ping","type":"chain/req"}'), ChainRequest)
    assert isinstance(chain_codec.decode(b'{"type":"chain/req","type":"ping"}'), Ping)
    msg = chain_codec.decode(b'{"type":"ping","id":"a","id":"b"}')
    assert msg.id == "b"
    err = _error(b'{"type":"ping","type":"chain/req","nodes":"x","id":"d"}')
    assert (err.code, err.detail["path"], err.req_id) == (  # type: ignore[attr-defined]
        "schema_violation", "$.nodes", "d"
    )
    assert _error(b'{"type":"ping","version":"2.0","type":"ping"}').code == "version_mismatch"


def test_schema_violation_messages_name_the_message_type_and_field() -> None:
    err = _error(_req(nodes=_nodes(4, n2__kind=3)))
    assert err.message == (
        "chain/req has an invalid field: $.nodes[2].kind: expected `str`, got `int`"
    )
    assert err.detail == {"path": "$.nodes[2].kind", "type": "chain/req"}
    missing = _error(_req(nodes=[{"kind": "tool"}]))
    assert missing.message == "chain/req is missing the required field $.nodes[0].node_id; add it"
