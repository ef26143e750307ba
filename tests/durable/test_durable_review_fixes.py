"""Durable runs keep their promises across the edges a review found (PROTOCOL.md §5
Durable runs, §5 Resume): a node that may not run twice runs only once its ``start`` is
stored, a stored run always has a task or an ending, and a replay never holds a
connection's reader."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from a2e_host.chains.messages import (
    ChainAccepted,
    ChainAttach,
    ChainCancel,
    ChainEvent,
    ChainRequest,
    ChainResponse,
    chain_codec,
)
from a2e_host.codec import encode_message
from a2e_host.config import ANONYMOUS_PRINCIPAL, HostConfig
from a2e_host.messages import ErrorMessage
from a2e_host.runtime.memory import open_memory_client
from a2e_host.store import RunRecord, RunStatus, StoredFrame, StoreError, open_store
from a2e_host.tools import Tool, tool
from tests.support.durable import GATED, Gates, durable_host, handshake_as, until_response
from tests.support.store import stored_events

WAIT = 30


def _committed_events(path: Path) -> list[tuple[int, str, str]]:
    """Every stored event ``(seq, node_id, phase)``, read on a connection of its own: what
    the store committed (what a ``kill -9`` now would leave)."""
    return stored_events(str(path))


class _Witnesses(Gates):
    """Gates' tools plus two that record what the store had committed when called."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.seen: dict[str, list[tuple[int, str, str]]] = {}

    def tools(self) -> list[Tool]:
        witnesses = self

        @tool(blocking=False)
        async def effect(v: int = 0) -> dict[str, Any]:
            """Has an effect that must not happen twice (not idempotent)."""
            witnesses.seen["effect"] = _committed_events(witnesses.path)
            return {"v": v}

        @tool(blocking=False, idempotent=True)
        async def lookup(v: int = 0) -> dict[str, Any]:
            """Reads only: may run again on resume (idempotent)."""
            witnesses.seen["lookup"] = _committed_events(witnesses.path)
            return {"v": v}

        return [*super().tools(), effect, lookup]




@pytest.mark.asyncio
async def test_a_node_that_may_not_rerun_executes_only_after_its_start_is_committed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    witnesses = _Witnesses(path)
    nodes = [
        {"node_id": "l", "kind": "tool", "name": "lookup", "input": {"v": 1}, "next_node": "e"},
        {"node_id": "e", "kind": "tool", "name": "effect", "input": {"v": 2}},
    ]
    with anyio.fail_after(WAIT):
        # every batch waits 1.5 s before it commits: a start is held that long
        async with durable_host(path, witnesses, commit_delay=1.5) as host:
            async with open_memory_client(host) as client:
                await handshake_as(client)
                client.send(ChainRequest(id="r", nodes=nodes, entry_node="l", durable=True))
                assert isinstance(await client.receive(), ChainAccepted)
                got = await until_response(client)
    assert isinstance(got[-1], ChainResponse) and got[-1].success
    # the idempotent lookup ran at once (a resume may run it again: no wait paid) …
    assert witnesses.seen["lookup"] == []
    # … the effect only once its start was stored: a crash now resumes it, not reruns it
    assert witnesses.seen["effect"] == [(1, "l", "start"), (2, "l", "done"), (3, "e", "start")]
    assert [(m.node_id, m.phase, m.seq) for m in got if isinstance(m, ChainEvent)] == [
        ("l", "start", 1), ("l", "done", 2), ("e", "start", 3), ("e", "done", 4)]


class _HeldCreate:
    """The run store, but ``create_or_get`` holds its (committed) answer until ``gate``."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.created = anyio.Event()
        self.gate = anyio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def create_or_get(self, record: RunRecord) -> tuple[RunRecord, bool]:
        answer: tuple[RunRecord, bool] = await self._store.create_or_get(record)
        self.created.set()
        await self.gate.wait()
        return answer


@pytest.mark.asyncio
async def test_a_run_recorded_as_its_connection_drops_ends_refused_and_a_resubmit_replays_it(
    tmp_path: Path,
) -> None:
    held: list[_HeldCreate] = []

    def wrap(store: Any) -> _HeldCreate:
        held.append(_HeldCreate(store))
        return held[0]

    request = ChainRequest(id="k1", nodes=GATED, entry_node="a", durable=True,
                           idempotency_key="key-1")
    with anyio.fail_after(WAIT):
        async with durable_host(tmp_path / "runs.db", Gates(), wrap=wrap) as host:
            drop = anyio.Event()

            async def first_connection() -> None:
                async with open_memory_client(host) as first:
                    await handshake_as(first)
                    first.send(request)
                    await drop.wait()  # leaving closes the connection mid-create

            async with anyio.create_task_group() as tg:
                tg.start_soon(first_connection)
                await held[0].created.wait()  # the record is committed, its task not started
                drop.set()
                await anyio.wait_all_tasks_blocked()  # the connection is closing
                held[0].gate.set()
            await held[0].flush()  # whatever the host queued for the run is committed
            record = await held[0].by_idempotency_key(ANONYMOUS_PRINCIPAL, "key-1")
            assert record is not None and record.status is RunStatus.FAILED

            async with open_memory_client(host) as second:
                await handshake_as(second)
                second.send(request)
                accepted = await second.receive()
                assert isinstance(accepted, ChainAccepted)
                assert (accepted.run_id, accepted.last_seq) == (record.run_id, 0)
                response = await second.receive()
    assert isinstance(response, ChainResponse) and not response.success
    assert response.error is not None and response.error.code == "busy"
    assert response.req_id == "k1"


@pytest.mark.asyncio
async def test_attaching_to_a_run_stored_running_that_nothing_runs_is_refused_clearly(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    with anyio.fail_after(WAIT):
        stores: list[Any] = []
        async with durable_host(path, Gates(), wrap=lambda s: stores.append(s) or s) as host:
            store = stores[0]
            store.create(RunRecord(run_id="f" * 32, principal=ANONYMOUS_PRINCIPAL,
                                   req_id="orphan"))
            await store.flush()
            async with open_memory_client(host) as client:
                await handshake_as(client)
                client.send(ChainAttach(id="att", run_id="f" * 32))
                answer = await client.receive()
    assert isinstance(answer, ErrorMessage)
    assert (answer.code, answer.retryable, answer.req_id) == ("busy", True, "att")
    assert "stored as running but no task on this host runs it" in answer.message


@pytest.mark.asyncio
async def test_a_resumed_run_whose_resume_raises_ends_interrupted_with_one_response(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    store = await open_store(str(path))
    try:  # as a killed host leaves it, but its stored request cannot be read back
        now = time.time()
        store.create(RunRecord(run_id="d" * 32, principal=ANONYMOUS_PRINCIPAL,
                               req_id="broken", chain_id="c1", request=b'{"not": "a chain"}',
                               created=now, updated=now, deadline=now + 60))
        await store.flush()
    finally:
        await store.aclose()
    with anyio.fail_after(WAIT):
        async with durable_host(path, Gates()) as host:
            async with open_memory_client(host) as client:
                await handshake_as(client)
                client.send(ChainAttach(id="att", run_id="d" * 32))
                got = await until_response(client)
    assert isinstance(got[0], ChainAccepted) and got[0].last_seq == 0
    response = got[-1]
    assert isinstance(response, ChainResponse) and response.error is not None
    assert (response.req_id, response.chain_id, response.error.code) == (
        "broken", "c1", "interrupted")
    assert response.error.details == {"reason": "resume_failed"}
    assert len(got) == 2
    reader = await open_store(str(path), readonly=True)
    try:
        record = await reader.get("d" * 32)
    finally:
        await reader.aclose()
    assert record is not None and record.status is RunStatus.INTERRUPTED
    assert record.response is not None
    assert chain_codec.decode(record.response) == response


async def _stored(path: Path, run_id: str) -> RunRecord:
    reader = await open_store(str(path), readonly=True)
    try:
        record = await reader.get(run_id)
    finally:
        await reader.aclose()
    assert record is not None
    return record


@pytest.mark.asyncio
async def test_a_cancel_by_req_id_from_the_starting_session_is_recorded_in_the_store(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    gates = Gates()
    with anyio.fail_after(WAIT):
        async with durable_host(path, gates) as host:
            async with open_memory_client(host) as client:
                await handshake_as(client)
                client.send(ChainRequest(id="long", nodes=GATED, entry_node="a", durable=True))
                accepted = await client.receive()
                assert isinstance(accepted, ChainAccepted)
                await gates.reached("g").wait()
                client.send(ChainCancel(id="c", req_id="long"))
                got = await until_response(client)
    response = got[-1]
    assert isinstance(response, ChainResponse) and response.error is not None
    assert response.error.code == "cancelled"
    record = await _stored(path, accepted.run_id)
    # recorded as asked: a host killed before the cancelled response committed would
    # end the run cancelled on restart instead of resuming it
    assert (record.cancel_requested, record.status) == (True, RunStatus.CANCELLED)


class _CancelFails:
    """The run store, but recording a cancel fails as on a broken store."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def request_cancel(self, run_id: str) -> int:
        raise StoreError(f"disk I/O error while recording the cancel of {run_id}")


@pytest.mark.asyncio
@pytest.mark.parametrize("by", ["run_id", "req_id"])
async def test_a_cancel_still_cancels_and_answers_no_error_when_the_store_cannot_record_it(
    tmp_path: Path, by: str,
) -> None:
    gates = Gates()
    with anyio.fail_after(WAIT):
        async with durable_host(tmp_path / "runs.db", gates, wrap=_CancelFails) as host:
            async with open_memory_client(host) as client:
                await handshake_as(client)
                client.send(ChainRequest(id="long", nodes=GATED, entry_node="a", durable=True))
                accepted = await client.receive()
                assert isinstance(accepted, ChainAccepted)
                await gates.reached("g").wait()
                client.send(ChainCancel(id="c", run_id=accepted.run_id) if by == "run_id"
                            else ChainCancel(id="c", req_id="long"))
                got = await until_response(client)
    assert [m for m in got if isinstance(m, ErrorMessage)] == []
    response = got[-1]
    assert isinstance(response, ChainResponse) and response.error is not None
    assert (response.req_id, response.error.code) == ("long", "cancelled")


class _Cancellable(Gates):
    """Gates' tools plus ``hold``, which runs until cancelled and says so."""

    def __init__(self) -> None:
        super().__init__()
        self.cancelled = anyio.Event()

    def tools(self) -> list[Tool]:
        gates = self

        @tool(blocking=False)
        async def hold() -> dict[str, Any]:
            """Runs until it is cancelled."""
            gates.reached("hold").set()
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                gates.cancelled.set()
                raise
            return {}

        return [*super().tools(), hold]


@pytest.mark.asyncio
async def test_replaying_a_long_finished_run_to_a_slow_reader_leaves_its_connection_served(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    frames = 300
    store = await open_store(str(path))
    try:  # a finished run of 300 events
        now = time.time()
        store.create(RunRecord(run_id="e" * 32, principal=ANONYMOUS_PRINCIPAL, req_id="done",
                               created=now, updated=now))
        for seq in range(1, frames + 1):
            event = ChainEvent(req_id="done", seq=seq, node_id=f"n{seq}", phase="start")
            store.append("e" * 32, StoredFrame(seq, event.node_id, "start",
                                               encode_message(event), None))
        store.finish("e" * 32, RunStatus.SUCCEEDED, encode_message(ChainResponse(
            req_id="done", success=True)), frames)
        await store.flush()
    finally:
        await store.aclose()
    gates = _Cancellable()
    hold = [{"node_id": "h", "kind": "tool", "name": "hold", "input": {}}]
    with anyio.fail_after(WAIT):
        # 8 frames queued and the host's producers wait for the reader
        async with durable_host(path, gates, config=HostConfig(outbox_high_water=8)) as host:
            async with open_memory_client(host, buffer_frames=4) as client:
                await handshake_as(client)
                client.send(ChainRequest(id="held", nodes=hold, entry_node="h"))
                await gates.reached("hold").wait()
                # the replay fills the outbox and waits for a reader that does not read …
                client.send(ChainAttach(id="att", run_id="e" * 32))
                # … and the next message is handled all the same
                client.send(ChainCancel(id="c", req_id="held"))
                await gates.cancelled.wait()
                got = [await client.receive() for _ in range(8)]
    accepted = [m for m in got if isinstance(m, ChainAccepted)]
    assert [(m.req_id, m.last_seq, m.attach_id) for m in accepted] == [("done", frames, "att")]
    replayed = [m.seq for m in got if isinstance(m, ChainEvent) and m.req_id == "done"]
    assert replayed[:2] == [1, 2] and replayed == list(range(1, len(replayed) + 1))


@pytest.mark.asyncio
async def test_an_attach_is_told_only_the_last_committed_seq(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    gates = Gates()
    with anyio.fail_after(WAIT):
        # every batch waits 1.5 s before it commits: emitted events stay uncommitted
        async with durable_host(path, gates, commit_delay=1.5) as host:
            async with open_memory_client(host) as first, \
                    open_memory_client(host) as second:
                await handshake_as(first)
                await handshake_as(second)
                first.send(ChainRequest(id="long", nodes=GATED, entry_node="a", durable=True))
                accepted = await first.receive()
                assert isinstance(accepted, ChainAccepted)
                await gates.reached("g").wait()  # g's start (seq 3) is committed
                gates.gate("g").set()  # g done (4), b start (5): emitted, not committed
                await anyio.wait_all_tasks_blocked()
                assert _committed_events(path)[-1][0] == 3
                second.send(ChainAttach(id="att", run_id=accepted.run_id))
                again = await second.receive()
                rest = await until_response(second)
    assert isinstance(again, ChainAccepted)
    assert (again.run_id, again.last_seq) == (accepted.run_id, 3)
    assert [(m.node_id, m.phase, m.seq) for m in rest if isinstance(m, ChainEvent)] == [
        ("a", "start", 1), ("a", "done", 2), ("g", "start", 3), ("g", "done", 4),
        ("b", "start", 5), ("b", "done", 6)]
    assert isinstance(rest[-1], ChainResponse) and rest[-1].success
