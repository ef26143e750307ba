"""Durable runs on the real ``a2e-host serve`` with a SQLite store, through the client
library over WebSocket (PROTOCOL.md §5 Durable runs): reconnect and attach, resubmit with
an idempotency key, exact statuses in ``run/list``, expiry, and principals kept apart.

The waiting tool is ``block`` (``tests.support.extra_tools_host``): it returns when the
test writes to its FIFO, so the run stays mid-chain for as long as the test wants."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from a2e_host.chains.messages import ChainEvent, ChainResponse
from a2e_host.client import HostError, connect_ws
from tests.support.process import WAIT
from tests.support.ws import serving_argv

EXTRA = [sys.executable, "-m", "tests.support.extra_tools_host", "serve", "--port", "0"]


def _blocked(fifo: Path) -> list[dict[str, Any]]:
    """a (echo) → b (blocks on ``fifo``) → c (echo): seq 1..6 and a response."""
    return [
        {"node_id": "a", "kind": "tool", "name": "echo", "input": {"args": {"v": 1}},
         "next_node": "b"},
        {"node_id": "b", "kind": "tool", "name": "block", "input": {"until": str(fifo)},
         "next_node": "c"},
        {"node_id": "c", "kind": "tool", "name": "echo", "input": {"args": {"v": 2}}},
    ]


async def _open_gate(fifo: Path) -> None:
    """Let ``block`` return: open the FIFO for writing (waits for its reader), write, close."""

    def write() -> None:
        with open(fifo, "w", encoding="utf-8") as gate:
            gate.write("go")

    await anyio.to_thread.run_sync(write)


async def _gate_writer(fifo: Path) -> int:
    """Open the FIFO for writing once ``block`` has it open for reading (its tool is
    executing: a durable run executes it once its ``start`` is committed, so seeing that
    ``start`` does not say the tool got that far yet); the caller writes and closes it."""
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:  # ENXIO: no reader yet
            if exc.errno != errno.ENXIO:
                raise
        await anyio.sleep(0.01)


def _seqs(messages: list[Any]) -> list[tuple[str, str, int]]:
    return [(m.node_id, m.phase, m.seq) for m in messages if isinstance(m, ChainEvent)]


@pytest.mark.asyncio
async def test_a_client_that_reconnects_attaches_and_gets_every_event_once(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    argv = [*EXTRA, "--store", str(tmp_path / "runs.db")]
    async with serving_argv(argv) as (url, _host):
        with anyio.fail_after(WAIT * 2):
            async with connect_ws(url, agent_caps=["chains", "runs"]) as first:
                run = first.run_chain(_blocked(fifo), "a", durable=True)
                before: list[Any] = []
                async for message in run:
                    before.append(message)
                    if len(before) == 3:
                        break
                await run.aclose()
                run_id, req_id = run.run_id, run.req_id
            # the connection is gone; the run waits in b
            async with connect_ws(url, agent_caps=["chains", "runs"]) as second:
                listed = await second.list_runs(status="running")
                attached = second.attach(run_id, since_seq=2)
                third = await attached.__anext__()
                await _open_gate(fifo)
                rest = [third, *[m async for m in attached]]
                done = await second.list_runs()
    assert len(run_id) == 32
    assert _seqs(before) == [("a", "start", 1), ("a", "done", 2), ("b", "start", 3)]
    assert [(r.run_id, r.status) for r in listed.runs] == [(run_id, "running")]
    assert attached.accepted is not None and attached.accepted.req_id == req_id
    assert _seqs(rest) == [("b", "start", 3), ("b", "done", 4), ("c", "start", 5),
                           ("c", "done", 6)]
    responses = [m for m in rest if isinstance(m, ChainResponse)]
    assert len(responses) == 1 and responses[0].success and responses[0].req_id == req_id
    assert responses[0].outputs["b"] == {"read": "go"}
    assert all(m.req_id == req_id for m in rest)
    assert [(r.run_id, r.status, r.last_seq) for r in done.runs] == [(run_id, "succeeded", 6)]


@pytest.mark.asyncio
async def test_resubmitting_an_idempotency_key_attaches_to_the_run_it_started(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    argv = [*EXTRA, "--store", str(tmp_path / "runs.db")]
    async with serving_argv(argv) as (url, _host):
        with anyio.fail_after(WAIT * 2):
            async with connect_ws(url, agent_caps=["chains", "runs"]) as first:
                run = first.run_chain(_blocked(fifo), "a", durable=True,
                                      idempotency_key="order-42")
                async for message in run:
                    if isinstance(message, ChainEvent) and message.seq == 3:
                        break
                await run.aclose()
            async with connect_ws(url, agent_caps=["chains", "runs"]) as second:
                again = second.run_chain(_blocked(fifo), "a", durable=True,
                                         idempotency_key="order-42")
                head = await again.__anext__()
                await _open_gate(fifo)
                everything = [head, *[m async for m in again]]
                listed = await second.list_runs()
    assert again.accepted is not None
    assert again.run_id == run.run_id and again.accepted.req_id == run.req_id
    assert again.accepted.attach_id == again.req_id != run.req_id
    assert [seq for _, _, seq in _seqs(everything)] == [1, 2, 3, 4, 5, 6]
    assert isinstance(everything[-1], ChainResponse) and everything[-1].success
    assert [r.run_id for r in listed.runs] == [run.run_id]  # one run, not two


@pytest.mark.asyncio
async def test_resubmitting_an_idempotency_key_with_another_request_is_refused(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    other = [{"node_id": "a", "kind": "tool", "name": "echo", "input": {"args": {"v": 9}}}]
    argv = [*EXTRA, "--store", str(tmp_path / "runs.db")]
    refusals: list[HostError] = []
    async with serving_argv(argv) as (url, _host):
        with anyio.fail_after(WAIT * 2):
            async with connect_ws(url, agent_caps=["chains", "runs"]) as client:
                run = client.run_chain(_blocked(fifo), "a", durable=True,
                                       idempotency_key="order-7")
                async for message in run:
                    if isinstance(message, ChainEvent) and message.seq == 3:
                        break
                # while it runs: other nodes, then the same nodes with another input
                for nodes, initial in ((other, None), (_blocked(fifo), {"x": 1})):
                    with pytest.raises(HostError) as live:
                        await client.run_chain(nodes, "a", durable=True, initial_input=initial,
                                               idempotency_key="order-7").result()
                    refusals.append(live.value)
                await _open_gate(fifo)
                first = [m async for m in run]
                # once it ended (the stored record): refused again; the same request attaches
                with pytest.raises(HostError) as ended:
                    await client.run_chain(other, "a", durable=True,
                                           idempotency_key="order-7").result()
                refusals.append(ended.value)
                same = await client.run_chain(_blocked(fifo), "a", durable=True,
                                              idempotency_key="order-7").result()
                listed = await client.list_runs()
    assert isinstance(first[-1], ChainResponse) and first[-1].success
    for refusal in refusals:
        assert refusal.code == "idempotency_conflict"
        assert refusal.error.message == (
            f"idempotency_key 'order-7' already names run {run.run_id}, which was sent with "
            "other nodes, entry_node or initial_input; send this request with a fresh "
            "idempotency_key (or resend the original request unchanged to attach to that run)")
        assert refusal.error.detail == {"idempotency_key": "order-7", "run_id": run.run_id}
        assert refusal.error.retryable is False
    assert (same.success, same.req_id, same.outputs["c"]) == (True, run.req_id, {"args": {"v": 2}})
    assert [r.run_id for r in listed.runs] == [run.run_id]  # nothing else was started


@pytest.mark.asyncio
async def test_run_list_shows_each_ending_as_its_exact_status(tmp_path: Path) -> None:
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    argv = [*EXTRA, "--store", str(tmp_path / "runs.db")]
    ok = [{"node_id": "a", "kind": "tool", "name": "echo", "input": {"args": {}}}]
    bad = [{"node_id": "a", "kind": "tool", "name": "fail", "input": {"message": "no"}}]
    async with serving_argv(argv) as (url, _host):
        with anyio.fail_after(WAIT * 2):
            async with connect_ws(url, agent_caps=["chains", "runs"]) as client, \
                    connect_ws(url, agent_caps=["chains", "runs"]) as other:
                succeeded = client.run_chain(ok, "a", durable=True)
                await succeeded.result()
                failed = client.run_chain(bad, "a", durable=True)
                await failed.result()
                cancelled = client.run_chain(_blocked(fifo), "a", durable=True)
                async for message in cancelled:
                    if isinstance(message, ChainEvent) and message.seq == 3:
                        break
                gate = await _gate_writer(fifo)  # the tool runs, blocked in its thread
                await other.cancel_run(cancelled.run_id)  # another connection, same principal
                os.write(gate, b"go")  # the blocked worker thread returns, late
                os.close(gate)
                response = await cancelled.result()
                listed = await other.list_runs()
                only_failed = await other.list_runs(status="failed")
    assert response.error is not None and response.error.code == "cancelled"
    assert [(r.run_id, r.status) for r in listed.runs] == [
        (cancelled.run_id, "cancelled"), (failed.run_id, "failed"),
        (succeeded.run_id, "succeeded")]
    assert [r.run_id for r in only_failed.runs] == [failed.run_id]


@pytest.mark.asyncio
async def test_an_expired_run_answers_run_expired(tmp_path: Path) -> None:
    argv = [*EXTRA, "--store", str(tmp_path / "runs.db")]
    ok = [{"node_id": "a", "kind": "tool", "name": "echo", "input": {"args": {}}}]
    async with serving_argv(argv, A2E_STORE_PRUNE_INTERVAL="0.2") as (url, _host):
        with anyio.fail_after(WAIT * 2):
            async with connect_ws(url, agent_caps=["chains", "runs"]) as client:
                run = client.run_chain(ok, "a", durable=True, retention=1)
                await run.result()
                # the host prunes on its own clock (every 0.2 s here): poll, bounded above
                while (await client.get_run(run.run_id)).run.status != "expired":  # type: ignore[union-attr]  # noqa: ASYNC110, E501
                    await anyio.sleep(0.1)
                with pytest.raises(HostError) as attach:
                    await client.attach(run.run_id).result()
                with pytest.raises(HostError) as get:
                    await client.get_run(run.run_id, events=True)
    assert attach.value.code == "run_expired" and run.run_id in attach.value.message
    assert get.value.code == "run_expired"


@pytest.mark.asyncio
async def test_another_principal_cannot_attach_cancel_get_or_list_a_run(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    argv = [*EXTRA, "--store", str(tmp_path / "runs.db")]
    async with serving_argv(argv, A2E_AUTH_TOKENS="alice:tok-a,bob:tok-b") as (url, _host):
        with anyio.fail_after(WAIT * 2):
            async with connect_ws(url, agent_caps=["chains", "runs"],
                                  auth_token="tok-a") as alice, \
                    connect_ws(url, agent_caps=["chains", "runs"], auth_token="tok-b") as bob:
                run = alice.run_chain(_blocked(fifo), "a", durable=True)
                async for message in run:
                    if isinstance(message, ChainEvent) and message.seq == 3:
                        break
                codes = []
                for attempt in (
                    lambda: bob.attach(run.run_id).result(),
                    lambda: bob.attach("", req_id=run.req_id).result(),
                    lambda: bob.get_run(run.run_id),
                    lambda: bob.detach(run.run_id),
                ):
                    with pytest.raises(HostError) as refused:
                        await attempt()
                    codes.append(refused.value.code)
                await bob.cancel_run(run.run_id)  # answered with an error nobody waits for
                theirs = await bob.list_runs()
                await _open_gate(fifo)
                response = await run.result()
                mine = await alice.list_runs()
    assert codes == ["unknown_run"] * 4
    assert [m.code for m in bob.unrouted if hasattr(m, "code")] == ["unknown_run"]
    assert theirs.runs == []
    assert response.success  # bob's cancel did nothing
    assert [(r.run_id, r.status) for r in mine.runs] == [(run.run_id, "succeeded")]
