"""``a2e-host graph``: Mermaid and Graphviz drawings of chain files, checked by structure."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from a2e_host.chains.messages import ChainNode
from a2e_host.commands.graph import chain_edges, to_dot, to_mermaid
from tests.support import REPO

EXAMPLES = REPO / "examples"
CHAIN_FILES = sorted(EXAMPLES.glob("*.json"))

_DECL = re.compile(r"^([A-Za-z_]\w*)(\[\[|\[/|\[|\{|\()")
_EDGE = re.compile(
    r"^([A-Za-z_]\w*) (?:(-->|-\.->|==>)|(-->|==>)\|([^|]*)\||-\. ([^.]*) \.->) ([A-Za-z_]\w*)$"
)


@dataclass
class Mermaid:
    """What a Mermaid flowchart declares, read line by line."""

    header: str
    nodes: list[str] = field(default_factory=list)
    edges: list[tuple[str, str, str, str]] = field(default_factory=list)  # src, arrow, label, dst
    parents: dict[str, str] = field(default_factory=dict)  # node → enclosing subgraph
    subgraphs: list[str] = field(default_factory=list)


def parse_mermaid(text: str) -> Mermaid:
    lines = text.splitlines()
    chart = Mermaid(header=lines[0])
    stack: list[str] = []
    for raw in lines[1:]:
        line = raw.strip()
        if line.startswith("subgraph "):
            name = line.split()[1].split("[")[0]
            chart.subgraphs.append(name)
            stack.append(name)
        elif line == "end":
            assert stack, "an 'end' without a subgraph"
            stack.pop()
        elif edge := _EDGE.match(line):
            src, plain, labelled, label, data_label, dst = edge.groups()
            arrow = plain or labelled or "-.->"
            chart.edges.append((src, arrow, label or data_label or "", dst))
        elif decl := _DECL.match(line):
            chart.nodes.append(decl.group(1))
            if stack:
                chart.parents[decl.group(1)] = stack[-1]
        else:
            raise AssertionError(f"unparsed Mermaid line: {line!r}")
    assert not stack, f"subgraphs left open: {stack}"
    return chart


def nodes_of(path: Path) -> list[ChainNode]:
    body = json.loads(path.read_text(encoding="utf-8"))
    return [ChainNode(**n) for n in body["nodes"]]


def test_every_example_chain_file_is_found() -> None:
    assert {p.name for p in CHAIN_FILES} >= {"repo-report.json", "languages.json"}


@pytest.mark.parametrize("path", CHAIN_FILES, ids=lambda p: p.name)
def test_examples_render_to_well_formed_mermaid(path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "a2e_host", "graph", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    chart = parse_mermaid(done.stdout)
    assert chart.header in ("flowchart TD", "graph TD")
    assert len(chart.nodes) == len(set(chart.nodes)), "a node declared twice"
    declared = {n.node_id for n in nodes_of(path)}
    assert set(chart.nodes) == declared
    for src, _arrow, _label, dst in chart.edges:
        assert src in declared and dst in declared


def test_repo_report_edges_have_the_right_kinds_and_labels() -> None:
    chart = parse_mermaid(to_mermaid(nodes_of(EXAMPLES / "repo-report.json")))
    edges = {(src, dst): (arrow, label) for src, arrow, label, dst in chart.edges}
    assert edges[("files", "read")] == ("-->", "")  # next_node: solid
    assert edges[("size", "large")] == ("-->", "true")
    assert edges[("size", "small")] == ("-->", "false")
    assert edges[("files", "wc")] == ("-.->", "")  # wc reads files.output.paths: dashed
    assert edges[("counts", "size")] == ("-->", "")  # control wins over the parallel data edge
    assert edges[("read", "read_one")] == ("==>", "each item")
    assert chart.parents["read_one"] == "read__each"  # the template sits in the map's box
    assert "read" not in chart.parents


def test_on_error_handler_edge_is_labelled() -> None:
    nodes = [
        ChainNode(node_id="risky", kind="tool", name="fail", on_error="rescue"),
        ChainNode(node_id="rescue", kind="tool", name="echo", input_map={"why": "error.message"}),
    ]
    chart = parse_mermaid(to_mermaid(nodes))
    assert chart.edges == [("risky", "-->", "on_error", "rescue")]


def test_nested_maps_nest_their_subgraphs() -> None:
    nodes = [
        ChainNode(node_id="outer", kind="map", items_path="input.rows", map_node="inner"),
        ChainNode(node_id="inner", kind="map", items_path="item", map_node="cell"),
        ChainNode(node_id="cell", kind="tool", name="upper", input_map={"text": "item"}),
    ]
    text = to_mermaid(nodes)
    chart = parse_mermaid(text)
    assert chart.parents == {"inner": "outer__each", "cell": "inner__each"}
    assert text.index("subgraph inner__each") > text.index("subgraph outer__each")


def test_ids_mermaid_cannot_take_are_replaced_but_labelled() -> None:
    nodes = [
        ChainNode(node_id="end", kind="tool", name="echo", next_node="fetch-data"),
        ChainNode(node_id="fetch-data", kind="tool", name="echo"),
    ]
    text = to_mermaid(nodes)
    chart = parse_mermaid(text)
    assert chart.nodes == ["n_end", "n_fetch_data"]
    assert chart.edges == [("n_end", "-->", "", "n_fetch_data")]
    assert '"fetch-data<br/>tool echo"' in text


def test_data_edges_come_from_expression_roots_only() -> None:
    nodes = [
        ChainNode(node_id="a", kind="tool", name="echo"),
        ChainNode(node_id="b", kind="tool", name="echo"),
        ChainNode(
            node_id="c",
            kind="tool",
            name="echo",
            input_map={"x": "a.output.items[?b == `1`]", "y": "length(b.output)"},
        ),
    ]
    # 'b' inside the filter reads a field of each item, not node b; b's root read is data
    assert [(e.source, e.target, e.kind) for e in chain_edges(nodes)] == [
        ("a", "c", "data"),
        ("b", "c", "data"),
    ]


def test_dot_output_uses_dashed_data_edges_and_clusters() -> None:
    text = to_dot(nodes_of(EXAMPLES / "repo-report.json"))
    assert text.startswith("digraph chain {") and text.rstrip().endswith("}")
    assert text.count("{") == text.count("}")
    assert '"files" -> "wc" [style=dashed];' in text
    assert '"size" -> "large" [label="true"];' in text
    assert 'subgraph "cluster_read" {' in text


def test_unknown_format_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "a2e_host",
            "graph",
            str(EXAMPLES / "languages.json"),
            "--format",
            "png",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "unknown --format 'png'" in done.stderr
