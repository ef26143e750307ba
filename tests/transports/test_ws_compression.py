"""permessage-deflate: off unless configured (small frames on loopback: CPU, not bytes)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from a2e_host.config import load_config
from tests.support.ws import serving_sync

HOST = [sys.executable, "-m", "a2e_host", "serve", "--port", "0"]


@pytest.mark.parametrize(("env", "expected"), [({}, False), ({"A2E_WS_COMPRESSION": "on"}, True),
                                               ({"A2E_WS_COMPRESSION": "false"}, False)])
def test_ws_compression_setting_reads_from_the_environment(
    env: dict[str, str], expected: bool
) -> None:
    assert load_config(None, environ=env).ws_compression is expected


@pytest.mark.asyncio
async def test_deflate_is_declined_by_default_even_when_the_client_offers_it() -> None:
    with serving_sync(HOST) as url:
        async with connect(url, subprotocols=["a2e.v1"], compression="deflate") as ws:
            assert ws.response is not None
            assert ws.response.headers.get("Sec-WebSocket-Extensions") is None
            await ws.send('{"type":"ping","id":"p1"}')
            assert '"req_id":"p1"' in str(await ws.recv())


@pytest.mark.asyncio
async def test_deflate_is_accepted_when_configured(tmp_path: Path) -> None:
    config = tmp_path / "a2e.toml"
    config.write_text("ws_compression = true\n", encoding="utf-8")
    with serving_sync([*HOST, "--config", str(config)]) as url:
        async with connect(url, subprotocols=["a2e.v1"], compression="deflate") as ws:
            assert ws.response is not None
            assert "permessage-deflate" in ws.response.headers.get("Sec-WebSocket-Extensions", "")
