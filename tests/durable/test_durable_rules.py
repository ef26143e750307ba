"""Rules of durable runs that need no real process (PROTOCOL.md §5 Durable runs): the
status each ending is stored as, the retention ceiling, cancel by request id from another
connection, the newest attach taking a run over, and run/get paging."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest
from a2e_chains.durable import status_of

from a2e_host.chains.messages import (
    ChainAccepted,
    ChainAttach,
    ChainCancel,
    ChainEvent,
    ChainRequest,
    ChainResponse,
)
from a2e_host.chains.run_messages import RunGet, RunGetResponse, RunList, RunListResponse
from a2e_host.config import HostConfig
from a2e_host.errors import ChainFailure
from a2e_host.limits import limits_from_mapping
from a2e_host.messages import ErrorMessage, Message
from a2e_host.runtime.memory import open_memory_client
from a2e_host.store import RunStatus
from tests.support.durable import (
    GATED,
    WAIT,
    Gates,
    durable_host,
    durable_session,
    handshake_as,
    until_response,
)


def _response(code: str = "") -> ChainResponse:
    error = ChainFailure(code=code, message="x", node_id="", retryable=False) if code else None
    return ChainResponse(success=not code, error=error)


@pytest.mark.parametrize(("code", "status"), [
    ("", RunStatus.SUCCEEDED),
    ("chain_node_error", RunStatus.FAILED),
    ("chain_invalid", RunStatus.FAILED),
    ("cancelled", RunStatus.CANCELLED),
    ("timeout", RunStatus.TIMEOUT),
    ("chain_limit", RunStatus.BUDGET_EXHAUSTED),
    ("interrupted", RunStatus.INTERRUPTED),
])
def test_each_ending_is_stored_as_its_status(code: str, status: RunStatus) -> None:
    assert status_of(_response(code)) is status




@pytest.mark.asyncio
async def test_a_retention_over_max_retention_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    config = HostConfig(limits=limits_from_mapping({"max_retention": 60}))
    with anyio.fail_after(WAIT):
        async with durable_host(tmp_path / "runs.db", Gates(), config=config) as host:
            async with open_memory_client(host) as client:
                await handshake_as(client)
                client.send(ChainRequest(id="r", nodes=GATED, entry_node="a", durable=True,
                                         retention=61))
                refused = await client.receive()
    assert isinstance(refused, ChainResponse) and refused.req_id == "r"
    assert refused.error is not None and refused.error.code == "chain_limit"
    assert refused.error.details == {"ceiling": "max_retention", "scope": "host",
                                     "limit": 60, "requested": 61}
    assert refused.nodes_run == 0


@pytest.mark.asyncio
async def test_a_cancel_by_request_id_from_another_connection_ends_the_run(
    tmp_path: Path,
) -> None:
    gates = Gates()
    with anyio.fail_after(WAIT):
        async with durable_host(tmp_path / "runs.db", gates) as host:
            async with open_memory_client(host) as first, open_memory_client(host) as second:
                await handshake_as(first)
                await handshake_as(second)
                first.send(ChainRequest(id="job", nodes=GATED, entry_node="a", durable=True))
                await gates.reached("g").wait()
                second.send(ChainCancel(id="c", req_id="job"))
                got = await until_response(first)
    response = got[-1]
    assert isinstance(response, ChainResponse) and response.req_id == "job"
    assert response.error is not None and response.error.code == "cancelled"


@pytest.mark.asyncio
async def test_the_newest_attach_takes_the_run_over_from_the_connection_that_had_it(
    tmp_path: Path,
) -> None:
    gates = Gates()
    with anyio.fail_after(WAIT):
        async with durable_host(tmp_path / "runs.db", gates) as host:
            async with open_memory_client(host) as first, open_memory_client(host) as second:
                await handshake_as(first)
                await handshake_as(second)
                first.send(ChainRequest(id="job", nodes=GATED, entry_node="a", durable=True))
                accepted = await first.receive()
                assert isinstance(accepted, ChainAccepted)
                head = [await first.receive() for _ in range(3)]
                second.send(ChainAttach(id="att", run_id=accepted.run_id, since_seq=3))
                assert isinstance(await second.receive(), ChainAccepted)
                gates.gate("g").set()
                rest = await until_response(second)
                first.send(ChainAttach(id="back", run_id=accepted.run_id, since_seq=7))
                refused = await first.receive()
    assert [m.seq for m in head if isinstance(m, ChainEvent)] == [1, 2, 3]
    assert [m.seq for m in rest if isinstance(m, ChainEvent)] == [4, 5, 6]
    assert isinstance(rest[-1], ChainResponse) and rest[-1].success
    # nothing reached the first connection after the takeover: its next message is the
    # answer to its own attach (since_seq 7 is past the last event, 6)
    assert isinstance(refused, ErrorMessage) and refused.code == "bad_since_seq"


@pytest.mark.asyncio
async def test_run_get_pages_through_theevents_of(tmp_path: Path) -> None:
    gates = Gates()
    gates.gate("g").set()
    with anyio.fail_after(WAIT):
        async with durable_session(tmp_path / "runs.db", gates) as (host, client):
            client.send(ChainRequest(id="r", nodes=GATED, entry_node="a", durable=True))
            accepted = (await until_response(client))[0]
            assert isinstance(accepted, ChainAccepted)
            pages: list[RunGetResponse] = []
            since = 0
            while True:
                client.send(RunGet(id=f"g{since}", run_id=accepted.run_id, events=True,
                                   since_seq=since, limit=4))
                page = await client.receive()
                assert isinstance(page, RunGetResponse)
                pages.append(page)
                if not page.next_since_seq:
                    break
                since = page.next_since_seq
    assert [[e["seq"] for e in p.events] for p in pages] == [[1, 2, 3, 4], [5, 6]]
    assert [p.next_since_seq for p in pages] == [4, 0]


@pytest.mark.asyncio
async def test_an_expired_run_refuses_attach_and_resubmission_and_shows_its_status(
    tmp_path: Path,
) -> None:
    gates = Gates()
    gates.gate("g").set()
    with anyio.fail_after(WAIT):
        async with durable_session(tmp_path / "runs.db", gates) as (host, client):
            client.send(ChainRequest(id="r", nodes=GATED, entry_node="a", durable=True,
                                     idempotency_key="k"))
            accepted = (await until_response(client))[0]
            assert isinstance(accepted, ChainAccepted)
            store = host.plugins[0].store
            assert await store.prune(time.time() + 10**7) == 1  # its retention passed
            answers: list[Message] = []
            for message in (
                ChainAttach(id="att", run_id=accepted.run_id),
                ChainRequest(id="again", nodes=GATED, entry_node="a", durable=True,
                             idempotency_key="k"),
                RunGet(id="ev", run_id=accepted.run_id, events=True),
                RunGet(id="rec", run_id=accepted.run_id),
            ):
                client.send(message)
                answers.append(await client.receive())
    assert [(a.req_id, a.code) for a in answers if isinstance(a, ErrorMessage)] == [
        ("att", "run_expired"), ("again", "run_expired"), ("ev", "run_expired")]
    record = answers[-1]
    assert isinstance(record, RunGetResponse) and record.run is not None
    assert (record.run.run_id, record.run.status, record.events) == (
        accepted.run_id, "expired", [])


@pytest.mark.asyncio
async def test_a_negative_retention_is_refused_naming_the_field(tmp_path: Path) -> None:
    with anyio.fail_after(WAIT):
        async with durable_host(tmp_path / "runs.db", Gates()) as host:
            async with open_memory_client(host) as client:
                await handshake_as(client)
                client.send(ChainRequest(id="r", nodes=GATED, entry_node="a", durable=True,
                                         retention=-5))
                refused = await client.receive()
    assert isinstance(refused, ChainResponse) and refused.error is not None
    assert refused.error.code == "chain_invalid"
    [problem] = refused.error.details["errors"]
    assert (problem["field"], problem["message"]) == (
        "retention", "retention must be positive seconds, got -5")


@pytest.mark.asyncio
async def test_run_list_pages_newest_first_and_refuses_a_cursor_it_did_not_give(
    tmp_path: Path,
) -> None:
    gates = Gates()
    gates.gate("g").set()
    with anyio.fail_after(WAIT):
        async with durable_session(tmp_path / "runs.db", gates) as (host, client):
            run_ids = []
            for n in range(3):
                client.send(ChainRequest(id=f"r{n}", nodes=GATED, entry_node="a",
                                         durable=True))
                accepted = (await until_response(client))[0]
                assert isinstance(accepted, ChainAccepted)
                run_ids.append(accepted.run_id)
            client.send(RunList(id="p1", limit=2))
            first = await client.receive()
            assert isinstance(first, RunListResponse) and first.next_cursor
            client.send(RunList(id="p2", limit=2, cursor=first.next_cursor))
            second = await client.receive()
            client.send(RunList(id="bad", cursor="not-a-cursor"))
            refused = await client.receive()
            client.send(RunList(id="big", limit=501))
            too_many = await client.receive()
    assert isinstance(second, RunListResponse)
    assert [r.run_id for r in first.runs] == run_ids[:0:-1]  # newest first
    assert ([r.run_id for r in second.runs], second.next_cursor) == ([run_ids[0]], "")
    assert isinstance(refused, ErrorMessage) and refused.code == "invalid_message"
    assert "next_cursor" in refused.message
    assert isinstance(too_many, ErrorMessage) and too_many.code == "schema_violation"
    assert too_many.detail["path"] == "$.limit"


@pytest.mark.asyncio
async def test_a_host_that_stops_leaves_its_durable_runs_running_in_the_store(
    tmp_path: Path,
) -> None:
    from a2e_host.store import open_store

    gates = Gates()
    with anyio.fail_after(WAIT):
        async with durable_session(tmp_path / "runs.db", gates) as (host, client):
            client.send(ChainRequest(id="long", nodes=GATED, entry_node="a",
                                     durable=True))
            accepted = await client.receive()
            assert isinstance(accepted, ChainAccepted)
            await gates.reached("g").wait()
            # the host stops (its runs are cancelled) with the run waiting in g
        store = await open_store(str(tmp_path / "runs.db"))
        try:
            record = await store.get(accepted.run_id)
            frames = await store.frames(accepted.run_id)
        finally:
            await store.aclose()
    assert record is not None
    assert (record.status, record.response) == (RunStatus.RUNNING, None)
    assert [(f.seq, f.node_id, f.phase) for f in frames] == [
        (1, "a", "start"), (2, "a", "done"), (3, "g", "start")]
