"""Large chains on the real stdio host (PROTOCOL.md §5): a 5,000-way fan-out and a
20,000-item map run every node, stream their events with a gapless ``seq``, and keep the
host's memory bounded."""

from __future__ import annotations

import pytest

from tests.support.process import peak_rss_kib
from tests.support.requests import chain, mapping, tool
from tests.support.stdio import stdio_host


@pytest.mark.asyncio
async def test_five_thousand_way_fan_out_runs_every_branch_with_contiguous_seq() -> None:
    nodes = [tool("root", "echo", input={"v": 1})]
    nodes += [tool(f"f{i}", "add", input={"b": i}, input_map={"a": "root.output.v"})
              for i in range(5_000)]
    async with stdio_host() as client:
        events, resp = await client.run(chain("fan", nodes))
    assert resp["success"] and resp["nodes_run"] == 5_001, resp.get("error")
    assert resp["outputs"]["f1234"] == {"sum": 1_235}
    assert resp["final_output"] == {"sum": 5_000}  # f4999, the last terminal declared
    assert [e["seq"] for e in events] == list(range(1, 10_003))


@pytest.mark.asyncio
async def test_map_over_20000_items_completes_in_order_with_bounded_memory() -> None:
    nodes = mapping("input.xs", tool("t", "add", input={"b": 1}, input_map={"a": "item"}))
    async with stdio_host() as client:
        pid = client.host.process.pid
        before = peak_rss_kib(pid)
        events, resp = await client.run(
            chain("m20k", nodes, initial_input={"xs": list(range(20_000))})
        )
        grown = peak_rss_kib(pid) - before
    assert resp["success"] and resp["nodes_run"] == 1, resp.get("error")
    assert resp["final_output"] == [{"sum": i + 1} for i in range(20_000)]
    assert [e["seq"] for e in events] == list(range(1, 40_003))
    assert {e["node_id"] for e in events if e["phase"] == "done"} == (
        {"m"} | {f"t[{i}]" for i in range(20_000)}
    )
    assert grown < 300 * 1024, f"host peak memory grew by {grown} KiB for a 20,000-item map"
