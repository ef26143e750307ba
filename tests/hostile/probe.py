"""The probe session of the hostile suite: ``python -m tests.hostile.probe URL [TOKEN]``.

A separate process, so that the work the hostile client does (building, sending and
decoding large messages) never delays the probe's pings: what it measures is the host
alone. It opens one WebSocket session (handshake, with ``TOKEN`` when given) and prints
``ready`` once the host answered a first ``ping``. Then it obeys one command per stdin
line:

* ``start``: forget what was recorded and ping every :data:`INTERVAL` seconds, one ping
  at a time, recording how long each took (a ping unanswered after
  :data:`PING_TIMEOUT` seconds is counted unanswered, and the next one is sent);
  ``started`` is printed when the first ping of the run has been sent;
* ``stop``: stop pinging and print one JSON line:
  ``{"latencies_ms": [float, …], "unanswered": int, "error": str}`` (``error`` is
  ``""`` unless the connection failed);
* EOF: exit.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

INTERVAL = 0.02
"""Seconds between the start of one ping and the start of the next."""

PING_TIMEOUT = 5.0
"""Seconds after which a ping counts as unanswered."""


class Probe:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.n = 0

    async def handshake(self, token: str) -> None:
        hello: dict[str, Any] = {"type": "handshake/req", "id": "probe-h", "agent_id": "probe",
                                 "agent_caps": ["chains"]}
        if token:
            hello["auth_token"] = token
        await self.ws.send(json.dumps(hello))
        resp = json.loads(await asyncio.wait_for(self.ws.recv(), PING_TIMEOUT))
        if resp.get("type") != "handshake/resp" or not resp.get("ok"):
            raise RuntimeError(f"probe handshake refused: {resp}")

    async def ping(self) -> float | None:
        """One ping's latency in ms, or None when unanswered within PING_TIMEOUT."""
        self.n += 1
        key = f"probe-{self.n}"
        started = time.perf_counter()
        await self.ws.send(json.dumps({"type": "ping", "id": key}))
        deadline = started + PING_TIMEOUT
        while (left := deadline - time.perf_counter()) > 0:
            try:
                message = json.loads(await asyncio.wait_for(self.ws.recv(), left))
            except TimeoutError:
                return None
            if message.get("type") == "pong" and message.get("req_id") == key:
                return (time.perf_counter() - started) * 1000
        return None

    async def record(self, stop: asyncio.Event) -> dict[str, Any]:
        latencies: list[float] = []
        unanswered = 0
        error = ""
        first = True
        try:
            while first or not stop.is_set():
                started = time.perf_counter()
                task = asyncio.ensure_future(self.ping())
                if first:
                    print("started", flush=True)
                    first = False
                latency = await task
                if latency is None:
                    unanswered += 1
                else:
                    latencies.append(latency)
                rest = INTERVAL - (time.perf_counter() - started)
                if rest > 0:
                    try:
                        await asyncio.wait_for(stop.wait(), rest)
                    except TimeoutError:
                        pass
        except Exception as exc:  # the host died or closed: reported, not raised
            error = f"{type(exc).__name__}: {exc}"
        return {"latencies_ms": latencies, "unanswered": unanswered, "error": error}


async def serve_commands(url: str, token: str) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        async with connect(url, max_size=None, ping_interval=None) as ws:
            probe = Probe(ws)
            await probe.handshake(token)
            if await probe.ping() is None:
                raise RuntimeError("the host did not answer the probe's first ping")
            print("ready", flush=True)
            while command := (await reader.readline()).strip():
                if command != b"start":
                    continue
                stop = asyncio.Event()
                recording = asyncio.ensure_future(probe.record(stop))
                while (await reader.readline()).strip() not in (b"stop", b""):
                    pass
                stop.set()
                print(json.dumps(await recording), flush=True)
    except Exception as exc:
        print(json.dumps({"latencies_ms": [], "unanswered": 0,
                          "error": f"{type(exc).__name__}: {exc}"}), flush=True)


def main(argv: list[str]) -> None:
    asyncio.run(serve_commands(argv[0], argv[1] if len(argv) > 1 else ""))


if __name__ == "__main__":
    main(sys.argv[1:])
