"""A durable run survives ``kill -9`` (or SIGTERM) of the real ``a2e-host serve``:
restarted on the same store, the host resumes it and it finishes (PROTOCOL.md §5 Resume).

The recording tools (``tests.support.recording_host``) append a line per call (node id and
idempotency key) to a file, which proves what ran how often; the blocking ones wait on a
FIFO, so the test decides when they return. The host is killed once the client has seen
both blocking nodes' ``start`` — a durable run's frames reach the client only once they
are committed, so the store holds them too — and both tools have recorded their call
(each says so on a FIFO of its own the test reads)."""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from a2e_host.chains.messages import ChainEvent, ChainResponse
from a2e_host.client import connect_ws
from a2e_host.errors import ChainFailure
from a2e_host.store import open_store
from tests.support.process import WAIT, open_host
from tests.support.ws import LISTENING, serving_argv

HOST = [sys.executable, "-m", "tests.support.recording_host", "serve", "--port", "0"]


class Fifos:
    """The FIFOs of one test: gates the blocking tools wait on, and where each says it
    recorded its call."""

    def __init__(self, tmp_path: Path) -> None:
        self.b_gate, self.c_gate = tmp_path / "b_gate", tmp_path / "c_gate"
        self.b_started, self.c_started = tmp_path / "b_started", tmp_path / "c_started"
        for fifo in (self.b_gate, self.c_gate, self.b_started, self.c_started):
            os.mkfifo(fifo)


def _chain(rec: Path, fifos: Fifos, on_error: str) -> list[dict[str, Any]]:
    """a → (b: idempotent, blocks; c: not idempotent, blocks) ; b → d."""
    return [
        {"node_id": "a", "kind": "tool", "name": "record", "input": {"path": str(rec)}},
        {"node_id": "b", "kind": "tool", "name": "record_block_idempotent",
         "input": {"path": str(rec), "until": str(fifos.b_gate),
                   "started": str(fifos.b_started)},
         "input_map": {"after": "a.output"}, "next_node": "d"},
        {"node_id": "c", "kind": "tool", "name": "record_block",
         "input": {"path": str(rec), "until": str(fifos.c_gate),
                   "started": str(fifos.c_started)},
         "input_map": {"after": "a.output"}, "on_error": on_error},
        {"node_id": "d", "kind": "tool", "name": "record", "input": {"path": str(rec)},
         "input_map": {"after": "b.output"}},
    ]


async def _open_gate(fifo: Path) -> None:
    """Let a blocked tool return: open the FIFO for writing (waits for its reader)."""

    def write() -> None:
        with open(fifo, "w", encoding="utf-8") as out:
            out.write("go")

    await anyio.to_thread.run_sync(write)


async def _recorded(fifo: Path) -> str:
    """Wait until a blocking tool says (on ``fifo``) it recorded its call."""

    def read() -> str:
        with open(fifo, encoding="utf-8") as signal:
            return signal.read()

    return await anyio.to_thread.run_sync(read, abandon_on_cancel=True)


def _calls(rec: Path) -> list[tuple[str, str]]:
    return [tuple(line.split()) for line in rec.read_text().splitlines()]  # type: ignore[misc]


async def _start_and_kill(argv: list[str], nodes: list[dict[str, Any]], fifos: Fifos,
                          how: signal.Signals = signal.SIGKILL
                          ) -> tuple[str, list[ChainEvent]]:
    """Start the durable chain on a fresh host, wait for both blocking nodes to start,
    stop the host with ``how`` (``kill -9`` by default). Returns the run id and the events
    the client saw."""
    # SIGTERM: the running chains get shutdown_grace to finish before they are cancelled;
    # the blocked tools never finish, so a short grace only ends the wait sooner
    host = await open_host(argv, A2E_SHUTDOWN_GRACE="0.2")
    seen: list[ChainEvent] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(host.collect_stderr)
        with anyio.fail_after(WAIT * 2):
            url = (await host.wait_stderr(LISTENING)).group(1)
            async with connect_ws(url, agent_caps=["chains", "runs"]) as client:
                run = client.run_chain(nodes, "a", durable=True)
                async for message in run:
                    assert isinstance(message, ChainEvent), message
                    seen.append(message)
                    if {("b", "start"), ("c", "start")} <= {(e.node_id, e.phase) for e in seen}:
                        break
                run_id = run.run_id
                await run.aclose()
                assert await _recorded(fifos.b_started) == "b"
                assert await _recorded(fifos.c_started) == "c"
                host.process.send_signal(how)  # SIGKILL: no cleanup, no flush, no response
                assert await host.wait() == (-9 if how is signal.SIGKILL else 0)
        tg.cancel_scope.cancel()
    return run_id, seen


@pytest.mark.asyncio
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
async def test_a_durable_run_resumes_after_its_host_is_killed_or_stopped_and_runs_nodes_once(
    tmp_path: Path, how: signal.Signals,
) -> None:
    rec, db = tmp_path / "calls.txt", tmp_path / "runs.db"
    fifos = Fifos(tmp_path)
    argv = [*HOST, "--store", str(db)]
    run_id, before = await _start_and_kill(argv, _chain(rec, fifos, "skip"), fifos, how)
    assert Counter(node for node, _ in _calls(rec)) == {"a": 1, "b": 1, "c": 1}
    last = before[-1].seq

    async with serving_argv(argv) as (url, _host):
        with anyio.fail_after(WAIT * 2):
            async with connect_ws(url, agent_caps=["chains", "runs"]) as client:
                attached = client.attach(run_id, since_seq=last)
                rest: list[Any] = []
                async for message in attached:
                    rest.append(message)
                    if isinstance(message, ChainEvent) and message.node_id == "c":
                        break  # c ended
                assert await _recorded(fifos.b_started) == "b"  # b runs again
                await _open_gate(fifos.b_gate)
                rest += [m async for m in attached]
                listed = await client.list_runs()

    events = [m for m in rest if isinstance(m, ChainEvent)]
    response = rest[-1]
    assert isinstance(response, ChainResponse) and response.success
    assert [e.seq for e in before] == list(range(1, last + 1))
    assert [e.seq for e in events] == list(range(last + 1, last + 1 + len(events))), (
        "seq continues from the last stored, gapless")
    phases = [(e.node_id, e.phase) for e in [*before, *events]]
    assert Counter(n for n, p in phases if p == "start") == {"a": 1, "b": 1, "c": 1, "d": 1}
    ended = {n: p for n, p in phases if p != "start"}
    assert ended == {"a": "done", "b": "done", "c": "error", "d": "done"}
    resumed = {e.node_id: e.data for e in events if e.phase in ("done", "error")}
    assert resumed["b"] == {"resumed": True} and resumed["c"] == {"resumed": True}
    assert resumed["d"] == {}
    assert set(response.outputs) == {"a", "b", "d"}

    calls = _calls(rec)
    assert Counter(node for node, _ in calls) == {"a": 1, "b": 2, "c": 1, "d": 1}, (
        "done nodes ran once; the idempotent in-flight one at most twice; c never again")
    assert len({key for node, key in calls if node == "b"}) == 1, "b ran with one key"
    assert len({key for _, key in calls}) == 4
    assert [(r.run_id, r.status) for r in listed.runs] == [(run_id, "succeeded")]

    store = await open_store(str(db), readonly=True)
    try:
        frames = await store.frames(run_id)
    finally:
        await store.aclose()
    c_error = next(f for f in frames if f.node_id == "c" and f.phase == "error")
    assert c_error.output is not None
    failure = msgspec.json.decode(c_error.output, type=ChainFailure)
    assert (failure.code, failure.node_id) == ("interrupted", "c")


@pytest.mark.asyncio
async def test_a_killed_run_whose_in_flight_node_may_not_rerun_ends_interrupted(
    tmp_path: Path,
) -> None:
    rec, db = tmp_path / "calls.txt", tmp_path / "runs.db"
    fifos = Fifos(tmp_path)
    argv = [*HOST, "--store", str(db)]
    run_id, before = await _start_and_kill(argv, _chain(rec, fifos, "abort"), fifos)

    async with serving_argv(argv) as (url, _host):
        with anyio.fail_after(WAIT * 2):
            async with connect_ws(url, agent_caps=["chains", "runs"]) as client:
                attached = client.attach(run_id, since_seq=before[-1].seq)
                rest = [m async for m in attached]
                listed = await client.list_runs()
    response = rest[-1]
    assert isinstance(response, ChainResponse) and not response.success
    assert response.error is not None
    assert (response.error.code, response.error.node_id) == ("interrupted", "c")
    ended = {m.node_id: m.phase for m in rest if isinstance(m, ChainEvent)}
    assert ended == {"c": "error", "b": "error"}, "c interrupted; b cancelled by the abort"
    assert Counter(node for node, _ in _calls(rec))["c"] == 1
    assert [(r.run_id, r.status) for r in listed.runs] == [(run_id, "interrupted")]
