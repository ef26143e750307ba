"""With random failures and random recovery fields, the event contract stays exact
(PROTOCOL.md §5 Events, §5 Recovery): every started node and map item has one ``start``
and exactly one terminal event, with only its own ``kind: "progress"`` events between
them; ``seq`` is gapless; the ``chain/resp`` comes last; and each terminal ``data``
agrees with the attempts that were made."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a2e_host.chains.nodes import current_node
from a2e_host.exceptions import NodeError
from tests.support.recovery import Host, make_tool


def behaving(calls: Counter[str]) -> Any:
    """A tool failing its first ``fails`` calls per display id, retryable or not."""

    def tool(args: dict[str, Any]) -> Any:
        ctx = current_node.get()
        assert ctx is not None
        calls[ctx.node_id] += 1
        if calls[ctx.node_id] <= args.get("fails", 0):
            raise NodeError(f"{ctx.node_id} call {calls[ctx.node_id]}",
                            retryable=args.get("retryable", True))
        return {"by": ctx.node_id, "call": calls[ctx.node_id]}

    return tool


def backup(args: dict[str, Any]) -> Any:
    if args.get("backup_fails"):
        raise NodeError("the backup failed too")
    return {"backup": True}


retries = st.one_of(st.none(), st.fixed_dictionaries({
    "max_attempts": st.integers(1, 4),
    "interval": st.sampled_from([0.0, 0.5, 2.0]),
    "backoff_rate": st.sampled_from([1.0, 2.0]),
    "max_delay": st.sampled_from([1.0, 30.0]),
    "jitter": st.sampled_from(["full", "none"]),
    "retry_on": st.sampled_from([[], ["chain_node_error"]]),
}))


@st.composite
def chains(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    n = draw(st.integers(1, 5))
    nodes: list[dict[str, Any]] = []
    for i in range(n):
        node: dict[str, Any] = {
            "node_id": f"n{i}",
            "name": "work",
            "input": {"fails": draw(st.integers(0, 4)), "retryable": draw(st.booleans()),
                      "backup_fails": draw(st.booleans())},
            "on_error": draw(st.sampled_from(["abort", "skip", "skip"])),
        }
        retry = draw(retries)
        if retry is not None:
            node["retry"] = retry
        if draw(st.booleans()):
            node["fallback"] = "backup"
        if i + 1 < n and draw(st.booleans()):
            node["next_node"] = f"n{i + 1}"
        nodes.append(node)
    if draw(st.booleans()):  # a map whose template recovers per item
        template = dict(nodes[-1], node_id="tpl", on_error=draw(st.sampled_from(["abort",
                                                                                 "skip"])))
        template.pop("next_node", None)
        nodes.append({"node_id": "m", "kind": "map", "items_path": "input.xs",
                      "map_node": "tpl", "on_error": "skip"})
        nodes.append(template)
    fields = {"initial_input": {"xs": list(range(draw(st.integers(0, 3))))},
              "timeout": draw(st.sampled_from([3, 300]))}
    return nodes, fields


@pytest.mark.asyncio
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=chains())
async def test_every_started_node_ends_once_whatever_its_attempts(
    chain: tuple[list[dict[str, Any]], dict[str, Any]]
) -> None:
    nodes, fields = chain
    calls: Counter[str] = Counter()
    host = Host([make_tool("work", behaving(calls)), make_tool("backup", backup)])
    run = await host.run(nodes, **fields)  # checks seq, lifecycles, response last
    by_id = {n["node_id"]: n for n in nodes}
    started = {e.node_id for e in run.events if e.phase == "start" and e.kind == "status"}
    assert run.response.nodes_run == len({s for s in started if "[" not in s})
    for shown in started:
        declared = by_id[shown.split("[")[0] if "[" not in shown else "tpl"]
        terminal = run.last(shown)
        assert terminal.phase in ("done", "error") and terminal.kind == "status"
        progress = run.progress(shown)
        if declared.get("kind") == "map":
            assert terminal.data == {} and progress == []
            continue
        retry = declared.get("retry")
        recovers = retry is not None or "fallback" in declared
        if not recovers:
            assert terminal.data == {} and progress == []
            continue
        data = terminal.data
        limit = retry["max_attempts"] if retry else 1
        attempts, errors, fell_back = data["attempts"], data["errors"], data["fallback_used"]
        assert 1 <= attempts <= limit and calls[shown] == attempts
        assert [p["attempt"] for p in progress] == list(range(1, len(progress) + 1))
        assert all(p["of"] == limit for p in progress)
        assert ["fallback" in p for p in progress] == (
            [False] * (len(progress) - 1) + [True] if fell_back else [False] * len(progress))
        assert sum(p["retry_in_s"] for p in progress) <= fields["timeout"]
        if terminal.phase == "done":
            assert data["tool"] == ("backup" if fell_back else "work")
            assert len(errors) == len(progress) == attempts - (0 if fell_back else 1)
        elif not terminal.error.startswith("cancelled:"):
            assert len(progress) == attempts - (0 if fell_back else 1)
            assert len(errors) == attempts + (1 if fell_back else 0)
        else:  # the run ended under it: mid-attempt or mid-wait
            assert attempts - 1 <= len(progress) <= attempts + (1 if fell_back else 0)
            assert len(errors) <= attempts + (1 if fell_back else 0)
