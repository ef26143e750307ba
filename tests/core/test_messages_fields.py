"""The message Structs match the seed spec's field tables and PROTOCOL.md §2, field by field."""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

import msgspec
import pytest

from a2e_host.chains.messages import (
    ChainAccepted,
    ChainAttach,
    ChainCancel,
    ChainDetach,
    ChainDetached,
    ChainEvent,
    ChainNode,
    ChainRequest,
    ChainResponse,
    RetryPolicy,
    TraceContext,
    chain_codec,
)
from a2e_host.chains.run_messages import RunGet, RunGetResponse, RunList, RunListResponse
from a2e_host.errors import ChainFailure
from a2e_host.messages import (
    Capability,
    ErrorMessage,
    HandshakeRequest,
    HandshakeResponse,
    Message,
    Ping,
    Pong,
    Shutdown,
    new_chain_id,
    new_id,
)

AUTO_ID = "auto UUID"
AUTO_TS = "auto time"
AUTO_HEX8 = "auto hex[:8]"
REQUIRED = "required"

ENVELOPE = [
    ("id", str, AUTO_ID),
    ("version", str, "1.0"),
    ("ts", float, AUTO_TS),
]

# (field, type, default) in wire order after ``type``: the seed's tables (chain/*,
# ChainNode) and PROTOCOL.md §2 (core messages, after the A2E SDK's models).
TABLES: dict[type[Any], list[tuple[str, Any, Any]]] = {
    ChainRequest: ENVELOPE + [
        ("session_id", str, ""),
        ("chain_id", str, AUTO_HEX8),
        ("nodes", list[ChainNode], []),
        ("entry_node", str, ""),
        ("initial_input", dict[str, Any], {}),
        ("correlation_id", str, ""),
        ("streaming", bool, True),
        ("timeout", int, 300),  # left out: min(300, max_timeout) (ChainRequest.timeout_within)
        ("include_outputs", bool, True),  # extension (PROTOCOL.md §5)
        ("event_outputs", bool, True),  # extension (PROTOCOL.md §5)
        ("cache", bool, False),  # extension (PROTOCOL.md §5 Recovery)
        ("durable", bool, False),  # extension (PROTOCOL.md §5 Durable runs)
        ("idempotency_key", str, ""),  # extension
        ("retention", int, 0),  # extension
        ("trace_context", TraceContext | None, None),  # extension (§5 Trace context)
        ("secrets", dict[str, str], {}),  # extension (PROTOCOL.md §5 Secrets)
    ],
    ChainEvent: ENVELOPE + [
        ("kind", str, "status"),
        ("req_id", str, ""),
        ("data", dict[str, Any], {}),
        ("seq", int, 0),
        ("node_id", str, ""),
        ("phase", str, "start"),
        ("output", Any, None),
        ("error", str, ""),
    ],
    ChainResponse: ENVELOPE + [
        ("req_id", str, ""),
        ("chain_id", str, ""),
        ("success", bool, False),
        ("outputs", dict[str, Any], {}),
        ("final_output", Any, None),
        ("duration_ms", int, 0),
        ("nodes_run", int, 0),
        ("error", ChainFailure | None, None),
    ],
    ChainFailure: [  # chain/resp.error (PROTOCOL.md §5)
        ("code", str, REQUIRED),
        ("message", str, ""),
        ("node_id", str, ""),
        ("retryable", bool, False),
        ("details", dict[str, Any], {}),
    ],
    ChainNode: [
        ("node_id", str, REQUIRED),
        ("kind", str, REQUIRED),
        ("name", str, ""),
        ("input", dict[str, Any], {}),
        ("input_map", dict[str, str], {}),
        ("condition", str, ""),
        ("true_node", str, ""),
        ("false_node", str, ""),
        ("items_path", str, ""),
        ("map_node", str, ""),
        ("next_node", str, ""),
        ("on_error", str, "abort"),
        ("retry", RetryPolicy | None, None),  # extension (PROTOCOL.md §5 Recovery)
        ("timeout", float | None, None),  # extension
        ("fallback", str, ""),  # extension
        ("cache", bool, False),  # extension
        ("resume", str, ""),  # extension (PROTOCOL.md §5 Resume)
    ],
    HandshakeRequest: ENVELOPE + [
        ("agent_id", str, ""),
        ("agent_caps", list[str], []),
        ("auth_token", str, ""),
        ("limits", dict[str, Any], {}),  # each value checked per ceiling, so errors name it
    ],
    HandshakeResponse: ENVELOPE + [
        ("req_id", str, ""),
        ("session_id", str, AUTO_ID),
        ("accepted_caps", list[Capability], []),
        ("max_parallel", int, 4),
        ("ok", bool, True),
        ("reason", str, ""),
    ],
    Capability: [
        ("capability", str, REQUIRED),
        ("enabled", bool, True),
        ("metadata", dict[str, Any], {}),
    ],
    Ping: ENVELOPE,
    Pong: ENVELOPE + [("req_id", str, ""), ("uptime_seconds", float, 0.0)],
    Shutdown: ENVELOPE + [("timeout", int, 10)],
    ErrorMessage: ENVELOPE + [
        ("req_id", str, ""),
        ("code", str, REQUIRED),
        ("message", str, ""),
        ("detail", dict[str, Any], {}),
        ("retryable", bool, False),
        ("capability_name", str, ""),
    ],
    ChainCancel: ENVELOPE + [("session_id", str, ""), ("req_id", str, ""), ("run_id", str, "")],
}

TAGS = {
    "handshake/req": HandshakeRequest,
    "handshake/resp": HandshakeResponse,
    "ping": Ping,
    "pong": Pong,
    "shutdown": Shutdown,
    "error": ErrorMessage,
    "chain/req": ChainRequest,
    "chain/event": ChainEvent,
    "chain/resp": ChainResponse,
    "chain/cancel": ChainCancel,
    "chain/accepted": ChainAccepted,
    "chain/attach": ChainAttach,
    "chain/detach": ChainDetach,
    "chain/detached": ChainDetached,
    "run/list": RunList,
    "run/list/resp": RunListResponse,
    "run/get": RunGet,
    "run/get/resp": RunGetResponse,
}

HEX32 = re.compile(r"^[0-9a-f]{32}$")


def _wire_fields(cls: type[Any]) -> list[msgspec.structs.FieldInfo]:
    """The fields a message writes: all but the input-only ``a2e`` alias."""
    return [f for f in msgspec.structs.fields(cls) if f.name != "a2e"]


def test_message_types_map_every_tag_to_its_struct() -> None:
    assert chain_codec.types == TAGS
    for tag, cls in TAGS.items():
        assert cls.__struct_config__.tag == tag
        assert cls.__struct_config__.tag_field == "type"


@pytest.mark.parametrize("cls", list(TABLES), ids=lambda c: c.__name__)
def test_fields_types_and_defaults_follow_the_tables(cls: type[Any]) -> None:
    fields = _wire_fields(cls)
    assert [f.name for f in fields] == [row[0] for row in TABLES[cls]]
    for field, (name, annotation, default) in zip(fields, TABLES[cls], strict=True):
        assert field.type == annotation, name
        if default == REQUIRED:
            assert field.required, name
        elif default == AUTO_ID:
            assert field.default_factory is new_id, name
        elif default == AUTO_TS:
            assert field.default_factory is time.time, name
        elif default == AUTO_HEX8:
            assert field.default_factory is new_chain_id, name
        else:
            assert not field.required, name
            value = (
                field.default
                if field.default is not msgspec.NODEFAULT
                else field.default_factory()
            )
            assert value == default and type(value) is type(default), name


def test_envelope_defaults_are_a_fresh_uuid4_hex_version_1_0_and_now() -> None:
    before = time.time()
    a, b = ChainEvent(), ChainEvent()
    after = time.time()
    assert HEX32.match(a.id) and HEX32.match(b.id)
    assert a.id != b.id
    parsed = uuid.UUID(hex=a.id)
    assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
    assert a.version == "1.0"
    assert before <= a.ts <= b.ts <= after


def test_new_id_sets_the_uuid4_version_and_variant_bits_every_time() -> None:
    for _ in range(200):
        value = new_id()
        assert HEX32.match(value)
        assert value[12] == "4"
        assert value[16] in "89ab"


@pytest.mark.parametrize("given", [None, ""], ids=["absent", "empty"])
def test_chain_id_defaults_to_8_hex_digits_when_absent_or_empty(given: str | None) -> None:
    body = b'{"type":"chain/req"}' if given is None else b'{"type":"chain/req","chain_id":""}'
    decoded = msgspec.json.decode(body, type=ChainRequest)
    built = ChainRequest() if given is None else ChainRequest(chain_id=given)
    for req in (decoded, built):
        assert re.fullmatch(r"[0-9a-f]{8}", req.chain_id), req.chain_id
    assert ChainRequest(chain_id="abc123").chain_id == "abc123"


def test_messages_encode_type_first_and_every_field_even_defaults() -> None:
    event = ChainEvent(id="e1", ts=1.5, req_id="r1", node_id="n", seq=3)
    assert msgspec.json.encode(event) == (
        b'{"type":"chain/event","id":"e1","version":"1.0","ts":1.5,"kind":"status",'
        b'"req_id":"r1","data":{},"seq":3,"node_id":"n","phase":"start","output":null,'
        b'"error":""}'
    )


def test_the_a2e_alias_is_not_written_when_unset() -> None:
    assert b"a2e" not in msgspec.json.encode(Ping(id="p", ts=0.0))


def test_every_message_class_is_a_tagged_envelope() -> None:
    for cls in TAGS.values():
        assert issubclass(cls, Message)
        assert cls.TYPE == cls.__struct_config__.tag
