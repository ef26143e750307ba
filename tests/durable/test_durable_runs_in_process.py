"""Durable chains on an in-process host with a SQLite run store (PROTOCOL.md §5 Durable
runs): accepted first, a dropped connection leaves the run going, an attach from another
connection resumes its events with no gap and no duplicate, and principals keep runs
apart."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from a2e_host.chains.messages import (
    ChainAccepted,
    ChainAttach,
    ChainCancel,
    ChainDetach,
    ChainDetached,
    ChainEvent,
    ChainRequest,
    ChainResponse,
)
from a2e_host.chains.run_messages import RunGet, RunGetResponse, RunList, RunListResponse
from a2e_host.config import HostConfig
from a2e_host.messages import ErrorMessage
from a2e_host.runtime.memory import open_memory_client
from tests.support.durable import (
    GATED,
    WAIT,
    Gates,
    durable_host,
    durable_session,
    events_of,
    handshake_as,
    until_response,
)


@pytest.mark.asyncio
async def test_a_durable_run_outlives_its_connection_and_an_attach_resumes_it(
    tmp_path: Path,
) -> None:
    gates = Gates()
    with anyio.fail_after(WAIT):
        async with durable_host(tmp_path / "runs.db", gates) as host:
            async with open_memory_client(host) as first:
                await handshake_as(first)
                first.send(ChainRequest(id="long", nodes=GATED, entry_node="a", durable=True))
                accepted = await first.receive()
                assert isinstance(accepted, ChainAccepted)
                assert accepted.req_id == "long" and len(accepted.run_id) == 32
                seen = [await first.receive() for _ in range(3)]
                assert events_of(seen) == [("a", "start", 1), ("a", "done", 2), ("g", "start", 3)]
            await gates.reached("g").wait()
            assert len(host.runs) == 1  # it runs on, with no connection

            async with open_memory_client(host) as second:
                await handshake_as(second)
                second.send(ChainAttach(id="att", run_id=accepted.run_id, since_seq=2))
                again = await second.receive()
                assert isinstance(again, ChainAccepted)
                assert (again.req_id, again.run_id, again.attach_id, again.last_seq) == (
                    "long", accepted.run_id, "att", 3)
                replayed = await second.receive()
                assert events_of([replayed]) == [("g", "start", 3)]
                gates.gate("g").set()
                rest = await until_response(second)
    assert events_of(rest) == [("g", "done", 4), ("b", "start", 5), ("b", "done", 6)]
    response = rest[-1]
    assert isinstance(response, ChainResponse) and response.success
    assert response.req_id == "long"
    assert all(m.req_id == "long" for m in rest if isinstance(m, ChainEvent))


@pytest.mark.asyncio
async def test_a_finished_run_replays_from_the_store_and_lists_its_status(
    tmp_path: Path,
) -> None:
    gates = Gates()
    gates.gate("g").set()
    with anyio.fail_after(WAIT):
        async with durable_session(tmp_path / "runs.db", gates) as (host, client):
            client.send(ChainRequest(id="r1", nodes=GATED, entry_node="a", durable=True))
            first = await until_response(client)
            accepted = first[0]
            assert isinstance(accepted, ChainAccepted)
            client.send(ChainAttach(id="att", run_id=accepted.run_id, since_seq=4))
            replay = await until_response(client)
            client.send(RunList(id="ls"))
            listed = await client.receive()
            client.send(RunGet(id="get", run_id=accepted.run_id, events=True))
            got = await client.receive()
    assert isinstance(replay[0], ChainAccepted) and replay[0].attach_id == "att"
    assert events_of(replay) == [("b", "start", 5), ("b", "done", 6)]
    assert isinstance(replay[-1], ChainResponse) and replay[-1].req_id == "r1"
    assert isinstance(listed, RunListResponse)
    assert [(r.run_id, r.status, r.last_seq) for r in listed.runs] == [
        (accepted.run_id, "succeeded", 6)]
    assert isinstance(got, RunGetResponse) and got.run is not None
    assert got.run.status == "succeeded" and got.run.response["success"] is True
    assert [e["seq"] for e in got.events] == [1, 2, 3, 4, 5, 6]


@pytest.mark.asyncio
async def test_another_principal_cannot_see_attach_cancel_or_get_a_run(
    tmp_path: Path,
) -> None:
    gates = Gates()
    config = HostConfig(auth_tokens={"alice": "tok-a", "bob": "tok-b"})
    with anyio.fail_after(WAIT):
        async with durable_host(tmp_path / "runs.db", gates, config=config) as host:
            async with open_memory_client(host) as alice, open_memory_client(host) as bob:
                await handshake_as(alice, "tok-a")
                await handshake_as(bob, "tok-b")
                alice.send(ChainRequest(id="mine", nodes=GATED, entry_node="a", durable=True))
                accepted = await alice.receive()
                assert isinstance(accepted, ChainAccepted)
                await gates.reached("g").wait()
                answers = []
                for message in (
                    ChainAttach(id="x1", run_id=accepted.run_id),
                    ChainAttach(id="x2", req_id="mine"),
                    ChainCancel(id="x3", run_id=accepted.run_id),
                    ChainDetach(id="x4", run_id=accepted.run_id),
                    RunGet(id="x5", run_id=accepted.run_id),
                    RunGet(id="x6", run_id="0" * 32),
                ):
                    bob.send(message)
                    answers.append(await bob.receive())
                bob.send(RunList(id="x7"))
                listed = await bob.receive()
                gates.gate("g").set()
                done = await until_response(alice)
    assert [(a.req_id, a.code) for a in answers if isinstance(a, ErrorMessage)] == [
        ("x1", "unknown_run"), ("x2", "unknown_run"), ("x3", "unknown_run"),
        ("x4", "unknown_run"), ("x5", "unknown_run"), ("x6", "unknown_run")]
    # another principal's run reads exactly like one that does not exist
    theirs, missing = answers[4], answers[5]
    assert isinstance(theirs, ErrorMessage) and isinstance(missing, ErrorMessage)
    assert theirs.message.replace(accepted.run_id, "ID") == missing.message.replace(
        "0" * 32, "ID")
    assert theirs.detail == missing.detail
    assert isinstance(listed, RunListResponse) and listed.runs == []
    assert isinstance(done[-1], ChainResponse) and done[-1].success


@pytest.mark.asyncio
async def test_a_durable_request_on_a_host_without_a_store_names_the_store_option(
    tmp_path: Path,
) -> None:
    gates = Gates()
    with anyio.fail_after(WAIT):
        async with durable_host(tmp_path / "runs.db", gates, store=False) as host:
            async with open_memory_client(host) as client:
                await handshake_as(client)
                client.send(ChainRequest(id="d", nodes=GATED, entry_node="a", durable=True))
                refused = await client.receive()
    assert isinstance(refused, ErrorMessage)
    assert (refused.req_id, refused.code) == ("d", "store_required")
    assert "--store PATH" in refused.message


@pytest.mark.asyncio
async def test_detach_stops_the_stream_and_the_run_goes_on(tmp_path: Path) -> None:
    gates = Gates()
    with anyio.fail_after(WAIT):
        async with durable_session(tmp_path / "runs.db", gates) as (host, client):
            client.send(ChainRequest(id="r", nodes=GATED, entry_node="a", durable=True))
            accepted = await client.receive()
            assert isinstance(accepted, ChainAccepted)
            first = [await client.receive() for _ in range(3)]
            client.send(ChainDetach(id="det", run_id=accepted.run_id))
            detached = await client.receive()
            gates.gate("g").set()
            [run] = list(host.runs)
            await run.done.wait()
            client.send(ChainAttach(id="att", run_id=accepted.run_id, since_seq=3))
            rest = await until_response(client)
    assert events_of(first) == [("a", "start", 1), ("a", "done", 2), ("g", "start", 3)]
    assert isinstance(detached, ChainDetached)
    assert (detached.req_id, detached.run_id, detached.last_seq) == ("det", accepted.run_id, 3)
    assert isinstance(rest[0], ChainAccepted)
    assert events_of(rest) == [("g", "done", 4), ("b", "start", 5), ("b", "done", 6)]
