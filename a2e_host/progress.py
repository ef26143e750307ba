"""Live progress of one chain, as ``a2e-host run`` shows it.

Layer: client presentation. :class:`ChainProgress` is a pure state machine (no I/O, no
clock: callers pass ``now`` in float seconds) fed with the ``chain/event`` frames of one
request (PROTOCOL.md §5); it renders as a rich table (node, kind, status, duration, map
items with a progress bar) or as one plain line per event.

Node durations are measured by the host's clock: from the ``ts`` of a node's ``start``
event to that of its terminal event, as the chain's ``duration_ms`` is, so a node never
shows longer than its chain because its events were read late (a slow terminal, a long
pipe of lines). A running node's time so far maps the caller's clock onto the host's by
the smallest delay seen between an event's ``ts`` and its arrival.

Map items arrive as node id ``<template>[<index>]``; they are counted on the map that owns
the template. A map's item total is not on the wire: it is computed here by evaluating the
map's ``items_path`` against the context rebuilt from the events seen so far (``input``
and every finished node's ``{"output", "status"}``, PROTOCOL.md §3); when that cannot be
done the bar shows the items seen without a total.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from .chains.messages import ChainEvent, ChainRequest, ChainResponse
from .errors import ChainFailure

__all__ = ["ChainProgress", "NodeProgress", "format_duration"]

_ITEM = re.compile(r"^(?P<base>.+?)(?P<indexes>(?:\[\d+\])+)$")

_STYLE = {
    "pending": ("·", "dim"),
    "running": ("▶", "yellow"),
    "done": ("✓", "green"),
    "skip": ("–", "dim"),
    "error": ("✗", "bold red"),
}


def format_duration(seconds: float | None) -> str:
    """``0.004`` → ``"4 ms"``, ``2.5`` → ``"2.50 s"``, ``None`` → ``""``."""
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    return f"{int(seconds // 60)} min {seconds % 60:04.1f} s"


@dataclass
class NodeProgress:
    """One declared node's state as the events tell it.

    Attributes:
        status: ``pending``, ``running``, ``done``, ``skip`` or ``error``.
        started / finished: the host's clock (the events' ``ts``, float seconds), or
            the caller's where an event carries no ``ts``.
        items_total: a map's item count, None when unknown (or not a map).
        items_done / items_failed / items_started: map item events seen.
    """

    node_id: str
    kind: str
    name: str = ""
    status: str = "pending"
    started: float | None = None
    finished: float | None = None
    error: str = ""
    items_total: int | None = None
    items_started: int = 0
    items_done: int = 0
    items_failed: int = 0

    def duration(self, now: float) -> float | None:
        """Seconds from start to finish (or to ``now``, on the same clock as
        :attr:`started`, while running; never negative); None before start."""
        if self.started is None:
            return None
        return max(0.0, (self.finished if self.finished is not None else now) - self.started)


class ChainProgress:
    """The progress of one chain request, fed event by event.

    Args:
        request: the ``chain/req`` being run (its nodes give kinds, names and maps).
        now: the caller's clock at the start, float seconds.
    """

    def __init__(self, request: ChainRequest, now: float = 0.0) -> None:
        self.request = request
        self.started = now
        self.finished: float | None = None
        self.response: ChainResponse | None = None
        self.templates = {n.map_node for n in request.nodes if n.kind == "map" and n.map_node}
        self.nodes: dict[str, NodeProgress] = {
            n.node_id: NodeProgress(n.node_id, n.kind, n.name)
            for n in request.nodes
            if n.node_id not in self.templates
        }
        self._map_of = {
            n.map_node: n.node_id for n in request.nodes if n.kind == "map" and n.map_node
        }
        self._declared = {n.node_id: n for n in request.nodes}
        self._outputs: dict[str, dict[str, Any]] = {}
        self.events = 0
        self._lag: float | None = None  # smallest (arrival - ts) seen: caller → host clock

    # -- feeding ---------------------------------------------------------------

    def feed(self, event: ChainEvent, now: float) -> None:
        """Apply one ``chain/event`` seen at ``now`` (the caller's clock); the node's
        times are taken from the event's ``ts`` (the host's clock)."""
        self.events += 1
        if event.ts > 0:
            lag = now - event.ts
            self._lag = lag if self._lag is None else min(self._lag, lag)
            now = event.ts
        if event.kind == "progress":  # an attempt of a node still running (§5 Recovery)
            return
        node = self.nodes.get(event.node_id)
        if node is not None:
            self._feed_node(node, event, now)
            return
        match = _ITEM.match(event.node_id)
        if match is None:
            return  # a skill's inner node (``outer/inner``) or unknown: not tabled
        owner = self._map_of.get(match.group("base"))
        target = self.nodes.get(owner) if owner else None
        if target is None:
            return
        if event.phase == "start":
            target.items_started += 1
        elif event.phase == "done":
            target.items_done += 1
        elif event.phase == "error":
            target.items_failed += 1

    def _feed_node(self, node: NodeProgress, event: ChainEvent, now: float) -> None:
        if event.phase == "start":
            node.status = "running"
            node.started = now
            if node.kind == "map":
                node.items_total = self._items_total(node.node_id)
            return
        node.status = event.phase if event.phase in _STYLE else node.status
        node.finished = now
        if event.phase == "error":
            node.error = event.error
        if event.phase in ("done", "skip", "error"):
            self._outputs[node.node_id] = {
                "output": event.output if event.phase == "done" else None,
                "status": event.phase,
            }
        if node.kind == "map" and event.phase == "done" and isinstance(event.output, list):
            node.items_total = len(event.output)

    def finish(self, response: ChainResponse, now: float) -> None:
        """Record the ``chain/resp`` seen at ``now``."""
        self.response = response
        self.finished = now

    def _items_total(self, map_id: str) -> int | None:
        node = self._declared[map_id]
        try:
            from .chains.expressions import compile_expression

            context: dict[str, Any] = {"input": self.request.initial_input, **self._outputs}
            activators = [
                n.node_id
                for n in self.request.nodes
                if map_id in (n.next_node, n.true_node, n.false_node)
                and self._outputs.get(n.node_id, {}).get("status") == "done"
            ]
            context["output"] = (
                self._outputs[activators[0]]["output"] if len(activators) == 1 else None
            )
            items = compile_expression(node.items_path).search(context)
        except Exception:  # noqa: BLE001 - a display hint only; the host decides
            return None
        return len(items) if isinstance(items, list) else None

    # -- rendering -------------------------------------------------------------

    def plain_line(self, event: ChainEvent, now: float) -> str:
        """One line for one event, e.g. ``[  3] done    read_one[2]  12 ms``."""
        node = self.nodes.get(event.node_id)
        what = event.node_id
        if event.kind == "progress":
            data = event.data
            failed = f"attempt {data.get('attempt')}/{data.get('of')} failed: {data.get('error')}"
            if data.get("fallback"):
                return f"[{event.seq:>3}] fallback {what} -> {data['fallback']}  {failed}"
            return f"[{event.seq:>3}] retry {what}  {failed}"
        if node is not None and event.phase == "start":
            what += f" ({node.kind}{' ' + node.name if node.name else ''})"
        line = f"[{event.seq:>3}] {event.phase:<5} {what}"
        if node is not None and event.phase != "start":
            took = format_duration(node.duration(self._host_now(now)))
            if took:
                line += f"  {took}"
        data = event.data
        if data and event.phase != "start":  # what recovery did (PROTOCOL.md §5 Recovery)
            if data.get("fallback_used"):
                line += f"  via fallback {data.get('tool')}"
            if data.get("attempts", 1) > 1:
                line += f"  ({data['attempts']} attempts)"
            if data.get("cache") == "hit":
                line += "  cache hit"
        if event.phase == "error" and event.error:
            line += f"  error: {event.error}"
        return line

    def _host_now(self, now: float) -> float:
        """The caller's ``now`` on the host's clock (the clock of the nodes' times)."""
        return now - self._lag if self._lag is not None else now

    def summary(self) -> str:
        """One line on the whole chain: success, nodes run, duration (from the response)."""
        resp = self.response
        if resp is None:
            return "chain running"
        if resp.success:
            nodes = "node" if resp.nodes_run == 1 else "nodes"
            return (
                f"chain {resp.chain_id} succeeded: {resp.nodes_run} {nodes} "
                f"in {resp.duration_ms} ms"
            )
        err = resp.error or ChainFailure(code="error")
        where = f" at node {err.node_id!r}" if err.node_id else ""
        return f"chain {resp.chain_id} failed ({err.code}){where}: {err.message}"

    def render(self, now: float) -> RenderableType:
        """A rich table of the declared nodes (templates shown through their map's items)."""
        table = Table(
            title=f"chain {self.request.chain_id}", title_justify="left", expand=False,
            show_edge=False, pad_edge=False,
        )
        table.add_column("node")
        table.add_column("kind", style="cyan")
        table.add_column("status")
        table.add_column("time", justify="right")
        table.add_column("items")
        for node in self.nodes.values():
            mark, style = _STYLE.get(node.status, ("?", ""))
            status = Text(f"{mark} {node.status}", style=style)
            kind = f"{node.kind} {node.name}".strip()
            items: RenderableType = ""
            if node.kind == "map" and node.status != "pending":
                items = self._items_cell(node)
            elif node.error:
                items = Text(node.error, style="red", overflow="ellipsis", no_wrap=True)
            took = format_duration(node.duration(self._host_now(now)))
            table.add_row(node.node_id, kind, status, took, items)
        elapsed = (self.finished if self.finished is not None else now) - self.started
        footer = Text(f"{self.events} events · {format_duration(elapsed)}", style="dim")
        if self.response is not None:
            footer = Text(
                self.summary(), style="green" if self.response.success else "bold red"
            )
        return Group(table, footer)

    def _items_cell(self, node: NodeProgress) -> RenderableType:
        finished = node.items_done + node.items_failed
        grid = Table.grid(padding=(0, 1))
        total = node.items_total
        bar = ProgressBar(total=float(total) if total else None, completed=finished, width=20)
        if total == 0:
            bar = ProgressBar(total=1.0, completed=1.0, width=20)
        label = f"{finished}/{total}" if total is not None else f"{finished}"
        if node.items_failed:
            label += f" ({node.items_failed} failed)"
        grid.add_row(bar, Text(label))
        return grid
