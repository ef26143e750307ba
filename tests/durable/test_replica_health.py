"""A replica's health on a shared PostgreSQL run store (issue 18, "Operations"): one
process per replica id; once the replica's store connection is gone (the database
restarted: its store failed) ``/readyz`` says no, so a load balancer sends the work
elsewhere, and the replica stops (exit status 3) so its supervisor starts it again."""

from __future__ import annotations

import urllib.error
import urllib.request

import anyio
import pytest

from a2e_host.client import HostError, connect_ws
from a2e_host.store import StoreError, open_store
from a2e_host.store.postgres import PostgresRunStore
from tests.support.postgres import cut_connections, require_cluster
from tests.support.process import WAIT
from tests.support.replicas import replicas
from tests.support.store import frame, record


@pytest.fixture
def url() -> str:
    return require_cluster().database("health")


def _http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=WAIT) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.asyncio
async def test_a_second_replica_under_a_live_replicas_id_is_refused_until_it_closes(
        url: str) -> None:
    first = await open_store(url, owner="A")
    try:
        with pytest.raises(StoreError, match="replica id 'A' is in use by another running"):
            await open_store(url, owner="A")
        other = await open_store(url, owner="B")  # another id is welcome
        await other.aclose()
        reader = await open_store(url, readonly=True)  # an operator's CLI reads as ever
        await reader.aclose()
    finally:
        await first.aclose()
    again = await open_store(url, owner="A")  # the id is free once its holder closed
    await again.aclose()


@pytest.mark.asyncio
async def test_a_store_whose_connections_were_cut_says_why_it_is_not_ready(url: str) -> None:
    store = await open_store(url, owner="A")
    assert isinstance(store, PostgresRunStore)
    try:
        assert store.unready() is None
        assert await anyio.to_thread.run_sync(cut_connections, url) >= 2
        store.create(record("r"))
        store.append("r", frame("r", 1))
        with pytest.raises(StoreError, match="failed"):
            with anyio.fail_after(WAIT):
                await store.flush()
        reason = store.unready()
        assert reason is not None and "failed" in reason and "restart the host" in reason
    finally:
        await store.aclose()
    assert store.unready() is not None


@pytest.mark.asyncio
async def test_a_replica_whose_store_failed_is_not_ready_fails_its_runs_clearly_and_exits_3(
        url: str) -> None:
    async with replicas(url, "A", lease=10.0) as hosts:
        http = "http" + hosts["A"].url[2:] + "/readyz"
        assert await anyio.to_thread.run_sync(_http_get, http) == (200, "ready\n")
        await anyio.to_thread.run_sync(cut_connections, url)
        with anyio.fail_after(WAIT * 2):
            async with connect_ws(hosts["A"].url, agent_caps=["chains"]) as session:
                nodes = [{"node_id": "e", "kind": "tool", "name": "echo", "input": {"v": 1}}]
                with pytest.raises(HostError) as refused:  # accepted, then the store failed
                    await session.run_chain(nodes, "e", durable=True).result()
                # while this connection is open the replica is at most stopping (its
                # grace): not ready, for its store or for its stop
                status, body = await anyio.to_thread.run_sync(_http_get, http)
        said = refused.value.error
        assert said.code == "runtime_error" and said.retryable
        assert said.message.startswith("the run store failed (") and (
            "attach to it then with the last seq you have" in said.message)
        assert status == 503 and body.startswith("not ready: the "), body
        replica = hosts["A"].host
        with anyio.fail_after(WAIT * 2):  # it stops on its own, for its supervisor
            said_why = await replica.wait_stderr(r"a2e-host: the run store \S+ failed .*; "
                                                 "stopping this replica so that its "
                                                 "supervisor starts it again")
            await replica.process.wait()
        assert replica.process.returncode == 3, said_why
