"""A stand-in host for the end-to-end harness: the minimal reference scheduler behind a
bare stdio / WebSocket front-end, with the same command line as ``a2e-host``::

    python -m bench.fake_host stdio --tools bench
    python -m bench.fake_host serve --host 127.0.0.1 --port 8765 --tools bench

It speaks just enough of PROTOCOL.md (§1 framing, §2 handshake) to run the workloads:
it is the *wire* yardstick (the reference's events/s and latencies over a real pipe or
socket) and lets ``bench.e2e`` be tested before the real CLI exists. Not a host.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

import msgspec

from bench import reference_minimal

_dec = msgspec.json.Decoder()
_enc = msgspec.json.Encoder()


def _handshake_resp(msg: dict[str, Any], sid: str) -> bytes:
    return _enc.encode({
        "type": "handshake/resp", "id": os.urandom(16).hex(), "version": "1.0",
        "ts": time.time(), "req_id": msg.get("id", ""), "session_id": sid,
        "accepted_caps": [{"capability": "chains", "enabled": True, "metadata": {}}],
        "max_parallel": 4, "ok": True, "reason": "",
    })


async def _stdio() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=512 * 2**20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = sys.stdout.buffer
    sid = os.urandom(16).hex()

    def send(data: bytes) -> None:
        out.write(data + b"\n")
        out.flush()

    while line := await reader.readline():
        msg = _dec.decode(line)
        if msg.get("type") == "handshake/req":
            send(_handshake_resp(msg, sid))
        elif msg.get("type") == "chain/req":
            send(await reference_minimal.run_request(line, sink=send, fast=True))


async def _serve(host: str, port: int) -> None:
    from websockets.asyncio.server import serve
    from websockets.typing import Subprotocol

    async def handler(ws: Any) -> None:
        sid = os.urandom(16).hex()
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()

        async def writer() -> None:
            while (data := await queue.get()) is not None:
                await ws.send(data.decode())

        wtask = asyncio.create_task(writer())
        try:
            async for frame in ws:
                msg = _dec.decode(frame)
                if msg.get("type") == "handshake/req":
                    queue.put_nowait(_handshake_resp(msg, sid))
                elif msg.get("type") == "chain/req":
                    resp = await reference_minimal.run_request(
                        frame.encode() if isinstance(frame, str) else frame,
                        sink=queue.put_nowait, fast=True)
                    queue.put_nowait(resp)
        finally:
            queue.put_nowait(None)
            await wtask

    async with serve(handler, host, port, subprotocols=[Subprotocol("a2e.v1")], max_size=None,
                     compression=None) as server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.fake_host", allow_abbrev=False)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stdio", allow_abbrev=False)
    s.add_argument("--tools", default="bench")
    v = sub.add_parser("serve", allow_abbrev=False)
    v.add_argument("--host", default="127.0.0.1")
    v.add_argument("--port", type=int, default=8765)
    v.add_argument("--tools", default="bench")
    a = ap.parse_args()
    try:
        asyncio.run(_stdio() if a.cmd == "stdio" else _serve(a.host, a.port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
