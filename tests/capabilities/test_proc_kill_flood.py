"""A flood of ``proc/kill/req`` for one process (PROTOCOL.md §10) costs the host bounded
work: one kill is under way per process, at most ``MAX_WAITING_KILLS`` more wait for it
(each answered when it ends), the rest are ``busy``; every request is answered exactly
once and the process ends. Over a real WebSocket server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from a2e_proc.kills import MAX_WAITING_KILLS
from websockets.asyncio.client import connect

from tests.support.process import CLI
from tests.support.procs import PROC_FLAGS, ProcWire, gone, kill_if_alive
from tests.support.ws import receive, serving_argv

pytestmark = pytest.mark.timeout(90)

KILLS = 500
#: A shell (and its sleep, which inherits the ignored signal) that ignores SIGHUP.
DEAF = 'trap "" HUP; echo ready; sleep 30'


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


@pytest.mark.asyncio
async def test_a_flood_of_kills_to_a_process_ignoring_them_is_bounded() -> None:
    async with serving_argv(CLI, "--port", "0", *PROC_FLAGS) as (url, host), \
            connect(url, subprotocols=["a2e.v1"]) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps({"type": "handshake/req", "id": "h",
                                  "agent_caps": ["proc"]}))
        assert (await receive(ws))["ok"]

        async def send(message: dict[str, Any]) -> None:
            await ws.send(json.dumps(message))

        wire = ProcWire(send, lambda: receive(ws))
        shell = await wire.spawn(["sh", "-c", DEAF])
        assert shell["ok"], shell
        try:
            await wire.until_output(shell["req_id"], "ready\n")
            before = rss_kib(host.process.pid)
            ids = [f"kill-{n}" for n in range(KILLS)]
            for req_id in ids:  # all sent before any answer is read
                await send({"type": "proc/kill/req", "id": req_id,
                            "proc_id": shell["proc_id"], "signal": "SIGHUP"})
            with anyio.fail_after(60):
                while not all(i in wire.replies for i in ids):
                    await wire._take()
            after = rss_kib(host.process.pid)
            events = await wire.until_exit(shell["req_id"])
            # nothing more arrives for them: a status round trip passes no second answer
            status = await wire.request({"type": "proc/status/req",
                                         "proc_id": shell["proc_id"]})
        finally:
            kill_if_alive(shell["pid"])
    answers = [wire.replies.pop(i) for i in ids]
    assert not set(wire.replies) & set(ids)  # each answered exactly once
    kinds = [(a["type"], a.get("ok"), a.get("code")) for a in answers]
    waited = [a for a in answers if a["type"] == "proc/kill/resp"]
    busy = [a for a in answers if a["type"] == "error" and a["code"] == "busy"]
    assert len(waited) + len(busy) == KILLS, kinds
    # the first kill and the ones queued on it before the process ended; no more
    assert 1 <= len(waited) <= 1 + MAX_WAITING_KILLS
    assert len(busy) >= KILLS - 1 - MAX_WAITING_KILLS
    assert all(a["ok"] and a["state"] != "running" for a in waited), waited
    assert "wait for a proc/kill/resp" in busy[0]["message"]
    assert events[-1]["kind"] == "exit"
    assert status["status"] != "running"
    assert gone(shell["pid"])
    assert after - before < 32 * 1024  # KiB: no task per kill
