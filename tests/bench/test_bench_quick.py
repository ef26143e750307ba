"""The benchmark's two reference schedulers compute the right answers (fast: < 10 s).

They are the yardsticks a2e-host is measured against, so a wrong reference would make
every ratio meaningless. Each runs small versions of the five standard workloads
(bench/workloads.py) and a few chains that exercise PROTOCOL.md §4/§5 rules the workloads
do not (branch skips, skip propagation, on_error).
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from bench import reference_minimal, reference_spec
from bench.workloads import NAMES, QUICK_SIZES, Workload, check_response


def run_minimal(req: bytes, fast: bool = False) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    events: list[bytes] = []
    resp = asyncio.run(reference_minimal.run_request(req, sink=events.append, fast=fast))
    return msgspec.json.decode(resp), [msgspec.json.decode(e) for e in events]


def run_spec(req: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    events: list[bytes] = []
    resp = reference_spec.run_request(req, sink=events.append)
    return msgspec.json.decode(resp), [msgspec.json.decode(e) for e in events]


RUNNERS = {
    "minimal": run_minimal,
    "minimal_fast": lambda r: run_minimal(r, fast=True),
    "spec": run_spec,
}


@pytest.mark.parametrize("impl", list(RUNNERS))
@pytest.mark.parametrize("key", list(NAMES))
def test_reference_runs_small_workload_to_the_expected_final_output(impl: str, key: str) -> None:
    w = Workload(key, QUICK_SIZES[key])
    events: list[bytes] = []
    if impl == "spec":
        resp = reference_spec.run_request(w.request(), sink=events.append)
    else:
        resp = asyncio.run(
            reference_minimal.run_request(
                w.request(), sink=events.append, fast=impl == "minimal_fast"
            )
        )
    r = check_response(w, resp, events)  # success, final_output, nodes_run, seq 1..n
    if key == "c":
        assert r["final_output"] == list(range(QUICK_SIZES["c"]))
        assert list(r["outputs"]) == ["m"]
        ids = {e["node_id"] for e in map(msgspec.json.decode, events)}
        assert ids == {"m"} | {f"t[{i}]" for i in range(QUICK_SIZES["c"])}
    elif key == "b":
        assert r["final_output"] == [42] * QUICK_SIZES["b"]
        assert len(r["outputs"]) == QUICK_SIZES["b"] + 2
    elif key == "e":
        assert r["final_output"] is None and r["outputs"]["s0"] is None
    else:
        assert r["final_output"] == 42
        assert all(v == 42 for v in r["outputs"].values())


def _chain(nodes: list[dict[str, Any]], entry: str, **extra: Any) -> bytes:
    return msgspec.json.encode(
        {
            "type": "chain/req",
            "id": "r1",
            "version": "1.0",
            "ts": 0.0,
            "nodes": nodes,
            "entry_node": entry,
            **extra,
        }
    )


def _tool(nid: str, name: str = "noop", **kw: Any) -> dict[str, Any]:
    return {"node_id": nid, "kind": "tool", "name": name, **kw}


BRANCH = _chain(
    [
        _tool("a", input_map={"x": "input.n"}, next_node="check"),
        {
            "node_id": "check",
            "kind": "branch",
            "condition": "a.output > `3`",
            "true_node": "big",
            "false_node": "small",
        },
        _tool("big", input={"x": "big"}, input_map={"y": "output.taken"}, next_node="after_big"),
        _tool("after_big", input_map={"x": "big.output"}),
        _tool("small", input_map={"x": "[output.taken, a.output]"}),
    ],
    "a",
    initial_input={"n": 1},
)

FAIL_SKIP = _chain(
    [
        _tool("a", name="sleep_ms", input={"x": 1}, next_node="b", on_error="skip"),
        _tool("b", input_map={"x": "a.status"}),
    ],
    "a",
)

ABORT = _chain(
    [
        _tool("a", name="sleep_ms", input={"x": 1}, next_node="b"),
        _tool("b", input_map={"x": "a.output"}),
    ],
    "a",
)


@pytest.mark.parametrize("impl", list(RUNNERS))
def test_untaken_branch_side_is_skipped_and_the_skip_propagates(impl: str) -> None:
    r, events = RUNNERS[impl](BRANCH)
    assert r["success"] is True
    assert r["outputs"]["check"] == {"condition": False, "taken": "small"}
    assert r["outputs"]["small"] == ["small", 1]  # `output` = the activating node's output
    assert "big" not in r["outputs"] and "after_big" not in r["outputs"]
    skips = [(e["node_id"], e["phase"]) for e in events if e["phase"] == "skip"]
    assert skips == [("big", "skip"), ("after_big", "skip")]
    assert r["final_output"] == ["small", 1]  # terminals: after_big (skipped), small
    assert r["nodes_run"] == 3
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


@pytest.mark.parametrize("impl", list(RUNNERS))
def test_failure_under_skip_lets_successors_run_with_a_null_output(impl: str) -> None:
    r, events = RUNNERS[impl](FAIL_SKIP)  # sleep_ms without "ms" fails
    assert r["success"] is True
    assert r["outputs"] == {"b": "error"}
    assert [(e["node_id"], e["phase"]) for e in events] == [
        ("a", "start"),
        ("a", "error"),
        ("b", "start"),
        ("b", "done"),
    ]


@pytest.mark.parametrize("impl", list(RUNNERS))
def test_failure_under_abort_fails_the_chain_and_starts_nothing_more(impl: str) -> None:
    r, events = RUNNERS[impl](ABORT)
    assert r["success"] is False
    assert r["error"]["code"] == "chain_node_error" and r["error"]["node_id"] == "a"
    assert [(e["node_id"], e["phase"]) for e in events] == [("a", "start"), ("a", "error")]
    assert r["nodes_run"] == 1


@pytest.mark.parametrize("impl", list(RUNNERS))
def test_cycle_is_rejected_before_any_node_starts(impl: str) -> None:
    req = _chain([_tool("a", next_node="b"), _tool("b", next_node="a"), _tool("c")], "c")
    r, events = RUNNERS[impl](req)
    assert (r["success"], r["nodes_run"], events) == (False, 0, [])
    assert r["error"]["code"] == "chain_cycle"
