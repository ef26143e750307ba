"""Properties of the codec over arbitrary input (hypothesis): PROTOCOL.md §2 and §8."""

from __future__ import annotations

import math
from typing import Any

import msgspec
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from a2e_host.chains.messages import ChainEvent, chain_codec
from a2e_host.codec import encode_line
from a2e_host.exceptions import RemoteProtocolError
from a2e_host.framing import LineSplitter
from a2e_host.messages import Message

DOCUMENTED_CODES = {
    "parse_error",
    "invalid_message",
    "unknown_type",
    "schema_violation",
    "version_mismatch",
}

# Integers beyond 64 bits, up to the ~4,300 digits msgspec (and Python) convert.
BIG = 10**4299 - 1
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-BIG, max_value=BIG)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)

_field_values = st.one_of(json_values, st.sampled_from(["1.0", "2.0", "", "chain/req"]))
message_like = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(sorted(chain_codec.types)) | json_values,
        "id": st.text(max_size=4) | json_values,
        "version": st.sampled_from(["1.0", "1.5", "2.0", "x"]) | json_values,
        "a2e": st.sampled_from(["1.0", "3"]) | json_values,
        "nodes": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "node_id": st.text(max_size=3) | json_values,
                    "kind": st.sampled_from(["tool", "map"]) | json_values,
                    "input_map": st.dictionaries(st.text(max_size=3), _field_values),
                },
            ),
            max_size=3,
        )
        | json_values,
        "output": json_values,
        "timeout": st.integers() | json_values,
        "seq": json_values,
    },
).flatmap(
    lambda d: st.dictionaries(st.text(max_size=5), _field_values, max_size=3).map(
        lambda extra: {**extra, **d}
    )
)


def _mutated(data: bytes) -> st.SearchStrategy[bytes]:
    return st.tuples(st.integers(0, len(data)), st.integers(0, 8), st.binary(max_size=8)).map(
        lambda t: data[: t[0]] + t[2] + data[t[0] + t[1]:]
    )


any_bytes = st.one_of(
    st.binary(max_size=200),
    json_values.map(msgspec.json.encode),
    message_like.map(msgspec.json.encode),
    message_like.map(msgspec.json.encode).flatmap(_mutated),
    st.text().map(str.encode),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_bytes)
@example(b'{"type":"chain/req","version":"2.0"}')
@example(b'{"type":"ping","id":"\\ud800"}')
@example(b"[" * 100_000)
@example(b'{"type":"chain/event","output":' + b"9" * 5000 + b"}")
@example(b'{"type":"ping","type":"chain/req","nodes":3}')
def test_any_bytes_decode_to_a_message_or_a_documented_error(data: bytes) -> None:
    try:
        msg = chain_codec.decode(data)
    except RemoteProtocolError as err:
        assert err.code in DOCUMENTED_CODES
        assert isinstance(err.req_id, str)  # type: ignore[attr-defined]
        assert isinstance(err.message, str) and err.message
        if err.code == "schema_violation":
            assert err.detail["path"].startswith("$")
    else:
        assert isinstance(msg, Message)
        assert type(msg) is chain_codec.types[type(msg).TYPE]
        assert msg.a2e is msgspec.UNSET
        assert msg.version.partition(".")[0] == "1"


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values, types included (``True`` is not ``1``; ``-0.0`` keeps its sign)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


@settings(max_examples=150, deadline=None)
@given(json_values)
@example("\u2028\u2029\n\r\U0001f600")
@example(-(10**4299 - 1))
@example(2**64)
@example(-0.0)
@example(5e-324)
def test_any_json_output_round_trips_exactly_through_a_line(value: Any) -> None:
    event = ChainEvent(req_id="r", node_id="n", phase="done", seq=1, output=value)
    splitter = LineSplitter(max_line_bytes=1 << 20)
    [line] = splitter.receive_data(encode_line(event))
    assert isinstance(line, bytes)
    decoded = chain_codec.decode(line)
    assert isinstance(decoded, ChainEvent)
    assert _same(decoded.output, value)
    assert decoded == event
