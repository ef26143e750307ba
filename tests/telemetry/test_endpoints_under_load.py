"""Issue 19, metrics and health under load and attack, on one real ``a2e-host serve``:
exact counts after 200 concurrent chains over four connections while HTTP requests flood
the port, methods other than GET/HEAD, oversized headers, and ``/readyz`` while a host
with many connections shuts down."""

from __future__ import annotations

import signal
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from tests.support.process import WAIT
from tests.support.requests import chain, tool
from tests.support.ws import receive, send, serving

CONNECTIONS = 4
PER_CONNECTION = 50  # 200 chains; every tenth fails in its second node


def samples(text: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


async def http(port: int, head: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send one raw HTTP request; ``(status, headers lower-cased, body)`` of the answer."""
    with anyio.fail_after(WAIT):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(head)
            data = b""
            try:
                while True:
                    data += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass
    top, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = top.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split(" ")[1]), headers, body


def get(path: str, method: str = "GET", extra: str = "") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode("latin-1")


async def handshaken(ws: ClientConnection) -> None:
    await send(ws, {"type": "handshake/req", "id": "h", "agent_caps": ["chains"]})
    assert (await receive(ws))["ok"]


async def run_many(ws: ClientConnection, tag: str, results: dict[str, Any]) -> None:
    for i in range(PER_CONNECTION):
        second = tool("b", "fail", input={"message": "no"}) if i % 10 == 0 else tool("b", "echo")
        await send(ws, chain(f"{tag}-{i}", [tool("a", "echo", next_node="b"), second]))
    events: dict[str, int] = {}
    answered = 0
    while answered < PER_CONNECTION:
        message = await receive(ws)
        if message["type"] == "chain/event":
            events[message["req_id"]] = events.get(message["req_id"], 0) + 1
        else:
            assert message["type"] == "chain/resp", message
            assert message["req_id"] not in results, "a second chain/resp"
            results[message["req_id"]] = (message["success"], events.get(message["req_id"]))
            answered += 1


@pytest.mark.asyncio
async def test_exact_metrics_after_200_concurrent_chains_while_http_requests_flood_the_port(
) -> None:
    results: dict[str, Any] = {}
    flood: list[int] = []
    async with serving(env={"A2E_MAX_PARALLEL": str(PER_CONNECTION)}) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        wss = [await connect(url) for _ in range(CONNECTIONS)]
        try:
            for ws in wss:
                await handshaken(ws)

            async def hammer(i: int) -> None:
                path = ("/metrics", "/nope", "/healthz", "/metrics?x=1")[i % 4]
                flood.append((await http(port, get(path)))[0])

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for n, ws in enumerate(wss):
                        tg.start_soon(run_many, ws, f"c{n}", results)
                    for i in range(200):
                        tg.start_soon(hammer, i)
            status, headers, body = await http(port, get("/metrics"))
        finally:
            for ws in wss:
                await ws.close()
    assert status == 200 and headers["content-length"] == str(len(body))
    # every chain answered once, with all its events; the flood got its answers
    assert len(results) == CONNECTIONS * PER_CONNECTION
    failed = {k for k, (ok, _) in results.items() if not ok}
    assert len(failed) == CONNECTIONS * PER_CONNECTION // 10
    assert {n for _, n in results.values()} == {4}
    assert sorted(set(flood)) == [200, 426] and flood.count(426) == 50
    found = samples(body.decode())
    assert found["a2e_chains_started_total"] == 200
    assert found["a2e_chains_in_flight"] == 0
    assert found['a2e_chains_finished_total{outcome="ok"}'] == 180
    assert found['a2e_chains_finished_total{outcome="chain_node_error"}'] == 20
    assert found["a2e_chain_events_total"] == 800
    assert found['a2e_node_duration_seconds_count{kind="tool",tool="echo"}'] == 380
    assert found['a2e_node_duration_seconds_count{kind="tool",tool="fail"}'] == 20
    assert found["a2e_sessions_open"] == CONNECTIONS


@pytest.mark.asyncio
async def test_http_methods_headers_and_readyz_while_a_busy_host_shuts_down() -> None:
    async with serving(env={"A2E_SHUTDOWN_GRACE": "120"}) as (url, host):
        port = int(url.rsplit(":", 1)[1])
        status, headers, body = await http(port, get("/metrics"))
        h_status, h_headers, h_body = await http(port, get("/metrics", "HEAD"))
        # HEAD: the GET answer's headers, no body
        assert (status, h_status, h_body) == (200, 200, b"")
        assert h_headers["content-type"] == headers["content-type"]
        assert int(h_headers["content-length"]) > 0
        for method in ("POST", "PUT", "DELETE", "OPTIONS"):
            status, headers, body = await http(port, get("/readyz", method))
            assert (status, headers["allow"]) == (405, "GET, HEAD")
            assert body == f"method {method} is not allowed here; use GET or HEAD\n".encode()
        # oversized headers are refused by the HTTP parser before any route runs
        assert (await http(port, get("/metrics", extra=f"X-Big: {'a' * 100_000}\r\n")))[0] \
            == 431
        many = "".join(f"X-{i}: a\r\n" for i in range(500))
        assert (await http(port, get("/metrics", extra=many)))[0] == 431
        # many connections with chains in flight, then SIGTERM: /readyz says 503 through
        # the grace, /healthz 200, no new WebSocket is taken, and the host still exits 0
        wss = [await connect(url) for _ in range(24)]
        try:
            for n, ws in enumerate(wss[:12]):
                await handshaken(ws)
                await send(ws, chain(f"s{n}", [tool("z", "sleep", input={"seconds": 60})]))
                event = await receive(ws)
                assert (event["node_id"], event["phase"]) == ("z", "start")
            host.process.send_signal(signal.SIGTERM)
            with anyio.fail_after(WAIT):
                await host.wait_stderr("host shutting down")
            for _ in range(5):
                status, _, body = await http(port, get("/readyz"))
                assert (status, body) == (503, b"not ready: the host is shutting down\n")
            assert (await http(port, get("/healthz")))[0:3:2] == (200, b"ok\n")
            metrics = samples((await http(port, get("/metrics")))[2].decode())
            # the 12 idle connections were closed at once; the busy ones run on
            assert (metrics["a2e_chains_in_flight"], metrics["a2e_connections_open"]) == (12, 12)
            with pytest.raises(InvalidStatus) as refused:
                async with connect(url):
                    pass
            assert refused.value.response.status_code == 503
        finally:
            for ws in wss:
                await ws.close()


@pytest.mark.asyncio
async def test_a_trace_context_of_the_wrong_type_is_refused_naming_the_field_others_run(
) -> None:
    wrong = [(5, "$.trace_context", "expected `object | null`, got `int`"),
             ([1], "$.trace_context", "expected `object | null`, got `array`"),
             ({"traceparent": 5}, "$.trace_context.traceparent", "expected `str`, got `int`"),
             ({"tracestate": {"a": 1}}, "$.trace_context.tracestate",
              "expected `str`, got `object`")]
    ignored = [{"traceparent": "00-" + "a" * 1_000_000},  # over MAX_TRACEPARENT_CHARS
               {"traceparent": "ff-" + "1" * 32 + "-" + "2" * 16 + "-01", "tracestate": "é"},
               {"traceparent": "00-٣٣-\u0000", "unknown": True}, None]
    async with serving(env={"A2E_OTEL_EXPORTER": "console"}) as (url, _), \
            connect(url, max_size=None) as ws:
        await handshaken(ws)
        for i, (context, path, why) in enumerate(wrong):
            await send(ws, chain(f"w{i}", [tool("e", "echo")], trace_context=context))
            answer = await receive(ws)
            assert (answer["type"], answer["req_id"], answer["code"]) == (
                "error", f"w{i}", "schema_violation")
            assert answer["message"] == f"chain/req has an invalid field: {path}: {why}"
        for i, context in enumerate(ignored):
            await send(ws, chain(f"i{i}", [tool("e", "echo")], trace_context=context))
            while (answer := await receive(ws))["type"] == "chain/event":
                pass
            assert (answer["type"], answer["req_id"], answer["success"]) == (
                "chain/resp", f"i{i}", True)
