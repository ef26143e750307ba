"""Per-call overhead of a remote tool on Ray against the same tool in-process:
``python -m bench.remote_ray [--calls N] [--num-cpus C] [--repeats R]`` (extra ``ray``).

Starts one local Ray instance (``ray.init(num_cpus=C)``, no dashboard, 127.0.0.1), then
runs through an in-process host (the chain plugin, as ``a2e-host run`` does) a linear
chain of ``N`` no-op tool nodes (each waits for the one before it: the latency of one
call) and a fan-out of ``N`` independent ones (throughput, bounded by the chain's
``max_concurrency`` and Ray's CPUs), once with ``noop`` in-process and once with
``remote_tools = ["noop"]``, each ``R`` times (the median counts). Warm-up chains (a
fan-out of 8, then one run of the measured chain) first start the Ray workers. For
scale, the same number of bare ``await f.remote()`` calls one after another (Ray's own
latency). Prints one JSON line (the last line of stdout): milliseconds per node for
each, and the difference per call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import anyio
from a2e_chains import ChainPlugin

from a2e_host.chains.toolbox import Toolbox
from a2e_host.client import connect_memory
from a2e_host.config import HostConfig
from a2e_host.runtime.host import Host
from a2e_host.tools import Tool, ToolPack, load_tools, tool

ROOT = Path(__file__).resolve().parent.parent


def noop(args: dict[str, Any]) -> dict[str, Any]:
    return args


def _tools(config: HostConfig) -> list[Tool]:
    del config
    return [tool(noop, blocking=False)]


PACK = ToolPack("raybench", "a no-op tool for the Ray overhead figures", _tools)


def _host(remote: bool) -> Host:
    config = HostConfig(tools=("raybench",), remote_tools=("noop",) if remote else ())
    toolbox = Toolbox(load_tools(config, packs={"raybench": PACK}))
    return Host(config, plugins=[ChainPlugin(config, toolbox=toolbox)])


def _linear(n: int) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = [{"node_id": "n0", "kind": "tool", "name": "noop",
                                    "input": {"i": 0}}]
    for i in range(1, n):
        nodes.append({"node_id": f"n{i}", "kind": "tool", "name": "noop",
                      "input_map": {"i": f"n{i - 1}.output.i"}})
    return nodes


def _fan_out(n: int) -> list[dict[str, Any]]:
    return [{"node_id": f"n{i}", "kind": "tool", "name": "noop", "input": {"i": i}}
            for i in range(n)]


async def _ms_per_node(remote: bool, nodes: list[dict[str, Any]], repeats: int) -> float:
    """The median over ``repeats`` runs of the chain, milliseconds per node."""
    times = []
    async with connect_memory(_host(remote)) as client:
        await client.run_chain(_fan_out(8), "n0", timeout=600).result()  # warm-up
        await client.run_chain(nodes, "n0", timeout=600, streaming=False).result()
        for _ in range(repeats):
            start = time.perf_counter()
            resp = await client.run_chain(nodes, "n0", timeout=600, streaming=False).result()
            times.append(time.perf_counter() - start)
            if not resp.success or len(resp.outputs) != len(nodes):
                raise SystemExit(f"wrong result: {resp.error}")
    return statistics.median(times) * 1000 / len(nodes)


async def _raw_ray_ms(calls: int, repeats: int) -> float:
    """Ray alone: one ``await f.remote()`` after another of a no-op remote function."""
    import ray

    f = ray.remote(max_retries=0)(noop)
    await f.remote({})
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for i in range(calls):
            await f.remote({"i": i})
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000 / calls


async def _measure(calls: int, repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {"calls": calls, "repeats": repeats, "raw_ray_sequential_ms": round(
        await _raw_ray_ms(calls, repeats), 3)}
    for shape, nodes in (("linear", _linear(calls)), ("fan_out", _fan_out(calls))):
        local = await _ms_per_node(False, nodes, repeats)
        remote = await _ms_per_node(True, nodes, repeats)
        out[shape] = {"in_process_ms": round(local, 3), "ray_ms": round(remote, 3),
                      "overhead_ms": round(remote - local, 3)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5, help="runs of each; the median")
    ns = parser.parse_args()
    import ray

    from a2e_host.tools.remote import init_options

    start = time.perf_counter()
    # the workers import bench.remote_ray: Ray's processes inherit the environment
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    ray.init(num_cpus=ns.num_cpus, **init_options(""))
    init_s = time.perf_counter() - start
    try:
        result = anyio.run(_measure, ns.calls, ns.repeats)
    finally:
        ray.shutdown()
    result["ray_init_s"] = round(init_s, 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
