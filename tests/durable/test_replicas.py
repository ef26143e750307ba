"""Host replicas sharing a PostgreSQL run store (issue 18, "Done when"): real
``a2e-host serve`` processes on loopback, one throwaway cluster per test process, a
database per test.

- a run accepted by replica A is attached and followed to its response from B (detached
  there and attached again on the way);
- a cancel sent to B stops the run where it runs (A); B lists and gets it;
- A is ``kill -9``ed mid-run: B or C takes the run over within the lease and finishes
  it, ``done`` nodes ran once, a client re-attached to another replica sees a gapless
  sequence;
- A is paused (SIGSTOP) past its lease, the run is taken over and finished, A resumed
  (SIGCONT): none of A's late writes lands, and the node A would have run next never ran.

The blocking recording tools wait on FIFOs the test writes, so the test decides when a
node returns; nothing waits on a sleep that hopes.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from a2e_host.chains.messages import ChainEvent, ChainResponse
from a2e_host.client import HostError, connect_ws
from a2e_host.store import RunStatus, open_store
from tests.support.postgres import require_cluster
from tests.support.process import WAIT
from tests.support.replicas import LEASE, Fifos, calls, open_gate, recorded, replicas

CAPS = ["chains", "runs"]


@pytest.fixture
def store_url() -> str:
    return require_cluster().database("replicas")


def _chain(rec: Path, fifos: Fifos, *, tool: str = "record_block") -> list[dict[str, Any]]:
    """a → b (blocks on the gate) → d; every node records its call in ``rec``."""
    return [
        {"node_id": "a", "kind": "tool", "name": "record", "input": {"path": str(rec)},
         "next_node": "b"},
        {"node_id": "b", "kind": "tool", "name": tool,
         "input": {"path": str(rec), "until": str(fifos.gate), "started": str(fifos.started)},
         "input_map": {"after": "a.output"}, "next_node": "d"},
        {"node_id": "d", "kind": "tool", "name": "record", "input": {"path": str(rec)},
         "input_map": {"after": "b.output"}},
    ]


async def _until_started(run: Any, node: str) -> list[ChainEvent]:
    seen: list[ChainEvent] = []
    async for message in run:
        assert isinstance(message, ChainEvent), message
        seen.append(message)
        if (message.node_id, message.phase) == (node, "start"):
            return seen
    raise AssertionError(f"the run ended before {node} started")


def _seqs(events: list[Any]) -> list[int]:
    return [m.seq for m in events if isinstance(m, ChainEvent)]


@pytest.mark.asyncio
async def test_a_run_accepted_by_one_replica_is_followed_to_its_response_from_another(
    tmp_path: Path, store_url: str,
) -> None:
    rec, fifos = tmp_path / "calls.txt", Fifos(tmp_path, "b")
    async with replicas(store_url, "A", "B", lease=10.0) as hosts:
        with anyio.fail_after(WAIT * 2):
            async with connect_ws(hosts["A"].url, agent_caps=CAPS) as on_a, \
                    connect_ws(hosts["B"].url, agent_caps=CAPS) as on_b:
                run = on_a.run_chain(_chain(rec, fifos), "a", durable=True)
                seen_a = await _until_started(run, "b")
                assert await recorded(fifos.started) == "b"
                followed = on_b.attach(run.run_id, since_seq=0)
                seen_b = await _until_started(followed, "b")
                detached = await on_b.detach(run.run_id)  # B streams it from the store
                assert detached.last_seq == seen_b[-1].seq
                await followed.aclose()
                followed = on_b.attach(run.run_id, since_seq=detached.last_seq)
                await open_gate(fifos.gate)
                seen_a += [m async for m in run]
                seen_b += [m async for m in followed]
                got = await on_b.get_run(run.run_id)
    assert isinstance(seen_b[-1], ChainResponse) and seen_b[-1].success
    assert seen_b[-1].final_output == seen_a[-1].final_output == {"node": "d"}
    assert _seqs(seen_b) == list(range(1, 7)), "every event once, in order, from B"
    assert [(e.node_id, e.phase) for e in seen_b[:-1]] == [
        (e.node_id, e.phase) for e in seen_a[:-1]]
    assert calls(rec) == ["a", "b", "d"]
    assert got.run.status == "succeeded"


@pytest.mark.asyncio
async def test_a_cancel_sent_to_another_replica_stops_the_run_where_it_runs(
    tmp_path: Path, store_url: str,
) -> None:
    nodes = [{"node_id": "s", "kind": "tool", "name": "sleep", "input": {"seconds": 60}}]
    async with replicas(store_url, "A", "B", lease=10.0) as hosts:
        with anyio.fail_after(WAIT * 2):
            async with connect_ws(hosts["A"].url, agent_caps=CAPS) as on_a, \
                    connect_ws(hosts["B"].url, agent_caps=CAPS) as on_b:
                run = on_a.run_chain(nodes, "s", durable=True)
                await _until_started(run, "s")
                listed = await on_b.list_runs()
                assert [(r.run_id, r.status) for r in listed.runs] == [(run.run_id, "running")]
                await on_b.cancel_run(run.run_id)
                rest = [m async for m in run]
                got = await on_b.get_run(run.run_id)
    response = rest[-1]
    assert isinstance(response, ChainResponse) and not response.success
    assert response.error is not None and response.error.code == "cancelled"
    assert got.run.status == "cancelled"


@pytest.mark.asyncio
async def test_a_killed_replicas_run_is_taken_over_within_the_lease_and_done_nodes_ran_once(
    tmp_path: Path, store_url: str,
) -> None:
    rec, fifos = tmp_path / "calls.txt", Fifos(tmp_path, "b")
    nodes = _chain(rec, fifos, tool="record_block_idempotent")
    async with replicas(store_url, "A", "B", "C") as hosts:
        with anyio.fail_after(WAIT * 3):
            async with connect_ws(hosts["A"].url, agent_caps=CAPS) as on_a:
                run = on_a.run_chain(nodes, "a", durable=True)
                before = await _until_started(run, "b")
                assert await recorded(fifos.started) == "b"
                run_id = run.run_id
                await run.aclose()
                os.kill(hosts["A"].pid, signal.SIGKILL)
                killed_at = anyio.current_time()
            # b is idempotent: the replica that takes the run over runs it again
            assert await recorded(fifos.started) == "b"
            taken_after = anyio.current_time() - killed_at
            async with connect_ws(hosts["C"].url, agent_caps=CAPS) as on_c:
                attached = on_c.attach(run_id, since_seq=before[-1].seq)
                await open_gate(fifos.gate)
                rest = [m async for m in attached]
    assert taken_after < LEASE + 5, f"taken over {taken_after:.1f} s after the kill"
    response = rest[-1]
    assert isinstance(response, ChainResponse) and response.success, response
    assert _seqs(before) + _seqs(rest) == list(range(1, len(before) + len(rest))), (
        "gapless across the kill and the replicas")
    ended = [(m.node_id, m.phase) for m in rest if isinstance(m, ChainEvent)]
    assert ended == [("b", "done"), ("d", "start"), ("d", "done")]
    assert Counter(calls(rec)) == {"a": 1, "b": 2, "d": 1}, (
        "a (done) ran once; b, idempotent and in flight, twice; d once")
    store = await open_store(store_url, readonly=True)
    try:
        record = await store.get(run_id)
    finally:
        await store.aclose()
    assert record is not None and record.status is RunStatus.SUCCEEDED
    assert record.owner in ("B", "C") and record.epoch == 1


@pytest.mark.asyncio
async def test_a_paused_replicas_late_writes_never_land_after_its_run_is_taken_over(
    tmp_path: Path, store_url: str,
) -> None:
    rec, fifos = tmp_path / "calls.txt", Fifos(tmp_path, "b")
    async with replicas(store_url, "A", "B") as hosts:
        with anyio.fail_after(WAIT * 3):
            async with connect_ws(hosts["A"].url, agent_caps=CAPS) as on_a:
                run = on_a.run_chain(_chain(rec, fifos), "a", durable=True)
                before = await _until_started(run, "b")
                assert await recorded(fifos.started) == "b"
                run_id = run.run_id
                os.kill(hosts["A"].pid, signal.SIGSTOP)
                # b is not idempotent: B ends it interrupted, and the run with it
                async with connect_ws(hosts["B"].url, agent_caps=CAPS) as on_b:
                    rest = [m async for m in on_b.attach(run_id, since_seq=before[-1].seq)]
                store = await open_store(store_url, readonly=True)
                try:
                    taken = await store.frames(run_id)
                    os.kill(hosts["A"].pid, signal.SIGCONT)
                    await open_gate(fifos.gate, "late")  # A's b returns: done, then d
                    # A notices at its next heartbeat (or first write) that it lost the
                    # run; its connection then hears so, and nothing more is stored
                    late: list[Any] = []
                    with pytest.raises(HostError) as lost:
                        async for message in run:
                            late.append(message)
                    after = await store.frames(run_id)
                    record = await store.get(run_id)
                finally:
                    await store.aclose()
    response = rest[-1]
    assert isinstance(response, ChainResponse) and not response.success
    assert response.error is not None and response.error.code == "interrupted"
    assert after == taken, "none of A's late writes landed"
    assert [f.seq for f in after] == list(range(1, len(after) + 1))
    assert record is not None and record.status is RunStatus.INTERRUPTED
    assert record.owner == "B" and record.response == response_bytes(rest)
    assert not late, "A sent no frame it could not store"
    assert lost.value.code == "runtime_error" and lost.value.retryable
    assert "taken over by another replica" in str(lost.value)
    assert calls(rec) == ["a", "b"], "d never ran: A stopped the run it lost"


def response_bytes(messages: list[Any]) -> bytes | None:
    """The stored form of the last message (the run's ``chain/resp``)."""
    from a2e_host.codec import encode_message

    last = messages[-1]
    return encode_message(last) if isinstance(last, ChainResponse) else None
