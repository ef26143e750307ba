"""The HTML run view's timeline: each node's bar starts and ends where its events' ``ts``
put it, and times that are missing or absurd draw no nonsense."""

from __future__ import annotations

import re

import msgspec

from a2e_host.chains.messages import ChainNode
from a2e_host.commands.run_page import render_page
from a2e_host.commands.run_trace import RunTrace, format_ms

T0 = 1_800_000_000.0
NODES = [ChainNode(node_id="a", kind="tool", name="word_count", next_node="b"),
         ChainNode(node_id="b", kind="tool", name="word_count")]


def fold(*events: dict[str, object]) -> RunTrace:
    trace = RunTrace()
    for seq, fields in enumerate(events, 1):
        trace.add_frame(msgspec.json.encode({"type": "chain/event", "seq": seq, **fields}))
    return trace


def bars(page: str) -> dict[str, tuple[float, float]]:
    """node id → (left %, width %) of its timeline bar."""
    rows = re.findall(r'<tr class="\w+"><td class="nid">([^<]+)<.*?</tr>', page)
    found = re.findall(r'<tr class="\w+"><td class="nid">([^<]+)<.*?'
                       r'left:([\d.]+)%;width:([\d.]+)%', page)
    assert len(found) <= len(rows)
    return {node: (float(left), float(width)) for node, left, width in found}


def test_each_bar_spans_its_nodes_start_to_end_on_the_runs_time_axis() -> None:
    trace = fold({"ts": T0, "node_id": "a", "phase": "start"},
                 {"ts": T0 + 1.0, "node_id": "a", "phase": "done"},
                 {"ts": T0 + 1.0, "node_id": "b", "phase": "start"},
                 {"ts": T0 + 4.0, "node_id": "b", "phase": "error", "error": "x"})
    page = render_page(NODES, trace, title="t")
    assert bars(page) == {"a": (0.0, 25.0), "b": (25.0, 75.0)}
    assert "the whole bar is 4.00 s." in page
    assert "<td>1.00 s</td>" in page and "<td>3.00 s</td>" in page


def test_times_too_far_apart_for_a_float_draw_bounded_bars_and_a_question_mark() -> None:
    trace = fold({"ts": -1.7e308, "node_id": "a", "phase": "start"},
                 {"ts": 1.7e308, "node_id": "a", "phase": "done"})
    page = render_page(NODES, trace, title="t")
    assert "nan" not in page.lower() and "inf" not in re.sub(r"info|infer", "", page)
    assert bars(page) == {"a": (0.0, 0.4)}
    assert "the whole bar is ?." in page


def test_events_without_ts_have_no_bar_instead_of_one_from_1970() -> None:
    trace = fold({"node_id": "a", "phase": "start"}, {"node_id": "a", "phase": "done"})
    assert trace.first_ts is None and trace.spans["a"].start is None
    assert trace.outcomes()["a"].outcome == "done"
    assert bars(render_page(NODES, trace, title="t")) == {}


def test_a_duration_reads_as_a_duration_whatever_its_size() -> None:
    assert [format_ms(ms) for ms in (0.42, 12.0, 1250.0, 184_000.0, 7_500_000.0,
                                     3 * 86_400_000.0, 1e300, -5.0, -1e300,
                                     float("inf"), float("nan"))] == [
        "0.4 ms", "12 ms", "1.25 s", "3 min 4 s", "2 h 5 min", "3.0 d", "1.16e+292 d",
        "-5.0 ms", "-1.16e+292 d", "?", "?"]
