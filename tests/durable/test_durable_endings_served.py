"""The two endings of a durable run that the other served tests do not reach, on the real
``a2e-host serve`` with a SQLite store (PROTOCOL.md §5 Durable runs): a run past its
timeout is listed ``timeout``, a run stopped by a ceiling is listed ``budget_exhausted``,
exactly, by ``run/list`` and ``run/get``."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from a2e_host.client import connect_ws
from tests.support.durable import SERVE_CONFORMANCE
from tests.support.process import WAIT
from tests.support.ws import serving_argv


@pytest.mark.asyncio
async def test_run_list_shows_a_timed_out_run_as_timeout_and_a_capped_one_as_budget_exhausted(
    tmp_path: Path,
) -> None:
    slow = [{"node_id": "s", "kind": "tool", "name": "sleep", "input": {"seconds": 30}}]
    big = [{"node_id": "b", "kind": "tool", "name": "big", "input": {"bytes": 5000}}]
    argv = [*SERVE_CONFORMANCE, "--store", str(tmp_path / "runs.db")]
    async with serving_argv(argv) as (url, _host):
        with anyio.fail_after(WAIT * 2):
            async with connect_ws(url, agent_caps=["chains", "runs"],
                                  limits={"max_output_bytes": 1000}) as client:
                timed = client.run_chain(slow, "s", durable=True, timeout=1)
                timed_response = await timed.result()
                capped = client.run_chain(big, "b", durable=True)
                capped_response = await capped.result()
                listed = await client.list_runs()
                only_timeout = await client.list_runs(status="timeout")
                only_budget = await client.list_runs(status="budget_exhausted")
                got = await client.get_run(capped.run_id)
    assert timed_response.error is not None and timed_response.error.code == "timeout"
    assert capped_response.error is not None
    assert (capped_response.error.code, capped_response.error.details["ceiling"]) == (
        "chain_limit", "max_output_bytes")
    assert [(r.run_id, r.status) for r in listed.runs] == [
        (capped.run_id, "budget_exhausted"), (timed.run_id, "timeout")]
    assert [r.run_id for r in only_timeout.runs] == [timed.run_id]
    assert [r.run_id for r in only_budget.runs] == [capped.run_id]
    assert got.run is not None and got.run.status == "budget_exhausted"
