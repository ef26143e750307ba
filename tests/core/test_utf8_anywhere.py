"""A message that is not UTF-8 is ``parse_error`` wherever the bad bytes are, fields the
host does not know included (issue 13.5; PROTOCOL.md §2); on WebSocket such a text frame
closes with 1007 (PROTOCOL.md §8)."""

from __future__ import annotations

import json

import anyio
import pytest
from websockets.asyncio.client import connect

from a2e_host.chains.messages import ChainRequest, chain_codec
from a2e_host.exceptions import ParseError
from a2e_host.messages import Ping
from tests.support.process import CLI, WAIT, open_host
from tests.support.ws import serving_argv as serving
from tests.support.ws import wait_closed

ISSUE_LINE = b'{"type":"ping","id":"x4","version":"1.0","ts":1,"z":"\xff\xfe"}'


@pytest.mark.parametrize(
    ("data", "offset"),
    [
        (ISSUE_LINE, 53),
        (b'{"type":"ping","id":"x4","z":{"\xc3":1}}', 31),  # a truncated sequence in a key
        (b'{"type":"ping","z":[1,{"a":"\xed\xa0\x80"}],"id":"x"}', 28),  # an encoded surrogate
        (b'{"type":"chain/req","id":"c","nodes":[],"extra":"\xc0\xaf"}', 49),  # overlong "/"
    ],
)
def test_invalid_utf8_in_a_field_the_host_skips_is_a_parse_error(data: bytes, offset: int) -> None:
    with pytest.raises(ParseError) as info:
        chain_codec.decode(data)
    err = info.value
    assert (err.code, err.req_id, err.detail) == ("parse_error", "", {"offset": offset})
    assert f"byte 0x{data[offset]:02x} at offset {offset}" in err.message


def test_valid_utf8_anywhere_still_decodes() -> None:
    msg = chain_codec.decode('{"type":"ping","id":"é","z":{"ключ":"值 🙂"}}'.encode())
    assert isinstance(msg, Ping) and msg.id == "é"
    req = chain_codec.decode(b'{"type":"chain/req","id":"c","nodes":[],"note":"caf\xc3\xa9"}')
    assert isinstance(req, ChainRequest)


@pytest.mark.asyncio
async def test_the_issue_line_gets_parse_error_on_stdio_and_the_host_goes_on() -> None:
    host = await open_host([*CLI, "stdio"])
    async with anyio.create_task_group() as tg:
        tg.start_soon(host.collect_stderr)
        await host.send(ISSUE_LINE, {"type": "ping", "id": "after"})
        refused = await host.receive()
        pong = await host.receive()
        await host.process.stdin.aclose()  # type: ignore[union-attr]
        assert await host.wait() == 0
    assert (refused["type"], refused["code"], refused["req_id"]) == ("error", "parse_error", "")
    assert "not valid UTF-8 (byte 0xff at offset 53)" in refused["message"]
    assert (pong["type"], pong["req_id"]) == ("pong", "after")


@pytest.mark.asyncio
async def test_invalid_utf8_in_an_unknown_field_closes_a_websocket_with_1007() -> None:
    async with serving(CLI, "--port", "0") as (url, _), connect(url) as bystander:
        async with connect(url) as ws:
            await ws.send(ISSUE_LINE, text=True)
            assert await wait_closed(ws) == 1007
        await bystander.send(json.dumps({"type": "ping", "id": "still"}))
        with anyio.fail_after(WAIT):
            assert json.loads(await bystander.recv())["req_id"] == "still"
