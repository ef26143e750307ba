"""The run view's drawing: a control edge that skips layers is drawn beside the boxes
between, not hidden behind them; failures say whether they were handled; each event is
drawn on the node it names."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from a2e_host.chains.messages import ChainNode
from a2e_host.commands.run_page import render_page
from a2e_host.commands.run_trace import RunTrace

CLI = [sys.executable, "-m", "a2e_host"]


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


def test_a_declared_id_that_looks_like_a_map_item_or_a_skills_inner_node_is_its_own_node(
        tmp_path: Path) -> None:
    chain = tmp_path / "chain.json"
    chain.write_text(json.dumps({"entry_node": "a", "nodes": [
        {"node_id": "a", "kind": "tool", "name": "upper", "input": {"text": "x"},
         "next_node": "a/b"},
        {"node_id": "a/b", "kind": "tool", "name": "upper", "input": {"text": "y"},
         "next_node": "a[1]"},
        {"node_id": "a[1]", "kind": "tool", "name": "fail", "input": {"message": "no"}}]}),
        encoding="utf-8")
    record = tmp_path / "run.ndjson"
    run = subprocess.run([*CLI, "run", str(chain), "--tools", "conformance", "--final",
                          "--record", str(record)], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    drawn = subprocess.run([*CLI, "graph", str(chain), "--events", str(record)],
                           capture_output=True, text=True, timeout=60)
    assert drawn.returncode == 0 and drawn.stderr == ""
    classes = [line.strip() for line in drawn.stdout.splitlines()
               if line.strip().startswith("class ")]
    assert classes == ["class a,n_a_b done", "class n_a_1_ error"]


def test_mermaid_ids_for_thousands_of_renamed_nodes_take_linear_time() -> None:
    import time

    from a2e_host.commands.graph import to_mermaid

    # 30,000 ids Mermaid cannot take as written, half of them renamed to one n_x_ form
    nodes = [ChainNode(node_id=f"n-{i}", kind="tool", name="t") for i in range(15_000)]
    nodes += [ChainNode(node_id="x" + chr(0x100 + i), kind="tool", name="t")
              for i in range(15_000)]
    started = time.perf_counter()
    drawn = to_mermaid(nodes)
    took = time.perf_counter() - started
    assert took < 20, f"{took:.1f} s"  # quadratic, it took minutes
    assert 'n_n_0["n-0<br/>tool t"]' in drawn
    assert 'n_x__15000["x\u3b97<br/>tool t"]' in drawn  # the last of the shared form


def test_the_legend_explains_each_edge_style_as_the_diagram_draws_it() -> None:
    nodes = [ChainNode(node_id="a", kind="tool", name="echo", next_node="m"),
             ChainNode(node_id="m", kind="map", items_path="a.output.xs", map_node="t"),
             ChainNode(node_id="t", kind="tool", name="echo", input_map={"v": "a.output"})]
    page = render_page(nodes, RunTrace(), title="t")
    legend = re.search(r"<p class=\"legend\">edges: (.*?)</p>", page)
    assert legend is not None
    samples = re.findall(r'<span class="edge-sample" style="[^"]*border-top:([^"]*) '
                         r'#495057"></span> ([a-z]+)', legend.group(1))
    assert samples == [("1.5px solid", "control"), ("3px solid", "a"),
                       ("1.5px dashed;opacity:0.45", "data")]
    drawn = dict(re.findall(r'<path class="edge (\w+)" data-from="\w+" data-to="\w+" '
                            r'd="[^"]+" fill="none" stroke="#495057"([^/]*) marker-end', page))
    assert drawn == {"control": "", "map": ' stroke-width="2.5"',
                     "data": ' stroke-dasharray="5 4" stroke-opacity="0.45"'}
