"""The five standard workloads (bench/workloads/*.json, copied unchanged from the
standard set described in workloads/README.md) and smaller versions of the same shapes
for ``--quick`` and tests.

A small version is a prefix of the full workload, so it exercises the same expressions:
``a`` the first N nodes of the line, ``b`` the source, N fan-out nodes and a join reading
those N, ``c`` the first N items, ``d`` the first N nodes (each reads two earlier ones, so
any prefix is closed), ``e`` the first N sleepers.
"""

from __future__ import annotations

import copy
import json
import os
import time
from pathlib import Path
from typing import Any

import msgspec

DIR = Path(__file__).parent / "workloads"

NAMES = {
    "a": "a_linear_1000",
    "b": "b_fanout_1000",
    "c": "c_map_10000",
    "d": "d_diamond_5000",
    "e": "e_sleep_100x50ms",
}
#: Sizes used by ``--quick`` and tests/bench/test_bench_quick.py.
QUICK_SIZES = {"a": 50, "b": 50, "c": 300, "d": 300, "e": 10}

HOST_MAX_CONCURRENCY = 128
"""``max_concurrency`` our host runs the workloads with. Its default ceiling is 64 nodes in
flight per chain (PROTOCOL.md §6); workload e has 100 independent sleepers and the
references have no such ceiling, so the operator setting is raised to let all 100 run at
once, as they do there. Stated in every report."""


class Workload:
    """One workload: the request body, what a correct run returns, and how to count it.

    Attributes:
        key: "a".."e".  name: the file stem.  body: the chain/req dict (no id/ts/session).
        expected: the expected ``final_output``.  final_node: the node that yields it.
        units: node executions (map items for ``c``) — the divisor for "µs per node".
        nodes_run: expected ``nodes_run`` (a map counts once).
        events: expected number of ``chain/event`` messages (start + done per execution).
    """

    def __init__(self, key: str, size: int | None = None) -> None:
        self.key = key
        self.name = NAMES[key]
        self.expected: Any
        self.final_node: str
        body = json.loads((DIR / f"{self.name}.json").read_text())
        nodes = body["nodes"]
        if key == "a":
            if size:
                nodes = nodes[:size]
                nodes[-1] = dict(nodes[-1], next_node="")
            self.expected, self.final_node = 42, nodes[-1]["node_id"]
            self.units = self.nodes_run = len(nodes)
        elif key == "b":
            if size:
                src, fan, join = nodes[0], nodes[1:-1][:size], copy.deepcopy(nodes[-1])
                join["input_map"] = {
                    "x": "[" + ", ".join(f"{f['node_id']}.output" for f in fan) + "]"
                }
                nodes = [src, *fan, join]
            self.expected, self.final_node = [42] * (len(nodes) - 2), "join"
            self.units = self.nodes_run = len(nodes)
        elif key == "c":
            if size:
                body["initial_input"] = {"items": body["initial_input"]["items"][:size]}
            n_items = len(body["initial_input"]["items"])
            self.expected, self.final_node = list(range(n_items)), "m"
            self.units, self.nodes_run = n_items, 1
        elif key == "d":
            if size:
                nodes = nodes[:size]
            self.expected, self.final_node = 42, nodes[-1]["node_id"]
            self.units = self.nodes_run = len(nodes)
        elif key == "e":
            if size:
                nodes = nodes[:size]
            self.expected, self.final_node = None, nodes[-1]["node_id"]
            self.units = self.nodes_run = len(nodes)
        body["nodes"] = nodes
        self.body = body
        self.events = 2 * self.units + (2 if key == "c" else 0)

    def request(self, session_id: str = "", req_id: str | None = None) -> bytes:
        """The encoded chain/req with a fresh ``id`` and ``ts`` (and ``session_id``),
        envelope fields first, in the wire order of the seed's examples."""
        msg = {"type": "chain/req", "id": req_id or os.urandom(16).hex(), "version": "1.0",
               "ts": time.time(), "session_id": session_id}
        for k, v in self.body.items():
            msg.setdefault(k, v)
        return msgspec.json.encode(msg)


def check_response(w: Workload, resp: bytes, events: list[bytes] | None) -> dict[str, Any]:
    """Verify a run. Returns the decoded response; raises AssertionError on a wrong result.

    Checks ``success``, ``final_output == expected``, ``outputs[final_node]``, ``nodes_run``
    and, when ``events`` is given, their count and that ``seq`` runs 1, 2, 3, ...
    """
    r: dict[str, Any] = msgspec.json.decode(resp)
    if r.get("type") != "chain/resp":
        raise AssertionError(f"{w.name}: expected a chain/resp, got {r.get('type')!r}")
    if r.get("success") is not True:
        raise AssertionError(f"{w.name}: success is {r.get('success')!r}: {r.get('error')!r}")
    if r.get("final_output") != w.expected:
        got = repr(r.get("final_output"))[:200]
        raise AssertionError(f"{w.name}: final_output is {got}, expected {w.expected!r:.200}")
    if r.get("outputs", {}).get(w.final_node, "<missing>") != w.expected:
        raise AssertionError(f"{w.name}: outputs[{w.final_node!r}] is wrong or missing")
    if r.get("nodes_run") != w.nodes_run:
        raise AssertionError(f"{w.name}: nodes_run {r.get('nodes_run')} != {w.nodes_run}")
    if events is not None:
        if len(events) != w.events:
            raise AssertionError(f"{w.name}: {len(events)} events, expected {w.events}")
        seqs = [msgspec.json.decode(e)["seq"] for e in events]
        if seqs != list(range(1, len(seqs) + 1)):
            raise AssertionError(f"{w.name}: event seq is not 1, 2, 3, ...")
    return r
