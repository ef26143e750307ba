"""Runs a store holds as ``running`` when an in-process host starts: resumed, or ended
``interrupted`` when they cannot be (PROTOCOL.md §5 Resume)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from a2e_chains.resume import plan_hash_of

from a2e_host.chains.messages import (
    ChainAccepted,
    ChainAttach,
    ChainEvent,
    ChainNode,
    ChainRequest,
    ChainResponse,
)
from a2e_host.chains.toolbox import Toolbox
from a2e_host.codec import encode_message
from a2e_host.messages import ErrorMessage, Message
from a2e_host.runtime.memory import open_memory_client
from a2e_host.session import ANONYMOUS_PRINCIPAL
from a2e_host.store import RunRecord, RunStatus, StoredFrame, open_store
from a2e_host.tools.registry import ToolRegistry
from tests.support.durable import GATED, Gates, durable_host, handshake_as

WAIT = 20


async def _seed(path: Path, request: ChainRequest, *, plan_hash: str = "",
                frames: Sequence[ChainEvent] = (), cancel: bool = False,
                deadline: float | None = None, age: float = 0.0) -> str:
    """A run as a killed host leaves it: ``running``, with ``frames`` stored, accepted
    ``age`` seconds ago."""
    store = await open_store(str(path))
    try:
        now = time.time()
        record = RunRecord(run_id="r" * 32, principal=ANONYMOUS_PRINCIPAL, req_id=request.id,
                           chain_id=request.chain_id, request=encode_message(request),
                           plan_hash=plan_hash, created=now - age, updated=now - age,
                           deadline=deadline if deadline is not None else now + 60)
        store.create(record)
        for event in frames:
            store.append(record.run_id, StoredFrame(event.seq, event.node_id, event.phase,
                                                    encode_message(event), None))
        if cancel:
            store.request_cancel(record.run_id)
        await store.flush()
    finally:
        await store.aclose()
    return record.run_id


async def _attach(host: Any, run_id: str) -> list[Message]:
    async with open_memory_client(host) as client:
        await handshake_as(client)
        client.send(ChainAttach(id="att", run_id=run_id))
        got: list[Message] = []
        while not got or not isinstance(got[-1], ChainResponse | ErrorMessage):
            got.append(await client.receive())
    return got


def _request(**fields: Any) -> ChainRequest:
    return ChainRequest(id="long", nodes=[ChainNode(**n) for n in GATED], entry_node="a",
                        durable=True, **fields)


def _hash(gates: Gates, request: ChainRequest) -> str:
    return plan_hash_of(request, Toolbox(ToolRegistry(gates.tools())))


async def _run_after_restart(tmp_path: Path, gates: Gates, run_id: str
                             ) -> tuple[list[Message], RunStatus]:
    with anyio.fail_after(WAIT):
        async with durable_host(tmp_path / "runs.db", gates) as host:
            got = await _attach(host, run_id)
    store = await open_store(str(tmp_path / "runs.db"), readonly=True)
    try:
        record = await store.get(run_id)
    finally:
        await store.aclose()
    assert record is not None
    return got, record.status


@pytest.mark.asyncio
async def test_a_stored_running_run_resumes_after_its_last_event(tmp_path: Path) -> None:
    gates = Gates()
    gates.gate("g").set()
    request = _request()
    run_id = await _seed(tmp_path / "runs.db", request, plan_hash=_hash(gates, request),
                         frames=[ChainEvent(req_id="long", seq=1, node_id="a", phase="start"),
                                 ChainEvent(req_id="long", seq=2, node_id="a", phase="done",
                                            output={"v": 1})])
    got, status = await _run_after_restart(tmp_path, gates, run_id)
    assert isinstance(got[0], ChainAccepted)
    events = [(m.node_id, m.phase, m.seq) for m in got if isinstance(m, ChainEvent)]
    assert events[-4:] == [("g", "start", 3), ("g", "done", 4), ("b", "start", 5),
                           ("b", "done", 6)]
    response = got[-1]
    assert isinstance(response, ChainResponse) and response.success
    assert response.outputs["a"] == {"v": 1}, "restored from the log, not run again"
    assert status is RunStatus.SUCCEEDED


@pytest.mark.asyncio
@pytest.mark.parametrize("drift", [False, True])
async def test_a_resumed_runs_duration_counts_from_its_acceptance_as_the_store_does(
    tmp_path: Path, drift: bool,
) -> None:
    gates = Gates()
    gates.gate("g").set()
    request = _request()
    run_id = await _seed(tmp_path / "runs.db", request, age=30.0,
                         plan_hash="0" * 64 if drift else _hash(gates, request),
                         frames=[ChainEvent(req_id="long", seq=1, node_id="a", phase="start"),
                                 ChainEvent(req_id="long", seq=2, node_id="a", phase="done",
                                            output={"v": 1})])
    got, _ = await _run_after_restart(tmp_path, gates, run_id)
    response = got[-1]
    assert isinstance(response, ChainResponse) and response.success is not drift
    store = await open_store(str(tmp_path / "runs.db"), readonly=True)
    try:
        record = await store.get(run_id)
    finally:
        await store.aclose()
    assert record is not None
    stored_ms = (record.updated - record.created) * 1000
    # 30 s before the restart, then at most WAIT seconds of resumed run
    assert 30_000 <= response.duration_ms < 30_000 + WAIT * 1000
    assert abs(stored_ms - response.duration_ms) < 2_000  # one duration, two readers


@pytest.mark.asyncio
async def test_a_run_whose_tools_changed_ends_interrupted_with_resume_drift(
    tmp_path: Path,
) -> None:
    gates = Gates()
    run_id = await _seed(tmp_path / "runs.db", _request(), plan_hash="0" * 64)
    got, status = await _run_after_restart(tmp_path, gates, run_id)
    response = got[-1]
    assert isinstance(response, ChainResponse) and response.error is not None
    assert response.error.code == "interrupted"
    assert response.error.details == {"reason": "resume_drift"}
    assert not [m for m in got if isinstance(m, ChainEvent)], "nothing ran"
    assert not gates.reached("g").is_set()
    assert status is RunStatus.INTERRUPTED


@pytest.mark.asyncio
async def test_a_run_sent_without_streaming_cannot_tell_what_ran_and_ends_interrupted(
    tmp_path: Path,
) -> None:
    gates = Gates()
    request = _request(streaming=False)
    run_id = await _seed(tmp_path / "runs.db", request, plan_hash=_hash(gates, request))
    got, status = await _run_after_restart(tmp_path, gates, run_id)
    response = got[-1]
    assert isinstance(response, ChainResponse) and response.error is not None
    assert response.error.details == {"reason": "resume_unrecorded"}
    assert status is RunStatus.INTERRUPTED


@pytest.mark.asyncio
async def test_a_cancel_asked_while_the_host_was_down_ends_the_run_cancelled(
    tmp_path: Path,
) -> None:
    gates = Gates()
    request = _request()
    run_id = await _seed(tmp_path / "runs.db", request, plan_hash=_hash(gates, request),
                         cancel=True)
    got, status = await _run_after_restart(tmp_path, gates, run_id)
    response = got[-1]
    assert isinstance(response, ChainResponse) and response.error is not None
    assert response.error.code == "cancelled"
    assert status is RunStatus.CANCELLED


@pytest.mark.asyncio
async def test_a_deadline_that_passed_while_the_host_was_down_ends_the_run_timeout(
    tmp_path: Path,
) -> None:
    gates = Gates()
    request = _request()
    run_id = await _seed(tmp_path / "runs.db", request, plan_hash=_hash(gates, request),
                         frames=[ChainEvent(req_id="long", seq=1, node_id="a", phase="start")],
                         deadline=time.time() - 1)
    got, status = await _run_after_restart(tmp_path, gates, run_id)
    response = got[-1]
    assert isinstance(response, ChainResponse) and response.error is not None
    assert response.error.code == "timeout"
    ended = [(m.node_id, m.phase, m.data) for m in got if isinstance(m, ChainEvent)]
    assert ended[-1] == ("a", "error", {"resumed": True})
    assert status is RunStatus.TIMEOUT


@pytest.mark.asyncio
async def test_an_accepted_durable_run_is_stored_with_its_plan_hash(tmp_path: Path) -> None:
    gates = Gates()
    gates.gate("g").set()
    request = _request()
    with anyio.fail_after(WAIT):
        async with durable_host(tmp_path / "runs.db", gates) as host:
            async with open_memory_client(host) as client:
                await handshake_as(client)
                client.send(request)
                accepted = await client.receive()
                assert isinstance(accepted, ChainAccepted)
                while not isinstance(await client.receive(), ChainResponse):
                    pass
    store = await open_store(str(tmp_path / "runs.db"), readonly=True)
    try:
        record = await store.get(accepted.run_id)
    finally:
        await store.aclose()
    assert record is not None and record.plan_hash == _hash(gates, request)
