"""Issue 19, metrics and health: ``/metrics``, ``/healthz`` and ``/readyz`` on the real
``a2e-host serve``'s WebSocket port, read with a real HTTP client (urllib)."""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.support.process import WAIT
from tests.support.requests import chain, tool
from tests.support.ws import receive, reply, send, serving


def http_get(url: str) -> tuple[int, str, str]:
    """``(status, Content-Type, body)`` of a GET (an HTTP error status included)."""
    try:
        with urllib.request.urlopen(url, timeout=WAIT) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


async def get(ws_url: str, path: str) -> tuple[int, str, str]:
    return await anyio.to_thread.run_sync(http_get, "http" + ws_url[2:] + path)


def samples(text: str) -> dict[str, float]:
    """``name{labels}`` → value of every sample line of a Prometheus text exposition."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


async def handshake(ws: Any, caps: list[str], **limits: int) -> None:
    message: dict[str, Any] = {"type": "handshake/req", "id": "h", "agent_caps": caps}
    if limits:
        message["limits"] = limits
    await send(ws, message)
    assert (await receive(ws))["ok"]


@pytest.mark.asyncio
async def test_metrics_after_a_known_workload_have_exact_values() -> None:
    two = [tool("a", "echo", input={"v": 1}, next_node="b"), tool("b", "echo")]
    async with serving() as (url, _), connect(url) as ws:
        await handshake(ws, ["chains"], max_nodes=5)
        for i in range(3):
            await send(ws, chain(f"ok{i}", two))
            assert (await reply(ws))["success"] is True
        await send(ws, chain("f", [tool("x", "fail", input={"message": "no"})]))
        assert (await reply(ws))["error"]["code"] == "chain_node_error"
        six = [tool(f"n{i}", "echo") for i in range(6)]
        await send(ws, chain("big", six))
        assert (await reply(ws))["error"]["details"]["ceiling"] == "max_nodes"
        await send(ws, chain("long", two, timeout=10**7))
        assert (await reply(ws))["error"]["details"]["scope"] == "host"
        status, content_type, text = await get(url, "/metrics")
    assert (status, content_type) == (200, "text/plain; version=0.0.4; charset=utf-8")
    found = samples(text)
    assert {k: v for k, v in found.items() if not k.startswith("a2e_node_duration")} == {
        "a2e_chains_in_flight": 0,
        "a2e_chains_started_total": 4,
        'a2e_chains_finished_total{outcome="chain_node_error"}': 1,
        'a2e_chains_finished_total{outcome="ok"}': 3,
        "a2e_chain_events_total": 3 * 4 + 2,
        'a2e_refusals_total{ceiling="max_nodes",scope="session"}': 1,
        'a2e_refusals_total{ceiling="max_timeout",scope="host"}': 1,
        "a2e_outbox_backpressure_waits_total": 0,
        "a2e_sessions_open": 1,
        "a2e_connections_open": 1,
        "a2e_log_lines_dropped_total": 0,
    }
    assert found['a2e_node_duration_seconds_count{kind="tool",tool="echo"}'] == 6
    assert found['a2e_node_duration_seconds_count{kind="tool",tool="fail"}'] == 1
    assert found['a2e_node_duration_seconds_bucket{kind="tool",tool="echo",le="+Inf"}'] == 6
    assert "# TYPE a2e_node_duration_seconds histogram" in text


@pytest.mark.asyncio
async def test_readyz_is_503_during_the_grace_while_a_chain_finishes_healthz_stays_200(
    tmp_path: Path,
) -> None:
    release = tmp_path / "release"
    wait_for_file = "while [ ! -e release ]; do sleep 0.02; done; echo released"
    async with serving("--allow-proc", "sh", "--root", str(tmp_path)) as (url, host), \
            connect(url) as ws:
        assert await get(url, "/healthz") == (200, "text/plain; charset=utf-8", "ok\n")
        assert (await get(url, "/readyz"))[0::2] == (200, "ready\n")
        await handshake(ws, ["chains", "proc"])
        await send(ws, chain("w", [{"node_id": "p", "kind": "proc",
                                    "input": {"argv": ["sh", "-c", wait_for_file]}}]))
        event = await receive(ws)
        assert (event["node_id"], event["phase"]) == ("p", "start")
        host.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(WAIT):
            await host.wait_stderr("host shutting down")
        # the chain still runs in its grace: not ready, still alive, still in flight
        assert (await get(url, "/readyz"))[0::2] == (
            503, "not ready: the host is shutting down\n")
        assert (await get(url, "/healthz"))[0::2] == (200, "ok\n")
        assert samples((await get(url, "/metrics"))[2])["a2e_chains_in_flight"] == 1
        with pytest.raises(InvalidStatus) as refused:
            async with connect(url):
                pass
        assert refused.value.response.status_code == 503
        release.touch()
        response = await reply(ws)
        assert (response["req_id"], response["success"]) == ("w", True)
        assert json.dumps(response["outputs"]["p"]["stdout"]) == '"released\\n"'
