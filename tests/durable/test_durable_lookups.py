"""Looking a durable run up by ``req_id`` (PROTOCOL.md §5 Durable runs, ``chain/attach``):
the search is bounded, and a miss past the bound says so instead of claiming the run
does not exist."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import anyio
import pytest

from a2e_host.chains.messages import ChainAccepted, ChainAttach, ChainResponse
from a2e_host.chains.run_messages import RunGet, RunGetResponse, RunList, RunListResponse
from a2e_host.codec import encode_message
from a2e_host.config import ANONYMOUS_PRINCIPAL
from a2e_host.messages import ErrorMessage
from a2e_host.runtime.memory import open_memory_client
from a2e_host.store import RunRecord, RunStatus, open_store
from tests.support.durable import Gates, durable_host, handshake_as

WAIT = 20


async def _seed(path: Path, req_ids: list[str]) -> dict[str, str]:
    """Finished runs of the anonymous principal, oldest first; their run ids by req_id."""
    store = await open_store(str(path))
    run_ids: dict[str, str] = {}
    try:
        now = time.time()
        for n, req_id in enumerate(req_ids):
            run_id = f"{n:032x}"
            response = ChainResponse(req_id=req_id, success=True)
            store.create(RunRecord(run_id=run_id, principal=ANONYMOUS_PRINCIPAL,
                                   req_id=req_id, status=RunStatus.SUCCEEDED,
                                   response=encode_message(response), created=now + n,
                                   updated=now + n, retention_until=now + 3600))
            run_ids[req_id] = run_id
        await store.flush()
    finally:
        await store.aclose()
    return run_ids


@pytest.mark.asyncio
async def test_an_attach_by_req_id_past_the_searched_runs_names_the_bound_and_run_id(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    run_ids = await _seed(path, ["old", *[f"new{n}" for n in range(1000)]])
    with anyio.fail_after(WAIT):
        async with durable_host(path, Gates()) as host, open_memory_client(host) as client:
            await handshake_as(client)
            client.send(ChainAttach(id="by-req", req_id="old"))
            missed = await client.receive()
            client.send(ChainAttach(id="by-run", run_id=run_ids["old"]))
            found = await client.receive()
            final = await client.receive()
            client.send(ChainAttach(id="recent", req_id="new999"))
            recent = await client.receive()
    assert isinstance(missed, ErrorMessage) and missed.code == "unknown_run"
    assert "1000 newest runs" in missed.message and "run_id" in missed.message
    assert isinstance(found, ChainAccepted) and found.req_id == "old"
    assert isinstance(final, ChainResponse) and final.req_id == "old" and final.success
    assert isinstance(recent, ChainAccepted) and recent.run_id == run_ids["new999"]


@pytest.mark.asyncio
async def test_listing_runs_reads_no_request_or_response_bodies(tmp_path: Path) -> None:
    big = b'{"x":"' + b"y" * 4_000_000 + b'"}'
    store = await open_store(str(tmp_path / "runs.db"))
    try:
        for n in range(5):
            store.create(RunRecord(run_id=f"{n:032x}", principal="p", req_id=f"r{n}",
                                   request=big, created=float(n), updated=float(n)))
            store.finish(f"{n:032x}", RunStatus.SUCCEEDED, big, 0)
        await store.flush()
        tracemalloc.start()
        try:
            listed, _ = await store.list(principal="p", limit=500)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        fetched = await store.get(f"{4:032x}")
    finally:
        await store.aclose()
    assert [r.req_id for r in listed] == ["r4", "r3", "r2", "r1", "r0"]
    assert [r.status for r in listed] == [RunStatus.SUCCEEDED] * 5
    assert all(r.request == b"" and r.response is None for r in listed)
    assert peak < 1_000_000  # 40 MB of bodies stay on disk
    assert fetched is not None and fetched.request == big and fetched.response == big


@pytest.mark.asyncio
@pytest.mark.parametrize("cursor", ["r9223372036854775808", "r9999999999999999999"])
async def test_a_run_list_cursor_past_sqlite_integers_is_refused_as_not_ours(
    tmp_path: Path, cursor: str,
) -> None:
    with anyio.fail_after(WAIT):
        async with durable_host(tmp_path / "runs.db", Gates()) as host, \
                open_memory_client(host) as client:
            await handshake_as(client)
            client.send(RunList(id="l", cursor=cursor))
            answer = await client.receive()
            client.send(RunList(id="l2", cursor="r9223372036854775807"))
            largest = await client.receive()
    assert isinstance(answer, ErrorMessage) and answer.code == "invalid_message"
    assert "not one this host gave" in answer.message
    assert isinstance(largest, RunListResponse) and largest.runs == []


@pytest.mark.asyncio
async def test_run_get_events_after_a_seq_past_sqlite_integers_is_an_empty_page(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    run_ids = await _seed(path, ["only"])
    with anyio.fail_after(WAIT):
        async with durable_host(path, Gates()) as host, open_memory_client(host) as client:
            await handshake_as(client)
            client.send(RunGet(id="g", run_id=run_ids["only"], events=True, since_seq=2**63))
            answer = await client.receive()
    assert isinstance(answer, RunGetResponse), answer
    assert answer.events == [] and answer.next_since_seq == 0
    assert answer.run.run_id == run_ids["only"] and answer.run.status == "succeeded"
