"""NDJSON framing: lines, the byte cap, resynchronisation, chunking (PROTOCOL.md §1, §6)."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from a2e_host.chains.messages import ChainEvent, chain_codec
from a2e_host.codec import encode_line
from a2e_host.framing import LineSplitter, LineTooLong
from a2e_host.messages import Ping

MiB = 1024 * 1024


def _feed(splitter: LineSplitter, data: bytes, chunk: int) -> list[bytes | LineTooLong]:
    out: list[bytes | LineTooLong] = []
    for i in range(0, len(data), chunk):
        out += splitter.receive_data(data[i : i + chunk])
    return out + splitter.close()


def test_lines_come_out_without_their_newlines_in_order() -> None:
    s = LineSplitter(100)
    assert s.receive_data(b'{"a":1}\n{"b":2}\n{"c"') == [b'{"a":1}', b'{"b":2}']
    assert s.receive_data(b":3}\n") == [b'{"c":3}']
    assert s.close() == []


def test_crlf_is_accepted_and_a_bare_cr_inside_is_kept() -> None:
    s = LineSplitter(100)
    assert s.receive_data(b'{"a":1}\r\n{"b":\r2}\r') == [b'{"a":1}']
    assert s.receive_data(b"\n") == [b'{"b":\r2}']


def test_empty_and_whitespace_lines_are_ignored() -> None:
    s = LineSplitter(100)
    assert s.receive_data(b"\n\r\n  \t\n{}\n\n") == [b"{}"]


def test_u2028_and_u2029_inside_strings_do_not_break_lines() -> None:
    raw = '{"t":"a\u2028b\u2029c"}\n'.encode()
    assert LineSplitter(100).receive_data(raw) == [raw[:-1]]
    line = encode_line(ChainEvent(id="e", ts=0.0, output="x\u2028y"))
    [got] = LineSplitter(1000).receive_data(line)
    assert isinstance(got, bytes)
    assert chain_codec.decode(got) == ChainEvent(id="e", ts=0.0, output="x\u2028y")


def test_a_final_line_without_newline_is_returned_by_close() -> None:
    s = LineSplitter(100)
    assert s.receive_data(b'{"a":1}') == []
    assert s.close() == [b'{"a":1}']
    assert s.close() == []


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"x" * 10, b"x" * 10),
        (b"x" * 10 + b"\r", b"x" * 10),
        (b"x" * 11, LineTooLong(size=11, limit=10)),
        (b"x" * 11 + b"\r", LineTooLong(size=11, limit=10)),
        (b"x" * 10 + b"\r\r", LineTooLong(size=11, limit=10)),
        (b"x" * 500, LineTooLong(size=500, limit=10)),
    ],
)
def test_the_cap_counts_line_bytes_without_the_line_ending(
    line: bytes, expected: bytes | LineTooLong
) -> None:
    for chunk in (1, 3, 1000):
        assert _feed(LineSplitter(10), line + b"\n", chunk) == [expected]
        assert _feed(LineSplitter(10), line, chunk) == [expected]  # at close()


def test_an_over_long_line_yields_one_refusal_and_the_reader_resynchronises() -> None:
    s = LineSplitter(8)
    out = s.receive_data(b'{"ok":1}\n' + b"y" * 30)
    assert out == [b'{"ok":1}']
    assert s.receive_data(b"z" * 30) == []
    assert s.receive_data(b'zz\n{"ok":2}\n') == [LineTooLong(size=62, limit=8), b'{"ok":2}']


def test_a_20_mb_line_under_a_16_mib_cap_is_one_refusal_then_the_next_message_decodes() -> None:
    s = LineSplitter(16 * MiB)
    out: list[bytes | LineTooLong] = []
    chunk = b"a" * (64 * 1024)
    total = 20 * 1000 * 1000
    out += s.receive_data(b'{"type":"chain/req","pad":"')
    fed = 0
    while fed < total:
        out += s.receive_data(chunk)
        fed += len(chunk)
    out += s.receive_data(b'"}\n' + encode_line(Ping(id="after", ts=1.0)))
    size = len(b'{"type":"chain/req","pad":"') + fed + 2
    assert out[:1] == [LineTooLong(size=size, limit=16 * MiB)]
    assert len(out) == 2 and isinstance(out[1], bytes)
    assert chain_codec.decode(out[1]) == Ping(id="after", ts=1.0)


def test_memory_held_for_an_over_long_line_is_bounded_by_the_cap() -> None:
    cap = 1 * MiB
    s = LineSplitter(cap)
    chunk = b"b" * (64 * 1024)
    tracemalloc.start()
    try:
        for _ in range(320):  # 20 MiB, no newline
            assert s.receive_data(chunk) == []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * cap
    assert s.receive_data(b"\n") == [LineTooLong(size=320 * len(chunk), limit=cap)]


def test_max_line_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_line_bytes"):
        LineSplitter(0)


# A stream of lines: JSON-ish lines, blank ones, CRLF endings, over-long ones, separators.
_line = st.one_of(
    st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")),
    st.sampled_from([b"", b" ", b"\r", b"{}", '{"t":"\u2028\u2029"}'.encode(), b"x" * 40]),
)
_ending = st.sampled_from([b"\n", b"\r\n"])
_stream = st.tuples(
    st.lists(st.tuples(_line, _ending), max_size=12), _line
).map(lambda t: b"".join(a + b for a, b in t[0]) + t[1])


def _model(data: bytes, cap: int) -> list[bytes | LineTooLong]:
    """What the splitter must return, from the whole stream at once."""
    out: list[bytes | LineTooLong] = []
    for line in data.split(b"\n"):
        if line.endswith(b"\r"):
            line = line[:-1]
        if len(line) > cap:
            out.append(LineTooLong(size=len(line), limit=cap))
        elif line.strip(b" \t\r"):
            out.append(line)
    return out


@settings(max_examples=150, deadline=None)
@given(_stream, st.lists(st.integers(min_value=0, max_value=700), max_size=20),
       st.integers(min_value=1, max_value=30))
def test_any_chunking_of_the_input_gives_the_same_result(
    data: bytes, cuts: list[int], cap: int
) -> None:
    bounds = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    s = LineSplitter(cap)
    out: list[bytes | LineTooLong] = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        out += s.receive_data(data[a:b])
    out += s.close()
    assert out == _model(data, cap)
