"""The host's metrics: plain counters bumped where things happen, read when scraped.

Layer: support (plain code: no anyio, no OpenTelemetry import). Source: README
"Observability" (the metric list).

A counter here is a module-level int or dict entry: bumping one costs an attribute
store (~30 ns), whether or not anyone ever scrapes, so nothing is switched on or off
except node timing (:data:`NODE_TIMING`, two clock reads per node), which is on while a
``/metrics`` endpoint is served. The readers are :func:`render_prometheus` (the
Prometheus text format, version 0.0.4) and, when an OpenTelemetry exporter is
configured, the observable instruments :func:`register_instruments` makes.

Only the event loop's thread writes these (the chain engine, the connection's outbox,
the limit checks); a scrape reads them on the same thread.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = [
    "DURATION_BUCKETS", "MAX_SERIES", "NODE_TIMING", "OTHER", "Gauges", "backpressure_wait",
    "chain_finished", "chain_started", "events_total", "histogram", "node_finished",
    "observe", "refused", "render_prometheus", "reset",
]

NODE_TIMING = False
"""Whether node durations are measured (:func:`node_finished`); read by the chain engine
once per run and per map."""

DURATION_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
"""Upper bounds, float seconds, of the node duration histogram's buckets (``+Inf``
beyond)."""

MAX_SERIES = 256
"""Label sets per labelled metric (outcomes; node kind and tool): a label value first seen
after that many is counted under :data:`OTHER`, so names an agent can choose (an MCP
server it registers names its tools) cannot grow a scrape or the host's memory without
bound."""

OTHER = "_other"
"""The label value that stands for every value beyond :data:`MAX_SERIES`."""

chains_started = 0
"""Chain requests that started running (validated; refused ones never start)."""
chains_finished: dict[str, int] = {}
"""Outcome → chains that ended: ``ok``, or the ``chain/resp.error.code``."""
events_sent = 0
"""``chain/event`` frames sent by requests that ended (:func:`events_total` adds the ones
running requests sent so far)."""
_running: dict[Any, int] = {}
"""A running request's event stream (anything with a ``seq``) → its ``seq`` when it
started: read at a scrape, so an event costs nothing more than its ``seq`` bump."""
refusals: dict[tuple[str, str], int] = {}
"""``(ceiling, scope)`` → ``chain_limit`` refusals (PROTOCOL.md §6)."""
backpressure_waits = 0
"""Times a run waited for a slow reader's outbox to drain before starting a node."""
node_durations: dict[tuple[str, str], list[float]] = {}
"""``(kind, tool)`` → ``[count, sum, bucket counts...]`` (non-cumulative buckets, the
last one ``+Inf``)."""


def reset() -> None:
    """Zero every counter (tests)."""
    global chains_started, events_sent, backpressure_waits
    chains_started = events_sent = backpressure_waits = 0
    chains_finished.clear()
    _running.clear()
    refusals.clear()
    node_durations.clear()


def chain_started(stream: Any = None) -> None:
    """A chain request starts running.

    Args:
        stream: its event stream (an object with an int ``seq``: the last ``seq`` sent);
            the events it sends count as they are sent, up to :func:`chain_finished`.
    """
    global chains_started
    chains_started += 1
    if stream is not None:
        _running[stream] = stream.seq


def chain_finished(outcome: str, events: int = 0, stream: Any = None) -> None:
    """A chain request was answered after it started.

    Args:
        outcome: ``ok`` or the response's error code.
        events: ``chain/event`` frames it sent (without ``stream``).
        stream: the event stream given to :func:`chain_started`: its events since then
            are counted instead of ``events``.
    """
    global events_sent
    if outcome not in chains_finished and len(chains_finished) >= MAX_SERIES:
        outcome = OTHER
    chains_finished[outcome] = chains_finished.get(outcome, 0) + 1
    if stream is not None:
        events = stream.seq - _running.pop(stream, stream.seq)
    events_sent += events


def events_total() -> int:
    """``chain/event`` frames sent so far, running requests' included."""
    running: int = sum(stream.seq - first for stream, first in list(_running.items()))
    return events_sent + running


def refused(ceiling: str, scope: str) -> None:
    """A ``chain_limit`` refusal of ``ceiling`` at ``scope`` (``host`` or ``session``)."""
    key = (ceiling, scope)
    refusals[key] = refusals.get(key, 0) + 1


def backpressure_wait() -> None:
    """A producer waits for a full outbox."""
    global backpressure_waits
    backpressure_waits += 1


def histogram(kind: str, tool: str) -> list[float]:
    """The duration histogram of nodes of ``kind`` and ``tool`` (made on first use), for
    :func:`observe`: a map looks its items' up once."""
    key = (kind, tool)
    hist = node_durations.get(key)
    if hist is None:
        if len(node_durations) >= MAX_SERIES:
            key = (kind, OTHER)
            hist = node_durations.get(key)
        if hist is None:
            hist = node_durations[key] = [0.0] * (len(DURATION_BUCKETS) + 3)
    return hist


def observe(hist: list[float], seconds: float) -> None:
    """Count one run of ``seconds`` in ``hist`` (from :func:`histogram`)."""
    hist[0] += 1
    hist[1] += seconds
    hist[2 + bisect.bisect_left(DURATION_BUCKETS, seconds)] += 1


def node_finished(kind: str, tool: str, seconds: float) -> None:
    """A node or map item of ``kind`` (``tool``: its ``name``, ``""`` for control kinds)
    ran for ``seconds``."""
    observe(histogram(kind, tool), seconds)


class Gauges:
    """What a scrape reads from the host itself rather than from counters.

    Attributes:
        sessions: sessions open now (a completed handshake on an open connection).
        connections: connections open now.
        log_lines_dropped: log lines dropped since the start (stderr not read).
    """

    __slots__ = ("sessions", "connections", "log_lines_dropped")

    def __init__(self, sessions: int = 0, connections: int = 0,
                 log_lines_dropped: int = 0) -> None:
        self.sessions = sessions
        self.connections = connections
        self.log_lines_dropped = log_lines_dropped


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{name}="{_escape(value)}"' for name, value in pairs)
    return "{" + inner + "}" if inner else ""


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _family(out: list[str], name: str, kind: str, help_text: str,
            samples: Iterable[tuple[str, float]]) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} {kind}")
    for labels, value in samples:
        out.append(f"{name}{labels} {_number(value)}")


def render_prometheus(gauges: Gauges) -> bytes:
    """Every metric in the Prometheus text exposition format (version 0.0.4).

    Args:
        gauges: the host's current sessions, connections and dropped log lines.

    Returns:
        UTF-8 text ending in a newline (``Content-Type: text/plain; version=0.0.4``).
    """
    out: list[str] = []
    finished = sum(chains_finished.values())
    _family(out, "a2e_chains_in_flight", "gauge", "Chain requests running now.",
            [("", chains_started - finished)])
    _family(out, "a2e_chains_started_total", "counter",
            "Chain requests that started running.", [("", chains_started)])
    _family(out, "a2e_chains_finished_total", "counter",
            "Chain requests answered after they started, by outcome (ok or error code).",
            [(_labels([("outcome", k)]), v) for k, v in sorted(chains_finished.items())])
    _family(out, "a2e_chain_events_total", "counter", "chain/event frames sent.",
            [("", events_total())])
    _family(out, "a2e_refusals_total", "counter",
            "chain_limit refusals by ceiling and scope.",
            [(_labels([("ceiling", c), ("scope", s)]), v)
             for (c, s), v in sorted(refusals.items())])
    _family(out, "a2e_outbox_backpressure_waits_total", "counter",
            "Waits for a slow reader's outbox before a node started.",
            [("", backpressure_waits)])
    _family(out, "a2e_sessions_open", "gauge", "Sessions open now.", [("", gauges.sessions)])
    _family(out, "a2e_connections_open", "gauge", "Connections open now.",
            [("", gauges.connections)])
    _family(out, "a2e_log_lines_dropped_total", "counter",
            "Log lines dropped because stderr was not read fast enough.",
            [("", gauges.log_lines_dropped)])
    out.append("# HELP a2e_node_duration_seconds Node and map item run time, by kind and "
               "tool.")
    out.append("# TYPE a2e_node_duration_seconds histogram")
    for (kind, tool), hist in sorted(node_durations.items()):
        base = [("kind", kind), ("tool", tool)]
        cumulative = 0.0
        for bound, count in zip((*DURATION_BUCKETS, None), hist[2:], strict=True):
            cumulative += count
            le = "+Inf" if bound is None else repr(bound)
            out.append(f"a2e_node_duration_seconds_bucket{_labels([*base, ('le', le)])} "
                       f"{_number(cumulative)}")
        out.append(f"a2e_node_duration_seconds_sum{_labels(base)} {repr(hist[1])}")
        out.append(f"a2e_node_duration_seconds_count{_labels(base)} {_number(hist[0])}")
    return ("\n".join(out) + "\n").encode("utf-8")


def register_instruments(meter: Any, gauges: Callable[[], Gauges]) -> None:
    """Mirror the counters as OpenTelemetry observable instruments on ``meter`` (read at
    each export; nothing is recorded per event).

    Args:
        meter: an ``opentelemetry.metrics.Meter``.
        gauges: reads the host's current :class:`Gauges`.
    """
    from opentelemetry.metrics import CallbackOptions, Observation

    def single(read: Callable[[], float]) -> Callable[[CallbackOptions], list[Observation]]:
        return lambda _options: [Observation(read())]

    def keyed(table: Callable[[], Mapping[Any, float]], names: tuple[str, ...]
              ) -> Callable[[CallbackOptions], list[Observation]]:
        def observe(_options: CallbackOptions) -> list[Observation]:
            return [Observation(v, dict(zip(names, k if isinstance(k, tuple) else (k,),
                                             strict=True)))
                    for k, v in table().items()]
        return observe

    meter.create_observable_up_down_counter(
        "a2e.chains.in_flight", [single(lambda: chains_started - sum(chains_finished.values()))])
    meter.create_observable_counter("a2e.chains.started", [single(lambda: chains_started)])
    meter.create_observable_counter("a2e.chains.finished",
                                    [keyed(lambda: chains_finished, ("outcome",))])
    meter.create_observable_counter("a2e.chain.events", [single(events_total)])
    meter.create_observable_counter("a2e.refusals",
                                    [keyed(lambda: refusals, ("ceiling", "scope"))])
    meter.create_observable_counter("a2e.outbox.backpressure_waits",
                                    [single(lambda: backpressure_waits)])
    meter.create_observable_up_down_counter("a2e.sessions.open",
                                            [single(lambda: gauges().sessions)])
    meter.create_observable_up_down_counter("a2e.connections.open",
                                            [single(lambda: gauges().connections)])
    meter.create_observable_counter("a2e.log.lines_dropped",
                                    [single(lambda: gauges().log_lines_dropped)])
    meter.create_observable_counter(
        "a2e.node.runs", [keyed(lambda: {k: int(h[0]) for k, h in node_durations.items()},
                                ("kind", "tool"))])
    meter.create_observable_counter(  # with a2e.node.runs: the mean run time per series
        "a2e.node.duration", [keyed(lambda: {k: h[1] for k, h in node_durations.items()},
                                    ("kind", "tool"))], unit="s")
