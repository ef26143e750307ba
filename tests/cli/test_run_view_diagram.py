"""The HTML run view's diagram: a control edge that skips layers is drawn beside the boxes
between, not hidden behind them."""

from __future__ import annotations

import re

from a2e_host.chains.messages import ChainNode
from a2e_host.commands.run_page import render_page
from a2e_host.commands.run_trace import RunTrace


def test_a_next_node_past_an_on_error_handler_is_drawn_beside_the_handler_not_under_it(
        ) -> None:
    nodes = [ChainNode(node_id="risky", kind="tool", name="fail", on_error="fallback",
                       next_node="m"),
             ChainNode(node_id="fallback", kind="tool", name="echo", next_node="m"),
             ChainNode(node_id="m", kind="tool", name="echo")]
    page = render_page(nodes, RunTrace(), title="t")
    boxes = {node: (float(x), float(x) + float(w)) for node, x, w in re.findall(
        r'data-node-id="(\w+)"><title>[^<]*</title><rect x="([\d.]+)" y="[\d.]+" '
        r'width="(\d+)"', page)}
    assert set(boxes) == {"risky", "fallback", "m"}
    path = re.search(r'<path class="edge control" data-from="risky" data-to="m" '
                     r'd="([^"]+)"', page)
    assert path is not None
    xs = [float(x) for x in re.findall(r"(-?[\d.]+),", path.group(1))]
    left, right = boxes["fallback"]
    lane = re.search(r"L([\d.]+),", path.group(1))
    assert lane is not None  # a straight run down a lane
    assert not left <= float(lane.group(1)) <= right
    assert xs[0] == xs[-1] == (left + right) / 2  # from risky's bottom to m's top, centred


def test_the_failures_table_says_which_failures_were_handled_and_by_what() -> None:
    import msgspec

    nodes = [ChainNode(node_id="risky", kind="tool", name="fail", on_error="fallback",
                       next_node="m"),
             ChainNode(node_id="fallback", kind="tool", name="echo", next_node="m"),
             ChainNode(node_id="m", kind="map", items_path="input.xs", map_node="t",
                       next_node="last", on_error="broken"),
             ChainNode(node_id="t", kind="tool", name="echo", on_error="skip"),
             ChainNode(node_id="broken", kind="tool", name="echo"),
             ChainNode(node_id="last", kind="tool", name="echo")]
    trace = RunTrace()
    for seq, (node_id, phase) in enumerate(
            [("risky", "start"), ("risky", "error"), ("fallback", "start"),
             ("fallback", "done"), ("m", "start"), ("t[0]", "start"), ("t[0]", "error"),
             ("m", "error"), ("broken", "start"), ("broken", "error"), ("last", "skip")],
            1):
        trace.add_frame(msgspec.json.encode({
            "type": "chain/event", "seq": seq, "ts": 1.0 + seq, "node_id": node_id,
            "phase": phase, "error": f"{node_id} broke" if phase == "error" else ""}))
    page = render_page(nodes, trace, title="t")
    rows = re.findall(r'<tr( class="handled")?><td class="nid">([^<]+)</td>.*?'
                      r"<td>(\d+)</td><td>(.*?)</td></tr>", page)
    assert [(node, bool(handled), then) for handled, node, _, then in rows] == [
        ("risky", True, "handled by <code>fallback</code>"),
        ("t[0]", True, "handled: skipped (<code>on_error: skip</code>)"),
        ("m", False, "handler <code>broken</code>: error"),
        ("broken", False, "")]
