"""One self-contained HTML page showing a run: the chain drawn with each node's outcome,
a timeline, and the failures (``a2e-host graph … --format html``).

Layer: command support (pure: builds a string). The page fetches nothing and runs no
script: the diagram is inline SVG laid out here (:mod:`~a2e_host.commands.dag_layout`),
the timeline is plain HTML bars, the styles are inline, and a Content-Security-Policy
(``default-src 'none'``) forbids any fetch or script even if a browser were handed one.

Everything that came from the run (node ids, tool names, error codes and messages) is
untrusted: each string is escaped for HTML (``&<>"'``) and its control and bidirectional
formatting characters shown as U+FFFD, so an id like ``<script>`` is text. The page is
bounded whatever the run: map items are aggregated under their template (counts, first
start, last end); at most :data:`MAX_DRAWN_NODES` nodes are drawn,
:data:`MAX_TIMELINE_ROWS` timeline rows and :data:`MAX_FAILURE_ROWS` failures listed
(each message cut at :data:`MAX_MESSAGE_CHARS`), and the page says how many were left out.
"""

from __future__ import annotations

import bisect
import html
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..chains.messages import ChainNode
from .dag_layout import layered_layout
from .graph import (
    DASHED_OUTCOMES,
    OUTCOME_FILLS,
    OUTCOME_STROKES,
    chain_edges,
    item_counts,
    node_outcome,
)
from .run_outcomes import NodeOutcome, event_node
from .run_trace import RunTrace, format_ms

__all__ = ["MAX_DRAWN_NODES", "MAX_FAILURE_ROWS", "MAX_MESSAGE_CHARS", "MAX_TIMELINE_ROWS",
           "render_page"]

MAX_DRAWN_NODES = 400
"""Nodes drawn in the diagram, in declaration order; the rest are counted."""
MAX_TIMELINE_ROWS = 500
"""Timeline rows (one per declared node, a template's items on one row)."""
MAX_FAILURE_ROWS = 200
"""Failures listed."""
MAX_MESSAGE_CHARS = 1000
"""Characters of an error message shown (a longer one is cut, with ``…``)."""
MAX_LABEL_CHARS = 26
"""Characters of a node id in its diagram box (the whole id is in the box's tooltip)."""

_BOX_W, _BOX_H, _GAP_X, _GAP_Y, _PAD = 196, 62, 28, 46, 16
# control characters, line separators and the bidirectional formatting characters (an
# id's text must read as written: no override may reorder what follows it)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e"
                      r"\u2066-\u2069]")


def _text(value: object, limit: int | None = None) -> str:
    """``value`` as HTML text: control characters as U+FFFD, cut at ``limit``, escaped."""
    text = _CONTROL.sub("\ufffd", str(value))
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return html.escape(text, quote=True)


@dataclass(frozen=True, slots=True)
class _Row:
    node_id: str
    kind: str
    outcome: str
    start: float | None
    end: float | None
    note: str


def render_page(nodes: Sequence[ChainNode], trace: RunTrace, *, title: str,
                run_running: bool | None = None) -> str:
    """The page for one run of the chain ``nodes``.

    Args:
        nodes: the chain's declared nodes.
        trace: the run's frames, folded.
        title: what the run is (a file name or a run id); shown, escaped.
        run_running: as :meth:`RunTrace.outcomes`.

    Returns:
        A complete HTML5 document (UTF-8 text).
    """
    outcomes = trace.outcomes(run_running=run_running)
    parts = [
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; img-src data:\">",
        f"<title>a2e run · {_text(title, 200)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Run of <code>{_text(title, 200)}</code></h1>",
        _summary(trace, len(nodes)),
        _undeclared(trace, nodes),
        _legend(),
        "<h2>Chain</h2>",
        _diagram(nodes, outcomes),
        "<h2>Timeline</h2>",
        _timeline(nodes, trace, outcomes),
        "<h2>Failures</h2>",
        _failures(trace, nodes, outcomes),
        "</body></html>\n",
    ]
    return "\n".join(parts)


def _summary(trace: RunTrace, declared: int) -> str:
    end = trace.end
    if end is None:
        status = "<span class=\"st running\">no response recorded (running or cut off)</span>"
    elif end.success:
        status = "<span class=\"st done\">succeeded</span>"
    else:
        where = f" at node <code>{_text(end.node_id, 200)}</code>" if end.node_id else ""
        status = (f"<span class=\"st error\">failed: {_text(end.code, 100)}</span>{where}: "
                  f"{_text(end.message, MAX_MESSAGE_CHARS)}")
    facts = [f"{declared:,} declared nodes", f"{trace.frames:,} events"]
    if end is not None:
        facts.append(f"{format_ms(end.duration_ms)} by the host's clock")
    elif trace.first_ts is not None and trace.last_ts is not None:
        facts.append(f"{format_ms((trace.last_ts - trace.first_ts) * 1000)} of events")
    if trace.seq_gaps:
        facts.append(f"<b>{trace.seq_gaps:,} gaps in seq: events are missing</b>")
    if trace.cut_line:
        facts.append(f"<b>line {trace.cut_line:,} was cut off while written: left out</b>")
    odd = [f"{trace.seq_disorder:,} events out of seq order" if trace.seq_disorder else "",
           f"{trace.repeated_ends:,} nodes ended twice" if trace.repeated_ends else "",
           f"{trace.responses:,} responses" if trace.responses > 1 else ""]
    if any(odd):
        facts.append(f"<b>{', '.join(o for o in odd if o)}: this is not a record as the "
                     "host writes it, and what is drawn may be wrong</b>")
    return f"<p class=\"summary\">{status}<br>{' · '.join(facts)}</p>"


def _undeclared(trace: RunTrace, nodes: Sequence[ChainNode]) -> str:
    missing = trace.undeclared(n.node_id for n in nodes)
    if not missing:
        return ""
    return (f"<p class=\"warn\"><b>The events name {len(missing):,} node"
            f"{'s' if len(missing) > 1 else ''} this chain does not declare</b> (first: "
            f"<code>{_text(missing[0], 200)}</code>): were they recorded from another "
            "chain? Their failures are listed; they are not drawn.</p>")


def _legend() -> str:
    chips = "".join(
        f"<span class=\"chip\" style=\"{_fill_style(name)}\">{name.replace('_', ' ')}</span>"
        for name in OUTCOME_FILLS)
    return f"<p class=\"legend\">{chips}</p><p class=\"legend\">{_EDGE_LEGEND}</p>"


def _edge_sample(border: str) -> str:
    """A short line in the legend drawn as ``border`` (CSS), like an edge of the diagram
    (a span: the page's one ``svg`` is the diagram)."""
    return (f"<span class=\"edge-sample\" style=\"display:inline-block;width:28px;"
            f"vertical-align:middle;border-top:{border} #495057\"></span>")


_CONTROL_EDGE, _MAP_EDGE = "", ' stroke-width="2.5"'
_DATA_EDGE = ' stroke-dasharray="5 4" stroke-opacity="0.45"'
_EDGE_LEGEND = (  # the edges as _diagram draws them (_CONTROL_EDGE, _MAP_EDGE, _DATA_EDGE)
    f"edges: {_edge_sample('1.5px solid')} control (next_node, a branch's true/false, "
    f"on_error) {_edge_sample('3px solid')} a map to its template (each item) "
    f"{_edge_sample('1.5px dashed;opacity:0.45')} data (an expression reads that node's "
    "output)")


def _fill_style(outcome: str) -> str:
    border = "dashed" if outcome in DASHED_OUTCOMES else "solid"
    return (f"background:{OUTCOME_FILLS[outcome]};"
            f"border:1.5px {border} {OUTCOME_STROKES[outcome]}")


def _diagram(nodes: Sequence[ChainNode], outcomes: Mapping[str, NodeOutcome]) -> str:
    drawn = list({n.node_id: n for n in nodes}.values())[:MAX_DRAWN_NODES]
    left_out = len({n.node_id for n in nodes}) - len(drawn)
    by_id = {n.node_id: n for n in drawn}
    edges = [e for e in chain_edges(nodes) if e.source in by_id and e.target in by_id]
    layout = layered_layout(list(by_id), [(e.source, e.target) for e in edges])
    width = _PAD * 2 + max(layout.widest, 1) * (_BOX_W + _GAP_X) - _GAP_X
    height = _PAD * 2 + max(len(layout.layers), 1) * (_BOX_H + _GAP_Y) - _GAP_Y
    where: dict[str, tuple[float, float]] = {}
    for ids in layout.layers:
        row_w = len(ids) * (_BOX_W + _GAP_X) - _GAP_X
        x0 = (width - row_w) / 2
        for node_id in ids:
            where[node_id] = (x0 + layout.slot[node_id] * (_BOX_W + _GAP_X),
                              _PAD + layout.layer[node_id] * (_BOX_H + _GAP_Y))
    out = [f"<div class=\"diagram\"><svg xmlns=\"http://www.w3.org/2000/svg\" "
           f"width=\"{width:.0f}\" height=\"{height:.0f}\" "
           f"viewBox=\"0 0 {width:.0f} {height:.0f}\" role=\"img\" "
           f"aria-label=\"the chain's nodes coloured by outcome\">",
           "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" "
           "markerUnits=\"userSpaceOnUse\" markerWidth=\"9\" markerHeight=\"9\" "
           "orient=\"auto-start-reverse\">"
           "<path d=\"M0,0 L10,5 L0,10 z\" fill=\"#495057\"/></marker></defs>"]
    lefts: dict[int, list[float]] = {}  # layer -> the left x of each of its boxes
    for node_id, (x, _) in where.items():
        lefts.setdefault(layout.layer[node_id], []).append(x)
    for row in lefts.values():
        row.sort()
    for edge in edges:
        (x1, y1), (x2, y2) = where[edge.source], where[edge.target]
        sx, sy, tx, ty = x1 + _BOX_W / 2, y1 + _BOX_H, x2 + _BOX_W / 2, y2
        dash = {"data": _DATA_EDGE, "map": _MAP_EDGE}.get(edge.kind, _CONTROL_EDGE)
        between = [lefts[n] for n in range(layout.layer[edge.source] + 1,
                                             layout.layer[edge.target]) if n in lefts]
        # a control edge past the layers between goes down a free lane beside their boxes
        # (a data edge, faint, may pass behind them: lanes for all would be a thicket)
        lane = (_lane(between, sx, tx, width)
                if between and ty > sy and edge.kind != "data" else None)
        if lane is not None:
            y_top, y_bottom = sy + _GAP_Y / 2, ty - _GAP_Y / 2
            d = (f"M{sx:.1f},{sy:.1f} C{sx:.1f},{y_top:.1f} {lane:.1f},{sy:.1f} "
                 f"{lane:.1f},{y_top:.1f} L{lane:.1f},{y_bottom:.1f} C{lane:.1f},{ty:.1f} "
                 f"{tx:.1f},{y_bottom:.1f} {tx:.1f},{ty:.1f}")
            label_x, label_y = lane + 4, (y_top + y_bottom) / 2
        else:
            if ty <= sy:  # drawn upwards (a cycle): leave from the side
                sx, sy = x1 + _BOX_W, y1 + _BOX_H / 2
            bend = max(abs(ty - sy) / 2, 20)
            d = (f"M{sx:.1f},{sy:.1f} C{sx:.1f},{sy + bend:.1f} {tx:.1f},{ty - bend:.1f} "
                 f"{tx:.1f},{ty:.1f}")
            label_x, label_y = (sx + tx) / 2 + 4, (sy + ty) / 2
        out.append(f"<path class=\"edge {edge.kind}\" data-from=\"{_text(edge.source, 500)}\" "
                   f"data-to=\"{_text(edge.target, 500)}\" d=\"{d}\" fill=\"none\" "
                   f"stroke=\"#495057\"{dash} marker-end=\"url(#arrow)\"/>")
        if edge.label:
            out.append(f"<text class=\"elabel\" x=\"{label_x:.1f}\" y=\"{label_y:.1f}\">"
                       f"{_text(edge.label, 40)}</text>")
    for node_id, node in by_id.items():
        x, y = where[node_id]
        state = node_outcome(node_id, outcomes)
        outcome = outcomes.get(node_id)
        dash = " stroke-dasharray=\"5 3\"" if state in DASHED_OUTCOMES else ""
        rx = 14 if node.kind in ("branch", "map") else 5
        detail = state.replace("_", " ")
        if outcome is not None and outcome.items:
            detail = item_counts(outcome).replace(" · ", ", ")
        if outcome is not None and outcome.duration_ms is not None:
            detail += f" · {format_ms(outcome.duration_ms)}"
        kind = f"{node.kind} {node.name}" if node.name else node.kind
        out.append(
            f"<g class=\"node {state}\" data-node-id=\"{_text(node_id, 500)}\">"
            f"<title>{_text(node_id, 500)} ({_text(kind, 200)}): {_text(detail)}</title>"
            f"<rect x=\"{x:.1f}\" y=\"{y:.1f}\" width=\"{_BOX_W}\" height=\"{_BOX_H}\" "
            f"rx=\"{rx}\" fill=\"{OUTCOME_FILLS[state]}\" stroke=\"{OUTCOME_STROKES[state]}\" "
            f"stroke-width=\"1.5\"{dash}/>"
            f"<text x=\"{x + 10:.1f}\" y=\"{y + 20:.1f}\" class=\"nid\">"
            f"{_text(node_id, MAX_LABEL_CHARS)}</text>"
            f"<text x=\"{x + 10:.1f}\" y=\"{y + 37:.1f}\" class=\"kind\">"
            f"{_text(kind, 30)}</text>"
            f"<text x=\"{x + 10:.1f}\" y=\"{y + 53:.1f}\" class=\"detail\">"
            f"{_text(detail, 34)}</text></g>")
    out.append("</svg></div>")
    if left_out > 0:
        out.append(f"<p class=\"note\">{left_out:,} more nodes not drawn (the first "
                   f"{MAX_DRAWN_NODES:,} are).</p>")
    return "".join(out)


def _lane(between: list[list[float]], sx: float, tx: float, width: float) -> float | None:
    """An x where an edge from ``sx`` to ``tx`` can pass the layers ``between`` (each the
    sorted left x of its boxes) without crossing a box: the free one nearest its middle
    (the straight line itself when it is free); None when no lane is free. Each x is
    checked by bisection: O(boxes · layers · log boxes) for one edge."""
    margin = 6.0  # boxes are _GAP_X > 2 * margin apart: only the box left of x can hold it

    def free(x: float) -> bool:
        for lefts in between:
            i = bisect.bisect_right(lefts, x + margin)
            if i and x <= lefts[i - 1] + _BOX_W + margin:
                return False
        return True

    middle = (sx + tx) / 2
    candidates = [sx, tx, middle]
    for lefts in between:
        for left in lefts:
            candidates += [left - _GAP_X / 2, left + _BOX_W + _GAP_X / 2]
    lanes = [x for x in candidates if 2 <= x <= width - 2 and free(x)]
    return min(lanes, key=lambda x: (abs(x - middle), x)) if lanes else None


def _timeline(nodes: Sequence[ChainNode], trace: RunTrace,
              outcomes: Mapping[str, NodeOutcome]) -> str:
    rows: list[_Row] = []
    for node in {n.node_id: n for n in nodes}.values():
        span = trace.spans.get(node.node_id)
        outcome = outcomes.get(node.node_id)
        note = ""
        if outcome is not None and outcome.items:
            note = item_counts(outcome).replace(" · ", ", ")
        rows.append(_Row(node.node_id, node.kind, node_outcome(node.node_id, outcomes),
                         span.start if span else None, span.end if span else None, note))
    if not rows:
        return "<p class=\"note\">No nodes.</p>"
    rows.sort(key=lambda r: (r.start is None, r.start or 0.0))
    t0 = trace.first_ts if trace.first_ts is not None else 0.0
    t1 = trace.last_ts if trace.last_ts is not None else t0
    total = max(t1 - t0, 1e-6)
    shown = rows[:MAX_TIMELINE_ROWS]
    out = [f"<p class=\"note\">0 is the first event; the whole bar is "
           f"{format_ms(total * 1000)}.</p><table class=\"timeline\"><thead><tr>"
           "<th>node</th><th>kind</th><th class=\"lane\">start → end</th><th>took</th>"
           "</tr></thead><tbody>"]
    for row in shown:
        bar, took = "", row.outcome.replace("_", " ")
        if row.start is not None:
            end = row.end if row.end is not None else t1  # unended: up to the last event
            left = _percent(row.start - t0, total)
            width = max(_percent(end - row.start, total), 0.4)
            bar = (f"<div class=\"bar\" style=\"left:{left:.2f}%;width:"
                   f"{min(width, 100 - left):.2f}%;{_fill_style(row.outcome)}\"></div>")
            took = format_ms((end - row.start) * 1000)
            if row.end is None:
                took += " (not ended)"
        note = f"<br><span class=\"items\">{_text(row.note)}</span>" if row.note else ""
        out.append(f"<tr class=\"{row.outcome}\"><td class=\"nid\">"
                   f"{_text(row.node_id, 80)}{note}</td><td>{_text(row.kind, 20)}</td>"
                   f"<td class=\"lane\">{bar}</td><td>{took}</td></tr>")
    out.append("</tbody></table>")
    if len(rows) > len(shown):
        out.append(f"<p class=\"note\">{len(rows) - len(shown):,} more rows left out (the "
                   f"first {MAX_TIMELINE_ROWS:,} by start are shown).</p>")
    return "".join(out)


def _percent(part: float, total: float) -> float:
    """``part`` as a percentage of ``total``, within 0–100 (0 when the times, from a
    file made by hand, are too far apart for a float)."""
    share = part / total * 100
    return min(max(share, 0.0), 100.0) if math.isfinite(share) else 0.0


def _failures(trace: RunTrace, nodes: Sequence[ChainNode],
              outcomes: Mapping[str, NodeOutcome]) -> str:
    failures = trace.failures[:MAX_FAILURE_ROWS]
    left_out = trace.failures_left_out + len(trace.failures) - len(failures)
    if not failures:
        return "<p class=\"note\">None.</p>"
    by_id = {n.node_id: n for n in nodes}
    out = ["<table class=\"failures\"><thead><tr><th>node</th><th>code</th>"
           "<th>message</th><th>attempts</th><th>then</th></tr></thead><tbody>"]
    for failure in failures:
        node = _text(failure.node_id, 80) if failure.node_id else "<i>the chain</i>"
        handled, then = _handling(failure.node_id, by_id, outcomes)
        row = "<tr class=\"handled\">" if handled else "<tr>"
        out.append(f"{row}<td class=\"nid\">{node}"
                   f"</td><td><code>{_text(failure.code or '—', 60)}</code></td>"
                   f"<td class=\"msg\">{_text(failure.message, MAX_MESSAGE_CHARS)}</td>"
                   f"<td>{failure.attempts}</td><td>{then}</td></tr>")
    out.append("</tbody></table>")
    if left_out:
        out.append(f"<p class=\"note\">{left_out:,} more failures left out (the first "
                   f"{len(failures):,} are listed).</p>")
    return "".join(out)


def _handling(node_id: str, by_id: Mapping[str, ChainNode],
              outcomes: Mapping[str, NodeOutcome]) -> tuple[bool, str]:
    """Whether the failure of ``node_id`` (a map item as ``t[3]``) was handled by its
    node's ``on_error`` (PROTOCOL.md §5 Errors), and that said as HTML."""
    key = event_node(node_id, by_id)
    node = by_id.get(key[0]) if key is not None else None
    if node is None or node.on_error == "abort":
        return False, ""
    if node.on_error == "skip":
        return True, "handled: skipped (<code>on_error: skip</code>)"
    handler = node_outcome(node.on_error, outcomes)
    said = f"<code>{_text(node.on_error, 80)}</code>"
    if handler == "done":
        return True, f"handled by {said}"
    return False, f"handler {said}: {handler.replace('_', ' ')}"


_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#212529;
background:#fff}
h1{font-size:20px;margin:0 0 8px}h2{font-size:16px;margin:24px 0 8px}
code{font-family:ui-monospace,Menlo,Consolas,monospace}
.summary{margin:4px 0}.st{font-weight:600;padding:1px 6px;border-radius:4px}
.st.done{background:#d3f9d8}.st.error{background:#ffc9c9}.st.running{background:#d0ebff}
.legend .chip{display:inline-block;padding:1px 8px;margin-right:6px;border-radius:4px;
font-size:12px}
.diagram{overflow:auto;max-height:80vh;border:1px solid #dee2e6;border-radius:6px}
svg text{font-family:system-ui,sans-serif;fill:#212529}
svg .nid{font-weight:600;font-size:13px}svg .kind{font-size:11px;fill:#495057}
svg .detail{font-size:11px}svg .elabel{font-size:11px;fill:#495057}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:3px 8px;
border-bottom:1px solid #e9ecef;vertical-align:top}
.timeline td.lane{position:relative;width:60%;padding:0}
.timeline .bar{position:absolute;top:5px;height:14px;border-radius:3px;min-width:2px}
.timeline td.nid,.failures td.nid{font-family:ui-monospace,Menlo,monospace;
word-break:break-all}
.items{font-size:12px;color:#495057}.msg{white-space:pre-wrap;word-break:break-word}
.note{color:#495057;font-size:13px}.failures tr.handled td{color:#495057}
.warn{background:#fff3bf;border:1px solid #e67700;border-radius:4px;padding:4px 8px}
"""
