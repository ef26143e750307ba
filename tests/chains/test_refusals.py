"""Chains refused before any node runs, on the real stdio host (PROTOCOL.md §4, §6): a
cycle is ``chain_cycle`` with its path, and a chain over a ceiling is ``chain_limit``
naming the ceiling, the scope that set it (host or session), the limit and what was
asked."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.support.requests import chain, error_of, mapping, tool
from tests.support.stdio import Client, shared_stdio_host, stdio_host


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    """One stdio host for the module's default-session cases: a refusal leaves its session
    serving the next request, so they run one after another on the same session."""
    async with shared_stdio_host(tmp_path_factory.mktemp("host")) as shared:
        yield shared



@pytest.mark.asyncio(loop_scope="module")
async def test_self_loop_and_two_node_cycle_are_chain_cycle_with_the_path(client: Client) -> None:
    events, resp = await client.run(chain("self", [tool("a", "echo", next_node="a")]))
    err = error_of(resp)
    assert (err["code"], err["node_id"], resp["nodes_run"], events) == (
        "chain_cycle", "a", 0, []
    )
    assert "a → a" in err["message"], err
    nodes = [tool("a", "echo", next_node="b"), tool("b", "echo", input_map={"x": "a.output"})]
    nodes.append(tool("c", "echo", next_node="a"))
    nodes[1]["next_node"] = "a"
    events, resp = await client.run(chain("ring", nodes, "c"))
    err = error_of(resp)
    assert err["code"] == "chain_cycle" and events == [], err
    cycles = [p for p in err["details"]["errors"] if p["code"] == "chain_cycle"]
    assert cycles and set(cycles[0]["path"]) == {"a", "b"}, cycles
    await client.assert_alive("after")


@pytest.mark.asyncio(loop_scope="module")
async def test_10001_nodes_is_chain_limit_naming_max_nodes_at_host_scope(client: Client) -> None:
    nodes = [tool(f"n{i}", "echo", next_node=f"n{i + 1}" if i < 10_000 else "")
             for i in range(10_001)]
    events, resp = await client.run(chain("many", nodes, streaming=True))
    err = error_of(resp)
    assert (err["code"], resp["nodes_run"], events) == ("chain_limit", 0, [])
    limit = [p for p in err["details"]["errors"] if p["code"] == "chain_limit"]
    assert limit and {k: limit[0][k] for k in ("ceiling", "scope", "limit", "requested")} == {
        "ceiling": "max_nodes", "scope": "host", "limit": 10_000, "requested": 10_001,
    }, limit
    await client.assert_alive("after")


@pytest.mark.asyncio(loop_scope="module")
async def test_map_over_100001_items_is_chain_limit_at_host_scope(client: Client) -> None:
    """PROTOCOL.md §6: no session or request lowered max_map_items, so the refusing scope
    is ``host`` (and on a tie the broader scope is named)."""
    nodes = mapping("input.xs", tool("t", "echo", input_map={"i": "index"}))
    _, resp = await client.run(
        chain("huge", nodes, initial_input={"xs": list(range(100_001))}, streaming=False)
    )
    await client.assert_alive("after")
    err = error_of(resp)
    assert (err["code"], err["node_id"]) == ("chain_limit", "m"), err
    assert {k: err["details"][k] for k in ("ceiling", "limit", "requested")} == {
        "ceiling": "max_map_items", "limit": 100_000, "requested": 100_001,
    }
    assert err["details"]["scope"] == "host", (
        f"max_map_items was only set by the host, yet the refusal names scope "
        f"{err['details']['scope']!r} (PROTOCOL.md §6)"
    )


@pytest.mark.asyncio
async def test_map_over_a_session_lowered_max_map_items_names_the_session_scope() -> None:
    nodes = mapping("input.xs", tool("t", "echo", input_map={"i": "index"}))
    async with stdio_host(max_map_items=50) as client:
        _, at = await client.run(
            chain("at", nodes, initial_input={"xs": list(range(50))}, streaming=False)
        )
        _, over = await client.run(
            chain("over", nodes, initial_input={"xs": list(range(51))}, streaming=False)
        )
    assert at["success"] and at["final_output"] == [{"i": i} for i in range(50)]
    assert error_of(over)["details"] == {
        "ceiling": "max_map_items", "scope": "session", "limit": 50, "requested": 51,
    }


@pytest.mark.asyncio
async def test_big_output_over_a_session_lowered_max_output_bytes_is_chain_limit() -> None:
    async with stdio_host(max_output_bytes=1000) as client:
        _, over = await client.run(chain("over", [tool("a", "big", input={"bytes": 2000})]))
        _, under = await client.run(chain("under", [tool("a", "big", input={"bytes": 900})]))
        _, echoed = await client.run(chain(
            "echo", [tool("a", "echo", input_map={"s": "input.s"})],
            initial_input={"s": "y" * 5000}, streaming=False,
        ))
    err = error_of(over)
    assert (err["code"], err["node_id"]) == ("chain_limit", "a"), err
    assert err["details"] == {
        "ceiling": "max_output_bytes", "scope": "session", "limit": 1000, "requested": 2011,
    }
    assert under["success"] and under["final_output"] == {"data": "x" * 900}
    assert error_of(echoed)["details"]["requested"] == 5008


@pytest.mark.asyncio(loop_scope="module")
async def test_big_output_over_the_host_max_output_bytes_names_the_host_scope(
    client: Client,
) -> None:
    """PROTOCOL.md §6: only the host set max_output_bytes (8 MiB), so ``scope`` is ``host``."""
    _, resp = await client.run(
        chain("big", [tool("a", "big", input={"bytes": 9 * 2**20})], streaming=False)
    )
    await client.assert_alive("after")
    err = error_of(resp)
    assert (err["code"], err["details"]["limit"]) == ("chain_limit", 8 * 2**20), err
    assert err["details"]["scope"] == "host", (
        f"max_output_bytes was only set by the host, yet the refusal names scope "
        f"{err['details']['scope']!r} (PROTOCOL.md §6)"
    )
