"""200 concurrent clients spread over three host replicas sharing a PostgreSQL run store,
50 durable chains each (issue 18, "Done when"): every response is exact, none is lost,
and the store holds every run, succeeded, once.

Each chain is small (one ``echo`` node) and carries a value unique to its client and
turn, so a response delivered to the wrong request, or twice, cannot pass.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from a2e_host.chains.messages import ChainResponse
from a2e_host.client import connect_ws
from a2e_host.store import RunStatus, open_store
from tests.support.postgres import require_cluster
from tests.support.replicas import replicas

CLIENTS = 200
CHAINS = 50
BOUND = 300  # seconds for all of it, on a loaded 2-core machine


@pytest.mark.asyncio
@pytest.mark.timeout(BOUND + 60)
async def test_200_clients_over_three_replicas_get_every_response_exact(tmp_path: Path) -> None:
    url = require_cluster().database("load")
    answers: dict[str, object] = {}
    failures: list[str] = []
    # every client comes from 127.0.0.1 as one principal: lift the per-peer connection
    # ceiling (64) and the durable runs in flight per principal (64); the default
    # lease: a replica this busy must not lose its runs to a late heartbeat
    async with replicas(url, "A", "B", "C", lease=10.0, A2E_MAX_CONNECTIONS_PER_PEER="256",
                        A2E_MAX_DURABLE_RUNS="256") as hosts:
        urls = [hosts[name].url for name in ("A", "B", "C")]

        async def client(n: int) -> None:
            async with connect_ws(urls[n % 3], agent_caps=["chains"]) as session:
                for turn in range(CHAINS):
                    value = f"{n}-{turn}"
                    nodes = [{"node_id": "e", "kind": "tool", "name": "echo",
                              "input": {"v": value}}]
                    run = session.run_chain(nodes, "e", durable=True)
                    response = await run.result()
                    if not isinstance(response, ChainResponse) or not response.success:
                        failures.append(f"{value}: {response!r}"[:200])
                    answers[run.run_id] = (value, response.final_output)

        started = time.monotonic()
        try:
            with anyio.fail_after(BOUND):
                async with anyio.create_task_group() as tg:
                    for n in range(CLIENTS):
                        tg.start_soon(client, n)
        except BaseException:
            print(f"{len(answers)} of {CLIENTS * CHAINS} chains answered in "
                  f"{time.monotonic() - started:.1f} s")
            for host in hosts.values():  # what the replicas said, for the failure report
                print(host.host.stderr[-3000:].decode("utf-8", "replace"))
            raise
        took = time.monotonic() - started
    print(f"\n{CLIENTS * CHAINS} durable chains over 3 replicas in {took:.1f} s "
          f"({CLIENTS * CHAINS / took:.0f}/s)")
    assert failures == []
    assert len(answers) == CLIENTS * CHAINS, "one run per chain, none lost"
    assert all(out == {"v": value} for value, out in answers.values())
    store = await open_store(url, readonly=True)
    try:
        by_status: dict[RunStatus, int] = {}
        cursor = None
        while True:
            page, cursor = await store.list(cursor=cursor, limit=1000)
            for record in page:
                by_status[record.status] = by_status.get(record.status, 0) + 1
            if cursor is None:
                break
    finally:
        await store.aclose()
    assert by_status == {RunStatus.SUCCEEDED: CLIENTS * CHAINS}
