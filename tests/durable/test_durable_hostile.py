"""Hostile clients of durable runs on the real ``a2e-host serve`` with a SQLite store
(PROTOCOL.md §5 Durable runs, §6): what one principal may hold on the host at once."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.support.process import WAIT
from tests.support.ws import SERVE, receive, serving, serving_argv


async def _session(url: str, token: str = "") -> ClientConnection:
    ws = await connect(url, subprotocols=["a2e.v1"])  # type: ignore[list-item]
    hello: dict[str, Any] = {"type": "handshake/req", "id": "h",
                             "agent_caps": ["chains", "runs"]}
    if token:
        hello["auth_token"] = token
    await ws.send(json.dumps(hello))
    resp = await receive(ws)
    assert resp["type"] == "handshake/resp" and resp["ok"], resp
    return ws


def _sleeping(req_id: str) -> str:
    return json.dumps({
        "type": "chain/req", "id": req_id, "chain_id": "c", "entry_node": "s",
        "durable": True, "nodes": [{"node_id": "s", "kind": "tool", "name": "sleep",
                                    "input": {"seconds": 60}}],
    })


async def _answer(ws: ClientConnection) -> dict[str, Any]:
    """The next message that is neither a ``chain/event`` nor ``chain/accepted`` is not
    what this waits for: the next ``chain/accepted`` or terminal answer."""
    while True:
        message = await receive(ws)
        if message["type"] != "chain/event":
            return message


@pytest.mark.asyncio
async def test_durable_runs_left_behind_by_closed_connections_are_capped_per_principal(
    tmp_path: Path,
) -> None:
    config = tmp_path / "host.toml"
    config.write_text('[auth.tokens]\nalice = "tok-a"\nbob = "tok-b"\n', encoding="utf-8")
    flags = ["--store", str(tmp_path / "runs.db"), "-c", str(config)]
    async with serving(*flags, env={"A2E_MAX_DURABLE_RUNS": "3"}) as (url, _host):
        with anyio.fail_after(WAIT * 2):
            run_ids: list[str] = []
            for n in range(3):  # each connection starts one, then goes away
                ws = await _session(url, "tok-a")
                await ws.send(_sleeping(f"r{n}"))
                accepted = await _answer(ws)
                assert accepted["type"] == "chain/accepted", accepted
                run_ids.append(accepted["run_id"])
                await ws.close()
            ws = await _session(url, "tok-a")
            await ws.send(_sleeping("r3"))
            refused = await _answer(ws)
            other = await _session(url, "tok-b")
            await other.send(_sleeping("b0"))
            bobs = await _answer(other)
            for run_id in run_ids:  # end them here: a cancelled run frees its place
                await ws.send(json.dumps({"type": "chain/attach", "id": f"a-{run_id}",
                                          "run_id": run_id, "since_seq": 1}))
                await ws.send(json.dumps({"type": "chain/cancel", "id": f"c-{run_id}",
                                          "run_id": run_id}))
            ended = 0
            while ended < len(run_ids):
                message = await receive(ws)
                ended += message["type"] == "chain/resp"
            await ws.send(_sleeping("r4"))
            again = await _answer(ws)
            await ws.send(json.dumps({"type": "chain/cancel", "id": "c4",
                                      "run_id": again.get("run_id", "")}))
            await other.send(json.dumps({"type": "chain/cancel", "id": "cb",
                                         "run_id": bobs.get("run_id", "")}))
            await ws.close()
            await other.close()
    assert refused["type"] == "chain/resp" and refused["req_id"] == "r3"
    assert refused["error"]["code"] == "chain_limit"
    assert refused["error"]["details"] == {"ceiling": "max_durable_runs", "scope": "host",
                                           "limit": 3, "requested": 4}
    assert bobs["type"] == "chain/accepted"  # another principal's place is its own
    assert again["type"] == "chain/accepted"


def _file_size_capped(argv: list[str], limit: int) -> list[str]:
    """``argv`` run with its files capped at ``limit`` bytes (``RLIMIT_FSIZE``, SIGXFSZ
    ignored): a write past it fails with EFBIG, as on a full disk."""
    prelude = ("import os, resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
               f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); "
               "os.execvp(sys.argv[1], sys.argv[1:])")
    return [sys.executable, "-c", prelude, *argv]


@pytest.mark.asyncio
async def test_a_store_that_fails_mid_run_stops_the_run_and_refuses_new_durable_runs_clearly(
    tmp_path: Path,
) -> None:
    argv = _file_size_capped([*SERVE, "--store", str(tmp_path / "runs.db")], 1_500_000)
    nodes = [{"node_id": "a", "kind": "tool", "name": "big", "input": {"bytes": 3_000_000},
              "next_node": "b"},
             {"node_id": "b", "kind": "tool", "name": "sleep", "input": {"seconds": 600}}]
    async with serving_argv(argv) as (url, host):
        with anyio.fail_after(WAIT * 2):
            ws = await _session(url)
            await ws.send(json.dumps({"type": "chain/req", "id": "r1", "chain_id": "c",
                                      "entry_node": "a", "durable": True, "nodes": nodes}))
            accepted = await _answer(ws)
            broken = await _answer(ws)  # a's done frame cannot be stored
            # the run stops at once: no node of it goes on unrecorded
            await host.wait_stderr(r'"req_id": "r1".*"code": "cancelled".*"chain finished"')
            await ws.send(_sleeping("r2"))
            refused = await _answer(ws)
            await ws.send(json.dumps({"type": "chain/req", "id": "r3", "chain_id": "c",
                                      "entry_node": "e", "nodes": [
                                          {"node_id": "e", "kind": "tool", "name": "echo",
                                           "input": {"v": 1}}]}))
            plain = await _answer(ws)
            await ws.close()
    assert accepted["type"] == "chain/accepted"
    assert (broken["type"], broken["req_id"], broken["code"]) == ("error", "r1",
                                                                  "runtime_error")
    assert (refused["type"], refused["req_id"]) == ("error", "r2")
    assert refused["code"] == "runtime_error" and refused["retryable"] is True
    assert "run store" in refused["message"] and "without durable" in refused["message"]
    assert plain["type"] == "chain/resp" and plain["success"] is True  # others still served
    assert b"internal error while handling" not in host.stderr


def _echo(req_id: str) -> str:
    return json.dumps({"type": "chain/req", "id": req_id, "chain_id": "c", "entry_node": "e",
                       "nodes": [{"node_id": "e", "kind": "tool", "name": "echo",
                                  "input": {"v": 1}}]})


async def _one_at_a_time(url: str) -> ClientConnection:
    ws = await connect(url, subprotocols=["a2e.v1"])  # type: ignore[list-item]
    await ws.send(json.dumps({"type": "handshake/req", "id": "h", "limits": {"max_parallel": 1},
                              "agent_caps": ["chains", "runs"]}))
    assert (await receive(ws))["ok"]
    return ws


@pytest.mark.asyncio
async def test_a_durable_run_detached_or_taken_over_frees_its_sessions_max_parallel_place(
    tmp_path: Path,
) -> None:
    async with serving("--store", str(tmp_path / "runs.db")) as (url, _host):
        with anyio.fail_after(WAIT * 2):
            ws = await _one_at_a_time(url)
            await ws.send(_sleeping("d1"))
            first = await _answer(ws)
            await ws.send(json.dumps({"type": "chain/detach", "id": "dt",
                                      "run_id": first["run_id"]}))
            detached = await _answer(ws)
            await ws.send(_echo("after-detach"))
            after_detach = await _answer(ws)
            await ws.send(_sleeping("d2"))
            second = await _answer(ws)
            other = await _one_at_a_time(url)
            await other.send(json.dumps({"type": "chain/attach", "id": "take",
                                         "run_id": second.get("run_id", ""),
                                         "since_seq": 0}))
            taken = await _answer(other)
            await ws.send(_echo("after-take-over"))
            after_take_over = await _answer(ws)
            for n, run in enumerate((first, second)):
                await other.send(json.dumps({"type": "chain/cancel", "id": f"c{n}",
                                             "run_id": run.get("run_id", "")}))
            await ws.close()
            await other.close()
    assert first["type"] == second["type"] == "chain/accepted"
    assert detached["type"] == "chain/detached" and taken["type"] == "chain/accepted"
    assert (after_detach["type"], after_detach.get("success")) == ("chain/resp", True)
    assert (after_take_over["type"], after_take_over.get("success")) == ("chain/resp", True)
