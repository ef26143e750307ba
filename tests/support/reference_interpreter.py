"""A sequential reference interpreter of chains, written from PROTOCOL.md §3–§5 and §8.

Tests compare the real scheduler with it. It runs one node at a time, in declaration
order among the nodes that are decided, which the protocol allows: a chain's outcome
does not depend on the order of independent nodes (only the order of their events does).

It reads the document, not the host's code: the graph (§4 table), readiness (§4), the
context (§3), the node kinds (§5), errors, the response (§5) and map items (§8). One
point the document leaves implicit is taken as its natural reading: a template's reads
of other nodes wait with its map (the template runs only inside the map).

Also here: :func:`check_event_stream`, the §5 rules every event stream must follow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jmespath

__all__ = [
    "ToolFailure",
    "RefResult",
    "interpret",
    "check_event_stream",
    "final_output",
    "root_fields",
    "truthy",
]

CONTEXT_KEYS = frozenset({"input", "output", "item", "_item", "index", "error"})
CONTROL = ("next_node", "true_node", "false_node", "on_error")
NODE_DEFAULTS: dict[str, Any] = {
    "name": "",
    "input": {},
    "input_map": {},
    "condition": "",
    "true_node": "",
    "false_node": "",
    "items_path": "",
    "map_node": "",
    "next_node": "",
    "on_error": "abort",
}

Tool = Callable[[dict[str, Any], str, dict[str, Any]], Any]
"""``tool(node, shown_id, args) -> output``; raises :class:`ToolFailure` to fail."""


class ToolFailure(Exception):
    """A tool failed the node (its message is the node's error)."""


class _NodeFailed(Exception):
    pass


def truthy(value: Any) -> bool:
    """JMESPath truthiness (§5): false, null, "", [] and {} are false."""
    return not (value is None or value is False or value in ("", [], {}))


def _body(text: str) -> str:
    stripped = text.strip()
    if stripped == "$":
        return "@"
    return stripped[2:] if stripped.startswith("$.") else text


def root_fields(text: str) -> set[str]:
    """Fields an expression reads from the root of the context (§4: not inside a filter
    or on a projection's right side)."""

    def walk(node: dict[str, Any]) -> set[str]:
        kind = node["type"]
        children = [c for c in node.get("children", []) if isinstance(c, dict)]
        if kind == "field":
            return {node["value"]}
        if kind in (
            "subexpression",
            "index_expression",
            "projection",
            "value_projection",
            "filter_projection",
            "pipe",
            "flatten",
        ):
            return walk(children[0]) if children else set()
        if kind in (
            "comparator",
            "or_expression",
            "and_expression",
            "not_expression",
            "function_expression",
            "multi_select_list",
            "multi_select_dict",
            "key_val_pair",
        ):
            found: set[str] = set()
            for child in children:
                found |= walk(child)
            return found
        return set()  # literal, current, expref, index, slice

    return walk(jmespath.compile(_body(text)).parsed)


def _search(text: str, context: Mapping[str, Any]) -> Any:
    try:
        return jmespath.search(_body(text), dict(context))
    except (jmespath.exceptions.JMESPathError, TypeError, ValueError) as exc:
        raise _NodeFailed(f"expression {text!r} failed: {exc}") from None


@dataclass
class RefResult:
    """What the reference run produced.

    Attributes:
        aborted: a failure under ``on_error: abort`` ended the run.
        success / outputs / final_output / nodes_run: the response fields (§5).
        error_nodes: node ids the response's ``error.node_id`` may name (the aborting
            node, or any unhandled failure).
        phases: phase → node ids with such an event (map items as ``t[i]``).
        events: ``(node_id, phase)`` in the reference's own order.
        abort_failures: nodes that failed under ``abort`` (several only when not stopping).
        template_aborted_maps: maps failed by a template's abort (which of their other items
            started is up to the scheduler).
        started: declared nodes that started.
        terminals: terminal node ids in declaration order.
    """

    aborted: bool = False
    success: bool = True
    outputs: dict[str, Any] = field(default_factory=dict)
    final_output: Any = None
    nodes_run: int = 0
    error_nodes: set[str] = field(default_factory=set)
    phases: dict[str, set[str]] = field(
        default_factory=lambda: {p: set() for p in ("start", "done", "error", "skip")}
    )
    events: list[tuple[str, str]] = field(default_factory=list)
    abort_failures: set[str] = field(default_factory=set)
    template_aborted_maps: set[str] = field(default_factory=set)
    started: list[str] = field(default_factory=list)
    terminals: list[str] = field(default_factory=list)


class _Graph:
    """The edges of §4, from the declaration only."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = {n["node_id"]: {**NODE_DEFAULTS, **n} for n in nodes}
        self.order = [n["node_id"] for n in nodes]
        self.template_of = {
            n["map_node"]: nid
            for nid, n in self.nodes.items()
            if n["kind"] == "map" and n["map_node"]
        }
        # edges[src] = [(dst, kind)], kind in next_node/true_node/false_node/on_error/data
        self.edges: dict[str, list[tuple[str, str]]] = {nid: [] for nid in self.order}
        for nid, node in self.nodes.items():
            if nid in self.template_of:
                continue
            for kind in CONTROL:
                target = node[kind]
                if kind == "on_error" and target in ("abort", "skip"):
                    continue
                if target:
                    self.edges[nid].append((target, kind))
            for text in self.expressions(node):
                for root in root_fields(text):
                    if root in CONTEXT_KEYS or root not in self.nodes:
                        continue
                    waiter = self.template_of.get(nid, nid)
                    self.edges[root].append((waiter, "data"))
        self.preds: dict[str, set[str]] = {nid: set() for nid in self.order}
        self.control_in: dict[str, bool] = dict.fromkeys(self.order, False)
        for src, out in self.edges.items():
            for dst, kind in out:
                self.preds[dst].add(src)
                if kind != "data":
                    self.control_in[dst] = True

    def expressions(self, node: dict[str, Any]) -> Iterable[str]:
        yield from node["input_map"].values()
        if node["kind"] == "branch" and node["condition"]:
            yield node["condition"]
        if node["kind"] == "map" and node["items_path"]:
            yield node["items_path"]

    def terminals(self) -> list[str]:
        return [nid for nid in self.order if nid not in self.template_of and not self.edges[nid]]


def interpret(
    nodes: list[dict[str, Any]],
    initial_input: dict[str, Any],
    tool: Tool,
    *,
    stop_on_abort: bool = True,
) -> RefResult:
    """Run a (valid) chain the way PROTOCOL.md describes, one node at a time.

    Args:
        nodes: the chain's node dicts (absent fields take the seed's defaults).
        initial_input: the context's ``input``.
        tool: runs ``tool`` nodes and templates.
        stop_on_abort: False runs on past abort failures (the failed node fires no edge),
            giving every node that *could* run before an abort and its output.
    """
    graph = _Graph(nodes)
    result = RefResult(terminals=graph.terminals())
    status: dict[str, str] = {}
    fired: dict[str, list[tuple[str, str]]] = {nid: [] for nid in graph.order}
    context: dict[str, Any] = {"input": initial_input}
    failures: dict[str, str] = {}  # failed node → its on_error
    handler_error: dict[str, dict[str, Any]] = {}
    pending = [nid for nid in graph.order if nid not in graph.template_of]

    def event(node_id: str, phase: str) -> None:
        result.events.append((node_id, phase))
        result.phases[phase].add(node_id)

    def fire(src: str, kinds: set[str]) -> None:
        for dst, kind in graph.edges[src]:
            if kind in kinds:
                fired[dst].append((src, kind))

    def run_tool(node: dict[str, Any], shown: str, ctx: Mapping[str, Any]) -> Any:
        args = dict(node["input"])
        for key, text in node["input_map"].items():
            args[key] = _search(text, ctx)
        try:
            return tool(node, shown, args)
        except ToolFailure as exc:
            raise _NodeFailed(str(exc)) from None

    def run_map(nid: str, node: dict[str, Any], ctx: Mapping[str, Any]) -> list[Any]:
        items = _search(node["items_path"], ctx)
        if not isinstance(items, list):
            raise _NodeFailed(f"items_path of {nid!r} is not a list")
        template = graph.nodes[node["map_node"]]
        out: list[Any] = []
        for index, item in enumerate(items):
            shown = f"{template['node_id']}[{index}]"
            event(shown, "start")
            item_ctx = {**context, "item": item, "_item": item, "index": index, "output": None}
            try:
                value = run_tool(template, shown, item_ctx)
            except _NodeFailed as exc:
                event(shown, "error")
                if template["on_error"] == "skip":
                    out.append(None)
                    continue
                result.template_aborted_maps.add(nid)
                raise _NodeFailed(f"map {nid!r} failed at item {index}: {exc}") from None
            event(shown, "done")
            out.append(value)
        return out

    while pending:
        decided = next((nid for nid in pending if all(p in status for p in graph.preds[nid])), None)
        assert decided is not None, "a valid chain always has a decided node"
        nid = decided
        pending.remove(nid)
        node = graph.nodes[nid]
        came = fired[nid]
        if graph.control_in[nid]:
            runs = any(kind != "data" for _, kind in came)
        else:
            runs = not graph.preds[nid] or any(kind == "data" for _, kind in came)
        if not runs:
            status[nid] = "skip"
            context[nid] = {"output": None, "status": "skip"}
            event(nid, "skip")
            continue
        activators = {src for src, kind in came if kind in ("next_node", "true_node", "false_node")}
        own: dict[str, Any] = {
            "output": context[next(iter(activators))]["output"] if len(activators) == 1 else None
        }
        if nid in handler_error:
            own["error"] = handler_error[nid]
        ctx = {**context, **own}
        result.started.append(nid)
        event(nid, "start")
        taken, cond = "", False
        try:
            if node["kind"] == "branch":
                cond = truthy(_search(node["condition"], ctx))
                taken = node["true_node"] if cond else node["false_node"]
                output: Any = {"condition": cond, "taken": taken}
            elif node["kind"] == "map":
                output = run_map(nid, node, ctx)
            else:
                output = run_tool(node, nid, ctx)
        except _NodeFailed as exc:
            status[nid] = "error"
            context[nid] = {"output": None, "status": "error"}
            event(nid, "error")
            policy = node["on_error"]
            if policy == "abort":
                result.abort_failures.add(nid)
                if stop_on_abort:
                    result.aborted = True
                    result.error_nodes = {nid}
                    break
                continue
            failures[nid] = policy
            if policy == "skip":
                fire(nid, {"next_node", "data"})
            else:
                handler_error[policy] = {
                    "node_id": nid,
                    "code": "chain_node_error",
                    "message": str(exc),
                }
                fire(nid, {"on_error"})
            continue
        status[nid] = "done"
        context[nid] = {"output": output, "status": "done"}
        result.outputs[nid] = output
        event(nid, "done")
        kinds = {"next_node", "data"}
        if node["kind"] == "branch" and taken:
            kinds.add("true_node" if cond else "false_node")
        fire(nid, kinds)

    unhandled = {
        nid for nid, policy in failures.items() if policy != "skip" and status.get(policy) != "done"
    }
    if result.abort_failures and not stop_on_abort:
        result.error_nodes = set(result.abort_failures)
    elif not result.aborted:
        result.error_nodes = unhandled
    result.success = not result.abort_failures and not unhandled
    result.nodes_run = len(result.started)
    result.final_output = final_output(result.terminals, result.outputs)
    return result


def final_output(terminals: list[str], outputs: Mapping[str, Any]) -> Any:
    """§5: the output of the last terminal node, in declaration order, that is done."""
    for nid in reversed(terminals):
        if nid in outputs:
            return outputs[nid]
    return None


def check_event_stream(events: list[Any], req_id: str) -> None:
    """§5 rules for one request's events (``ChainEvent``-like objects, in send order):
    ``seq`` 1, 2, 3 … gapless; each started node exactly one ``done``/``error`` after its
    ``start``, with only ``kind: "progress"`` events (phase ``start``) of its own attempts
    between them; a skipped node never starts; nothing starts or is skipped twice."""
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "seq is gapless from 1"
    assert all(e.req_id == req_id for e in events)
    started: set[str] = set()
    ended: set[str] = set()
    skipped: set[str] = set()
    for e in events:
        nid = e.node_id
        if e.kind == "progress":  # an attempt of a node with recovery fields (§5 Recovery)
            assert e.phase == "start", f"{nid} has a progress event in phase {e.phase!r}"
            assert nid in started and nid not in ended, f"{nid} progresses outside its run"
            continue
        if e.phase == "start":
            assert nid not in started and nid not in skipped, f"{nid} starts twice or after skip"
            started.add(nid)
        elif e.phase in ("done", "error"):
            assert nid in started, f"{nid} ends without starting"
            assert nid not in ended, f"{nid} has two terminal events"
            ended.add(nid)
        else:
            assert e.phase == "skip", f"unknown phase {e.phase!r}"
            assert nid not in started and nid not in skipped, f"{nid} skipped twice or after start"
            skipped.add(nid)
    assert started == ended, f"started without a terminal event: {sorted(started - ended)}"
