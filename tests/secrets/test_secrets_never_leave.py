"""Issue 22's acceptance: the real host, over stdio and over WebSocket, with DEBUG logs,
spans written to stderr (``otel_exporter = "console"``) and a durable run store, runs a
chain whose tools receive a configured secret and a request's own secret — one echoing
both into its output, one failing with both in its message and printing them to stderr —
and not one byte it emits (frames, log lines, spans, the store's files, its WAL included)
holds either value in any written form, while the tools got both."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect

from tests.support.process import CLI, WAIT, HostProcess
from tests.support.secret_values import (
    HOST_ENV,
    HOST_VALUE,
    REQUEST_VALUE,
    digest,
    leaks,
    probe_records,
    probe_request,
    store_bytes,
    write_config,
)
from tests.support.stdio import handshake, stdio_process
from tests.support.ws import serving_argv

ECHOED = "a=«secret:HOSTKEY» b=«secret:REQKEY»"


def _flags(tmp_path: Path) -> list[str]:
    return ["--config", str(write_config(tmp_path)), "--root", str(tmp_path),
            "--store", str(tmp_path / "runs.db")]


def _check_ending(events: list[dict[str, Any]], resp: dict[str, Any]) -> None:
    """The echo's output and the failure's message hold the names, not the values."""
    done = [e for e in events if e["node_id"] == "echo" and e["phase"] == "done"]
    assert done[0]["output"] == {"text": ECHOED, "a": "«secret:HOSTKEY»",
                                 "pair": ["«secret:HOSTKEY»", "«secret:REQKEY»"]}
    failed = [e for e in events if e["node_id"] == "fail" and e["phase"] == "error"]
    assert failed[0]["error"] == ("secret_fail refuses a='«secret:HOSTKEY»' and "
                                  'b="«secret:REQKEY»"')
    assert resp["success"] is False and resp["error"]["code"] == "chain_node_error"
    assert resp["outputs"]["echo"]["text"] == ECHOED
    assert "«secret:REQKEY»" in resp["error"]["message"]


def _check_received(root: Path, runs: int) -> None:
    """Each tool of each run got exactly the two values (by their digests)."""
    expected = {"a": digest(HOST_VALUE), "b": digest(REQUEST_VALUE)}
    records = probe_records(root)
    assert [r["tool"] for r in records] == ["secret_echo", "secret_fail"] * runs
    assert all({k: r[k] for k in ("a", "b")} == expected for r in records)


def _check_spans(stderr: bytes) -> None:
    """The failing node's span was exported, its status naming the references."""
    assert b'"name": "a2e.node"' in stderr
    shown = rb"\u00absecret:HOSTKEY\u00bb"  # JSON's escape of «secret:HOSTKEY»
    assert b'"description": "secret_fail refuses a=' + b"'" + shown + b"'" in stderr


def _check_store(files: dict[str, bytes]) -> None:
    assert "runs.db" in files
    for name, data in files.items():
        assert leaks(data, HOST_VALUE, REQUEST_VALUE) == [], name
    # the run is there, with references where the values were
    assert any("«secret:REQKEY»".encode() in data for data in files.values())


async def _run_stdio(host: HostProcess, message: dict[str, Any]) -> tuple[
        list[dict[str, Any]], dict[str, Any]]:
    await host.send(message)
    events = []
    while True:
        got = await host.receive()
        if got["type"] == "chain/event":
            events.append(got)
        elif got["type"] == "chain/resp":
            return events, got


@pytest.mark.asyncio
async def test_no_byte_the_stdio_host_emits_holds_a_secret_its_tools_received(
    tmp_path: Path,
) -> None:
    stdout: list[bytes] = []
    async with stdio_process([*CLI, "stdio", *_flags(tmp_path)], **HOST_ENV) as host:
        stdout.append(json.dumps(await handshake(host)).encode())
        plain = await _run_stdio(host, probe_request("plain"))
        durable = await _run_stdio(host, probe_request("kept", durable=True))
        live_store = store_bytes(tmp_path)  # the WAL holds the run while the host lives
    stdout.extend(json.dumps(m).encode() for m in [*plain[0], plain[1], *durable[0],
                                                    durable[1]])
    for events, resp in (plain, durable):
        _check_ending(events, resp)
    emitted = b"\n".join(stdout)
    assert leaks(emitted, HOST_VALUE, REQUEST_VALUE) == []
    assert leaks(bytes(host.stderr), HOST_VALUE, REQUEST_VALUE) == []
    # DEBUG lines about the failure, and the tool's own print, were written — redacted
    assert b'"event": "node failed"' in host.stderr
    _check_spans(bytes(host.stderr))
    assert "secret_fail got a=«secret:HOSTKEY» b=«secret:REQKEY»".encode() in host.stderr
    assert live_store.get("runs.db-wal"), "no WAL to scan while the host ran"
    _check_store(live_store)
    _check_store(store_bytes(tmp_path))
    _check_received(tmp_path, runs=2)


@pytest.mark.asyncio
async def test_no_byte_the_websocket_host_emits_holds_a_secret_its_tools_received(
    tmp_path: Path,
) -> None:
    frames: list[bytes] = []
    results = []
    async with serving_argv(CLI, "--port", "0", *_flags(tmp_path), **HOST_ENV) as (
            url, host):
        async with connect(url, subprotocols=["a2e.v1"]) as ws:  # type: ignore[list-item]
            with anyio.fail_after(WAIT):
                await ws.send(json.dumps({"type": "handshake/req", "id": "h",
                                          "agent_caps": ["chains"]}))
                for req_id, extra in (("plain", {}), ("kept", {"durable": True})):
                    await ws.send(json.dumps(probe_request(req_id, **extra)))
                    events = []
                    while True:
                        raw = await ws.recv()
                        frames.append(raw.encode() if isinstance(raw, str) else raw)
                        got = json.loads(raw)
                        if got["type"] == "chain/event":
                            events.append(got)
                        elif got["type"] == "chain/resp":
                            results.append((events, got))
                            break
        live_store = store_bytes(tmp_path)
    for events, resp in results:
        _check_ending(events, resp)
    assert leaks(b"\n".join(frames), HOST_VALUE, REQUEST_VALUE) == []
    assert leaks(bytes(host.stderr), HOST_VALUE, REQUEST_VALUE) == []
    assert b'"event": "node failed"' in host.stderr
    _check_spans(bytes(host.stderr))
    assert live_store.get("runs.db-wal"), "no WAL to scan while the host ran"
    _check_store(live_store)
    _check_store(store_bytes(tmp_path))
    _check_received(tmp_path, runs=2)
