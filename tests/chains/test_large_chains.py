"""Large chains on the real stdio host (PROTOCOL.md §5): a 5,000-way fan-out and a
5,000-item map run every node, stream their events with a gapless ``seq``, and keep the
host's memory bounded."""

from __future__ import annotations

import pytest

from tests.support.process import peak_rss_kib
from tests.support.requests import chain, mapping, tool
from tests.support.stdio import stdio_host

MAP_ITEMS = 5_000
"""Items of the big map: its 10,002 events are ten times the connection's outbox
high-water mark (1,024 frames), so it runs under backpressure as a bigger one would."""


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
async def test_map_over_5000_items_completes_in_order_with_bounded_memory() -> None:
    nodes = mapping("input.xs", tool("t", "add", input={"b": 1}, input_map={"a": "item"}))
    async with stdio_host() as client:
        pid = client.host.process.pid
        before = peak_rss_kib(pid)
        events, resp = await client.run(
            chain("m5k", nodes, initial_input={"xs": list(range(MAP_ITEMS))})
        )
        grown = peak_rss_kib(pid) - before
    assert resp["success"] and resp["nodes_run"] == 1, resp.get("error")
    assert resp["final_output"] == [{"sum": i + 1} for i in range(MAP_ITEMS)]
    assert [e["seq"] for e in events] == list(range(1, 2 * MAP_ITEMS + 3))
    assert {e["node_id"] for e in events if e["phase"] == "done"} == (
        {"m"} | {f"t[{i}]" for i in range(MAP_ITEMS)}
    )
    assert grown < 300 * 1024, f"host peak memory grew by {grown} KiB for a {MAP_ITEMS}-item map"
