"""The client's one line reader and its one task-group unwrap: lines from a child's
stdout and stderr, and the single error a client context manager raises."""

from __future__ import annotations

import json

import anyio
import pytest

from a2e_host.client import ConnectionLost, HostError, spawn_stdio
from a2e_host.client.errors import unwrap_group
from a2e_host.client.lines import LineReader
from a2e_host.framing import LineTooLong
from a2e_host.messages import ErrorMessage
from tests.support.process import STARTUP


class Chunks:
    """A byte stream that gives these chunks, then ends with ``end``."""

    def __init__(self, *chunks: bytes, end: type[Exception] = anyio.EndOfStream) -> None:
        self.chunks = list(chunks)
        self.end = end
        self.reads_after_end = 0

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self.chunks:
            return self.chunks.pop(0)
        self.reads_after_end += 1
        raise self.end


async def read_all(reader: LineReader) -> list[bytes | LineTooLong]:
    lines: list[bytes | LineTooLong] = []
    while True:
        try:
            lines.append(await reader.receive())
        except anyio.EndOfStream:
            return lines


@pytest.mark.asyncio
async def test_lines_split_across_chunks_come_out_whole_and_in_order() -> None:
    stream = Chunks(b'{"a":', b' 1}\n{"b": 2}\r\n\n  \n{"c"', b": 3}\n")
    assert await read_all(LineReader(stream, 100)) == [b'{"a": 1}', b'{"b": 2}', b'{"c": 3}']


@pytest.mark.asyncio
async def test_a_last_line_without_newline_comes_when_the_stream_ends() -> None:
    stream = Chunks(b"one\ntw", b"o")
    reader = LineReader(stream, 100)
    assert await read_all(reader) == [b"one", b"two"]
    with pytest.raises(anyio.EndOfStream):  # ended for good, the stream is not read again
        await reader.receive()
    assert stream.reads_after_end == 1


@pytest.mark.asyncio
async def test_a_line_over_the_cap_is_one_refusal_and_the_next_line_is_read() -> None:
    stream = Chunks(b"short\n" + b"x" * 30, b"y" * 30 + b"\nafter\n")
    assert await read_all(LineReader(stream, 40)) == [
        b"short", LineTooLong(size=60, limit=40), b"after",
    ]


@pytest.mark.asyncio
@pytest.mark.parametrize("end", [anyio.BrokenResourceError, anyio.ClosedResourceError])
async def test_a_broken_or_closed_stream_ends_the_lines_as_eof_does(end: type[Exception]) -> None:
    assert await read_all(LineReader(Chunks(b"kept\npart", end=end), 100)) == [b"kept", b"part"]


@pytest.mark.asyncio
async def test_iterating_gives_the_decoded_lines_that_fit() -> None:
    stream = Chunks(b"caf\xc3\xa9\n" + b"z" * 50 + b"\nbad \xff byte\n")
    assert [text async for text in LineReader(stream, 20)] == ["café", "bad \ufffd byte"]


def test_a_task_group_error_of_one_is_raised_as_itself() -> None:
    error = HostError(ErrorMessage(code="busy", message="too many chains"))
    with pytest.raises(HostError) as info, unwrap_group():
        raise BaseExceptionGroup("task group", [error])
    assert info.value is error
    assert info.value.__suppress_context__


def test_a_task_group_error_of_several_stays_a_group() -> None:
    with pytest.raises(BaseExceptionGroup) as info, unwrap_group():
        raise BaseExceptionGroup("task group", [ValueError("a"), KeyError("b")])
    assert [type(e) for e in info.value.exceptions] == [ValueError, KeyError]


def test_an_error_outside_a_group_passes_unchanged() -> None:
    with pytest.raises(ValueError, match="plain"), unwrap_group():
        raise ValueError("plain")


@pytest.mark.asyncio
async def test_a_host_line_over_the_clients_cap_ends_the_connection_naming_the_fix() -> None:
    with pytest.raises(ConnectionLost) as info:
        async with spawn_stdio(["a2e-host", "stdio"], agent_caps=["chains"],
                               stderr="capture", max_line_bytes=64, handshake_timeout=STARTUP):
            pass  # the handshake/resp alone is longer than 64 bytes
    text = str(info.value)
    assert "the host sent a message this client cannot read" in text
    assert "over this client's 64; raise max_line_bytes in spawn_stdio" in text


@pytest.mark.asyncio
async def test_a_spawned_hosts_log_lines_are_captured_one_per_line() -> None:
    async with spawn_stdio(["a2e-host", "stdio", "--log-level", "info", "--log-format", "json"],
                           agent_caps=["chains"], stderr="capture",
                           handshake_timeout=STARTUP) as client:
        await client.ping()
        stream = client.transport
    events = [json.loads(line)["event"] for line in stream.stderr_lines]  # type: ignore[attr-defined]
    assert events[:2] == ["connection opened", "session opened"]
    assert events[-1] == "connection closed"
