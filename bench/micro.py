"""Micro figures: ``python -m bench.micro`` prints one JSON object (µs per operation).

Each figure is the median of 7 repeats of a loop; the loop size is in its name or below.
- ``decode_us_per_node``: msgspec decode of the 1,000-node ``a_linear_1000`` chain/req into
  this harness's plain Structs (``bench.common.ChainRequest``), per node; stdlib ``json``
  and untyped msgspec for comparison.
- ``encode_us_per_event``: build + msgspec-encode one ``chain/event`` (and stdlib json).
- ``jmespath_*``: compile without jmespath's cache; search a compiled ``n12.output`` against
  a 1,000-node context; the dotted-path fast path on the same.
- ``ours_*``: the same decode / encode through a2e_host's codec (when importable; the
  host's events get their ``id`` and ``ts`` from its own defaults), and
  ``ours_validate_ms_10000_nodes``: validating a 10,000-node linear chain.
- ``asyncio_task_us``, ``anyio_task_group_child_us``, ``thread_start_join_us``: the cost
  of one unit of concurrency of each kind (1,000 per repeat).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import jmespath.parser
import msgspec

from bench.common import ENCODER, REQUEST_DECODER, ChainEvent, DottedPath
from bench.workloads import Workload

REPEATS = 7


def _per(fn: Callable[[], Any], n: int) -> float:
    ts = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6 / n


def figures() -> dict[str, Any]:
    w = Workload("a")
    req = w.request()
    n_nodes = len(w.body["nodes"])
    out: dict[str, Any] = {}
    out["decode_us_per_node"] = _per(lambda: REQUEST_DECODER.decode(req), n_nodes)
    untyped = msgspec.json.Decoder()
    out["decode_untyped_msgspec_us_per_node"] = _per(lambda: untyped.decode(req), n_nodes)
    out["decode_stdlib_json_us_per_node"] = _per(lambda: json.loads(req), n_nodes)

    def enc_msgspec() -> None:
        for i in range(1000):
            ENCODER.encode(ChainEvent(id="0123456789abcdef0123456789abcdef", ts=time.time(),
                                      req_id="r1", node_id="n12", phase="done", output=42,
                                      seq=i))

    def enc_json() -> None:
        for i in range(1000):
            json.dumps({"type": "chain/event", "id": "0123456789abcdef0123456789abcdef",
                        "version": "1.0", "ts": time.time(), "req_id": "r1", "node_id": "n12",
                        "phase": "done", "output": 42, "error": "", "seq": i,
                        "kind": "status", "data": {}}).encode()

    out["encode_us_per_event"] = _per(enc_msgspec, 1000)
    out["encode_stdlib_json_us_per_event"] = _per(enc_json, 1000)

    texts = [f"n{i}.output" for i in range(1000)]
    parser = jmespath.parser.Parser()
    out["jmespath_compile_us"] = _per(lambda: [parser._do_parse(t) for t in texts], 1000)
    ctx = {f"n{i}": {"output": i, "status": "done"} for i in range(1000)}
    compiled = jmespath.compile("n12.output")
    out["jmespath_search_us"] = _per(lambda: [compiled.search(ctx) for _ in range(1000)], 1000)
    dp = DottedPath(["n12", "output"])
    out["dotted_path_us"] = _per(lambda: [dp.search(ctx) for _ in range(1000)], 1000)

    async def noop() -> None:
        return None

    async def tasks() -> None:
        await asyncio.gather(*[asyncio.create_task(noop()) for _ in range(1000)])

    out["asyncio_task_us"] = _per(lambda: asyncio.run(tasks()), 1000)

    async def tg() -> None:
        import anyio

        async with anyio.create_task_group() as g:
            for _ in range(1000):
                g.start_soon(noop)

    out["anyio_task_group_child_us"] = _per(lambda: asyncio.run(tg()), 1000)

    def threads() -> None:
        for _ in range(1000):
            t = threading.Thread(target=lambda: None, daemon=True)
            t.start()
            t.join()

    out["thread_start_join_us"] = _per(threads, 1000)
    out |= ours(req, n_nodes)
    return out


def ours(req: bytes, n_nodes: int) -> dict[str, Any]:
    """The same decode / encode figures through a2e_host's codec, when it imports."""
    try:
        from a2e_host.chains.messages import ChainEvent as HostChainEvent
        from a2e_host.chains.messages import chain_codec
        from a2e_host.codec import encode_message
    except ImportError:
        return {}
    out: dict[str, Any] = {
        "ours_decode_us_per_node": _per(lambda: chain_codec.decode(req), n_nodes)}

    def enc() -> None:
        for i in range(1000):
            encode_message(HostChainEvent(req_id="r1", node_id="n12", phase="done", output=42,
                                          seq=i))

    try:
        out["ours_encode_us_per_event"] = _per(enc, 1000)
    except TypeError:  # the event's constructor changed: skip rather than guess
        pass
    out |= ours_validation()
    return out


def ours_validation(n: int = 10_000) -> dict[str, Any]:
    """Validation (graph, expressions, checks, plan) of an ``n``-node linear chain, ms."""
    from a2e_host.chains.messages import ChainNode, ChainRequest
    from a2e_host.chains.validation import validate_chain
    from a2e_host.limits import Limits, SessionLimits

    class Catalog:
        def tool_names(self) -> list[str]:
            return ["noop"]

        def skill_names(self) -> list[str]:
            return []

        def check_proc(self, node: ChainNode) -> str | None:
            return None

    nodes = [ChainNode(node_id="n0", kind="tool", name="noop", input_map={"x": "input.seed"},
                       next_node="n1")]
    nodes += [ChainNode(node_id=f"n{i}", kind="tool", name="noop",
                        input_map={"x": f"n{i - 1}.output"},
                        next_node=f"n{i + 1}" if i + 1 < n else "") for i in range(1, n)]
    request = ChainRequest(nodes=nodes, entry_node="n0", initial_input={"seed": 42})
    limits = SessionLimits(Limits())
    granted = frozenset({"chains"})
    ms = _per(lambda: validate_chain(request, Catalog(), limits, granted=granted), 1) * 1e-3
    return {"ours_validate_ms_10000_nodes": ms}


def main() -> int:
    json.dump(figures(), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
