"""Rules of durable runs that need no real process (PROTOCOL.md §5 Durable runs): the
status each ending is stored as, the retention ceiling, cancel by request id from another
connection, the newest attach taking a run over, and run/get paging."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

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
from a2e_host.chains.run_messages import RunGet, RunGetResponse
from a2e_host.config import HostConfig
from a2e_host.errors import ChainFailure
from a2e_host.limits import limits_from_mapping
from a2e_host.messages import ErrorMessage, Message
from a2e_host.runtime.memory import open_memory_client
from a2e_host.store import RunStatus
from tests.support.durable import GATED, Gates, durable_host, handshake_as

WAIT = 20


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


async def _until_response(client: Any) -> list[Message]:
    got: list[Message] = []
    while not got or not isinstance(got[-1], ChainResponse | ErrorMessage):
        got.append(await client.receive())
    return got


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
                got = await _until_response(first)
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
                rest = await _until_response(second)
                first.send(ChainAttach(id="back", run_id=accepted.run_id, since_seq=7))
                refused = await first.receive()
    assert [m.seq for m in head if isinstance(m, ChainEvent)] == [1, 2, 3]
    assert [m.seq for m in rest if isinstance(m, ChainEvent)] == [4, 5, 6]
    assert isinstance(rest[-1], ChainResponse) and rest[-1].success
    # nothing reached the first connection after the takeover: its next message is the
    # answer to its own attach (since_seq 7 is past the last event, 6)
    assert isinstance(refused, ErrorMessage) and refused.code == "bad_since_seq"


@pytest.mark.asyncio
async def test_run_get_pages_through_the_events(tmp_path: Path) -> None:
    gates = Gates()
    gates.gate("g").set()
    with anyio.fail_after(WAIT):
        async with durable_host(tmp_path / "runs.db", gates) as host:
            async with open_memory_client(host) as client:
                await handshake_as(client)
                client.send(ChainRequest(id="r", nodes=GATED, entry_node="a", durable=True))
                accepted = (await _until_response(client))[0]
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
        async with durable_host(tmp_path / "runs.db", gates) as host:
            async with open_memory_client(host) as client:
                await handshake_as(client)
                client.send(ChainRequest(id="r", nodes=GATED, entry_node="a", durable=True,
                                         idempotency_key="k"))
                accepted = (await _until_response(client))[0]
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
