"""A node failure is always answered with exactly one ``chain/resp`` (PROTOCOL.md §4–§5),
whatever ``details`` the failing tool put on its error: the typed failure is made in one
place (:func:`a2e_host.errors.chain_failure_of`, issue 14 item 6) and must stay
sendable."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from a2e_chains import ChainPlugin

from a2e_host.chains.messages import ChainEvent, ChainRequest, ChainResponse
from a2e_host.chains.toolbox import Toolbox
from a2e_host.config import HostConfig
from a2e_host.errors import UNENCODABLE
from a2e_host.exceptions import NodeError
from a2e_host.messages import HandshakeRequest, HandshakeResponse, Message, Ping, Pong
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import open_memory_client
from a2e_host.tools import tool
from a2e_host.tools.registry import ToolRegistry

WAIT = 10  # seconds: the bound on every wait


def failing_tool(details: dict[str, Any]) -> Any:
    @tool(blocking=False)
    def odd(args: dict[str, Any]) -> dict[str, Any]:
        """Fails with ``details`` on its error (a third-party tool's choice)."""
        raise NodeError("odd failure", details=details)

    return odd


@pytest.mark.parametrize(
    "details",
    [
        {"when": object()},  # not JSON-like at all
        {"n": 10**5000},  # an int the encoder refuses (over 4,300 digits)
    ],
    ids=["object", "huge-int"],
)
@pytest.mark.asyncio
async def test_a_tool_error_with_unencodable_details_still_gets_one_chain_resp(
    details: dict[str, Any],
) -> None:
    """Reproduction: a tool pack tool raising ``NodeError("odd failure",
    details={"when": object()})`` in a one-node chain. The runner releases the run,
    then encoding the ``chain/resp`` raises TypeError; the chains plugin sees it was
    "already responded" and only logs "the chain failed inside the host after its
    response": the agent gets ``start`` and ``error`` events and never a
    ``chain/resp`` (same on the pre-issue-14 core)."""
    toolbox = Toolbox(ToolRegistry([failing_tool(details)]))
    host = Host(HostConfig(), plugins=[ChainPlugin(HostConfig(), toolbox)])
    got: list[Message] = []
    with anyio.fail_after(WAIT):
        async with open_memory_client(host) as client:
            client.send(HandshakeRequest(agent_caps=["chains"]))
            assert isinstance(await client.receive(), HandshakeResponse)
            nodes = [{"node_id": "a", "kind": "tool", "name": "odd", "input": {}}]
            client.send(ChainRequest(id="r", nodes=nodes, entry_node="a"))
            while not any(isinstance(m, ChainEvent) and m.phase == "error" for m in got):
                got.append(await client.receive())
            client.send(Ping(id="after"))
            # the chain/resp is the run's and the pong the reader's: either may come first
            with anyio.move_on_after(WAIT / 2):
                while not (any(isinstance(m, Pong) for m in got)
                           and any(isinstance(m, ChainResponse) for m in got)):
                    got.append(await client.receive())
    responses = [m for m in got if isinstance(m, ChainResponse)]
    assert len(responses) == 1, (
        f"expected exactly one chain/resp for 'r', got {[m.TYPE for m in got]}"
    )
    error = responses[0].error
    assert error is not None and (error.code, error.node_id) == ("chain_node_error", "a")
    assert error.details == {UNENCODABLE: list(details)}, "the facts left out are named"
