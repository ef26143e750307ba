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
