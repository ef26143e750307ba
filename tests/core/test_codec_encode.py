"""Encoding: compact one-line JSON, U+2028/U+2029 escaped, no bare NaN (PROTOCOL.md §8)."""

from __future__ import annotations

import json
import math

import pytest

from a2e_host.chains.messages import ChainEvent, ChainResponse, chain_codec
from a2e_host.codec import encode_line, encode_message, encode_value, has_non_finite
from a2e_host.messages import Ping


def test_messages_encode_as_compact_single_line_json() -> None:
    msg = ChainResponse(id="r", ts=2.0, req_id="q", outputs={"a": [1, {"b": "c d"}]})
    data = encode_message(msg)
    assert data == (
        b'{"type":"chain/resp","id":"r","version":"1.0","ts":2.0,"req_id":"q","chain_id":"",'
        b'"success":false,"outputs":{"a":[1,{"b":"c d"}]},"final_output":null,'
        b'"duration_ms":0,"nodes_run":0,"error":null}'
    )


def test_encode_line_ends_with_exactly_one_newline() -> None:
    line = encode_line(Ping(id="p", ts=0.0))
    assert line == b'{"type":"ping","id":"p","version":"1.0","ts":0.0}\n'
    assert line.count(b"\n") == 1


def test_line_and_paragraph_separators_are_escaped_and_decode_back() -> None:
    text = "a\u2028b\u2029c\nd"
    data = encode_message(ChainEvent(id="e", ts=0.0, output=text, error="\u2028"))
    assert "\u2028".encode() not in data and "\u2029".encode() not in data
    assert b"\n" not in data
    assert b"a\\u2028b\\u2029c\\nd" in data
    decoded = chain_codec.decode(data)
    assert isinstance(decoded, ChainEvent)
    assert (decoded.output, decoded.error) == (text, "\u2028")
    assert len(data.decode().splitlines()) == 1


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_encode_as_null_never_bare(value: float) -> None:
    data = encode_message(ChainEvent(id="e", ts=0.0, output={"x": [value]}))
    assert b"NaN" not in data and b"Infinity" not in data
    assert json.loads(data)["output"] == {"x": [None]}
    assert encode_value([value]) == b"[null]"


def test_encode_value_matches_the_bytes_inside_the_message() -> None:
    output = {"t": "\u2029", "n": [1, 2.5, None], "big": 2**80}
    assert encode_value(output) in encode_message(ChainEvent(id="e", ts=0.0, output=output))
    assert encode_value(output) == (
        b'{"t":"\\u2029","n":[1,2.5,null],"big":1208925819614629174706176}'
    )


def test_encode_value_rejects_values_that_are_not_json() -> None:
    with pytest.raises(TypeError):
        encode_value({"x": object()})


def test_non_bmp_characters_are_written_as_utf8() -> None:
    data = encode_message(ChainEvent(id="e", ts=0.0, output="\U0001f600"))
    assert "\U0001f600".encode() in data


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": [1, 2.0, "x", None, True]}, False),
        ({"a": [1, {"b": (math.nan,)}]}, True),
        ([[[-math.inf]]], True),
        (math.inf, True),
        ({"k": "nan"}, False),
        ([], False),
    ],
)
def test_has_non_finite_finds_nan_and_infinity_at_any_depth(value: object, expected: bool) -> None:
    assert has_non_finite(value) is expected


def test_has_non_finite_walks_deep_nesting_without_recursion() -> None:
    deep: object = math.nan
    for _ in range(100_000):
        deep = [deep]
    assert has_non_finite(deep) is True
