"""A durable request holding a NUL character where the PostgreSQL run store keeps text
(its id, chain_id, idempotency_key, a node id) is refused with a clear error, and the replica
keeps serving other durable runs: a real ``a2e-host serve`` on a throwaway cluster."""

from __future__ import annotations

import anyio
import pytest

from a2e_host.chains.messages import ChainNode, ChainRequest, ChainResponse
from a2e_host.client import connect_ws
from tests.support.postgres import require_cluster
from tests.support.process import WAIT
from tests.support.replicas import replicas


def _echo(node_id: str = "e", value: str = "v") -> list[dict[str, object]]:
    return [{"node_id": node_id, "kind": "tool", "name": "echo", "input": {"v": value}}]


@pytest.mark.asyncio
async def test_a_durable_request_with_a_nul_in_a_stored_string_is_refused_and_others_run(
) -> None:
    url = require_cluster().database("nul")
    async with replicas(url, "A", lease=10.0) as hosts:
        with anyio.fail_after(WAIT * 2):
            async with connect_ws(hosts["A"].url, agent_caps=["chains"]) as session:
                refused: dict[str, ChainResponse] = {}
                by_id = ChainRequest(id="q\x00", nodes=[ChainNode(
                    node_id="e", kind="tool", name="echo", input={"v": "v"})],
                    entry_node="e", durable=True)
                for field, run in (
                        ("id", session.send_request(by_id)),
                        ("node_id", session.run_chain(_echo("e\x00x"), "e\x00x",
                                                      durable=True)),
                        ("chain_id", session.run_chain(_echo(), "e", durable=True,
                                                       chain_id="c\x00")),
                        ("idempotency_key", session.run_chain(_echo(), "e", durable=True,
                                                              idempotency_key="k\x00"))):
                    answer = await run.result()
                    assert isinstance(answer, ChainResponse)
                    refused[field] = answer
                    # the replica still serves durable runs after each refusal
                    fine = await session.run_chain(_echo(value=field), "e",
                                                   durable=True).result()
                    assert isinstance(fine, ChainResponse) and fine.success, fine
                    assert fine.final_output == {"v": field}
        assert hosts["A"].host.process.returncode is None, "the replica kept running"
    for field, answer in refused.items():
        assert not answer.success and answer.error is not None
        assert answer.error.code == "chain_invalid", (field, answer.error)
        assert f"field {field} contains a NUL character; remove it" in answer.error.message
