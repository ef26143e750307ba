"""What every chain transcript must satisfy, whatever the graph (seed, PROTOCOL.md §5).

Layer: pure. Imports only the standard library and :mod:`conformance.matchers`.

:func:`check_chain` gets the messages one request produced (``req_id`` = the
request's id), in arrival order, ending with its ``chain/resp``, and the case's
``expect_chain`` spec::

    {"events": <matcher over the list of chain/event>,   # shorthand "a:done" allowed
     "response": <matcher, partial at the top>,
     "order": [["a:done", "b:start"], ...],              # first-before-second
     "in_flight": {"pattern": "^t\\[", "max": 1, "min_peak": 2},
     "raw_excludes": ["\\u2028"],                        # strings no raw frame may hold
     "within": 5}                                        # seconds to wait (runner)

Invariants checked on every transcript (each problem starts with its requirement id):

* ``CHAIN-EVT-SEQ`` — seq is 1, 2, 3, … in arrival order, per request.
* ``CHAIN-EVT-LIFECYCLE`` — per node id: ``[skip]``, ``[start, done]`` or ``[start, error]``;
  a node's attempts (*extension* recovery, PROTOCOL.md §5 Recovery) add ``kind:
  "progress"`` events with phase ``start`` between its start and its terminal event,
  and nowhere else.
* ``CHAIN-EVT-BEFORE-RESP`` — only events precede the response; the response is last.
* ``CHAIN-RESP-OUTPUTS`` — (streaming) ``outputs`` keys = declared nodes with ``done``,
  unless the request opted out with ``include_outputs: false`` (PROTOCOL.md §5 Payload
  opt-ins; then the case says what ``outputs`` must be).
* ``CHAIN-RESP-NODES-RUN`` — (streaming) ``nodes_run`` = declared nodes with ``start``.
* ``CHAIN-RESP-ERROR`` — ``success`` true ⇔ ``error`` null; else ``error.code`` a str.

Map items (``<template>[<i>]``) are not declared nodes, so they are left out of the
two counts above.
"""

from __future__ import annotations

import re
from typing import Any

from .matchers import OPERATORS, match

__all__ = ["check_chain", "expand_events", "partial_top", "ITEM_ID"]

ITEM_ID = re.compile(r"\[\d+\]$")
_LIFECYCLES = (["skip"], ["start", "done"], ["start", "error"])
_LIST_OPS = ("$unordered", "$contains", "$group")


def _event(short: Any) -> Any:
    """``"a:done"`` → partial {node_id, phase}; a plain object → partial of it."""
    if isinstance(short, str):
        node_id, _, phase = short.rpartition(":")
        return {"$partial": {"node_id": node_id, "phase": phase}}
    if isinstance(short, dict) and not any(k in OPERATORS for k in short):
        return {"$partial": short}
    return expand_events(short)


def expand_events(matcher: Any) -> Any:
    """Expand event shorthands inside a list matcher (plain list, $unordered, $seq…)."""
    if isinstance(matcher, list):
        return [_event(m) for m in matcher]
    if isinstance(matcher, dict):
        for op in _LIST_OPS:
            if op in matcher:
                return {op: [_event(m) for m in matcher[op]]}
        if "$seq" in matcher:
            return {"$seq": [_event(m) for m in matcher["$seq"]]}
    return matcher


def partial_top(matcher: Any) -> Any:
    """A plain object matcher for a whole message allows extra keys (hosts may add)."""
    if isinstance(matcher, dict) and not any(k in OPERATORS for k in matcher):
        return {"$partial": matcher}
    return matcher


def _index(events: list[dict[str, Any]], short: str) -> int | None:
    node_id, _, phase = short.rpartition(":")
    for i, event in enumerate(events):
        if (event.get("node_id") == node_id and event.get("phase") == phase
                and event.get("kind") != "progress"):
            return i
    return None


def _invariants(events: list[dict[str, Any]], response: dict[str, Any],
                outputs_sent: bool = True) -> list[str]:
    problems: list[str] = []
    seqs = [e.get("seq") for e in events]
    if seqs != list(range(1, len(events) + 1)):
        problems.append(f"CHAIN-EVT-SEQ: seq should be 1..{len(events)} in order, got {seqs}")
    phases: dict[str, list[str]] = {}
    for event in events:
        node_id = str(event.get("node_id"))
        if event.get("kind") == "progress":
            seen = phases.get(node_id)
            if seen != ["start"] or event.get("phase") != "start":
                problems.append(f"CHAIN-EVT-LIFECYCLE: node {node_id!r} had a progress event "
                                f"with phase {event.get('phase')!r} after phases {seen or []}")
            continue
        phases.setdefault(node_id, []).append(str(event.get("phase")))
    for node_id, seen in phases.items():
        if seen not in _LIFECYCLES:
            problems.append(f"CHAIN-EVT-LIFECYCLE: node {node_id!r} had phases {seen}")
    if events:
        done = {n for n, p in phases.items() if p[-1] == "done" and not ITEM_ID.search(n)}
        started = {n for n, p in phases.items() if p[0] == "start" and not ITEM_ID.search(n)}
        outputs = response.get("outputs")
        if outputs_sent and isinstance(outputs, dict) and set(outputs) != done:
            problems.append(f"CHAIN-RESP-OUTPUTS: outputs keys {sorted(outputs)} != nodes "
                            f"with a done event {sorted(done)}")
        if isinstance(response.get("nodes_run"), int) and response["nodes_run"] != len(started):
            problems.append(f"CHAIN-RESP-NODES-RUN: nodes_run {response['nodes_run']} != "
                            f"{len(started)} started nodes {sorted(started)}")
    success, error = response.get("success"), response.get("error")
    if success is True and error is not None:
        problems.append(f"CHAIN-RESP-ERROR: success is true but error is {error!r}")
    if success is False and not (isinstance(error, dict) and isinstance(error.get("code"), str)):
        problems.append(f"CHAIN-RESP-ERROR: success is false but error is {error!r}")
    return problems


def _in_flight(events: list[dict[str, Any]], spec: dict[str, Any]) -> list[str]:
    pattern = re.compile(spec.get("pattern", ""))
    now = peak = 0
    for event in events:
        if event.get("kind") == "progress" or not pattern.search(str(event.get("node_id"))):
            continue
        if event.get("phase") == "start":
            now += 1
            peak = max(peak, now)
        elif event.get("phase") in ("done", "error"):
            now -= 1
    problems = []
    if "max" in spec and peak > spec["max"]:
        problems.append(f"in flight: {peak} nodes matching /{pattern.pattern}/ ran at once, "
                        f"at most {spec['max']} allowed")
    if "min_peak" in spec and peak < spec["min_peak"]:
        problems.append(f"in flight: at most {peak} nodes matching /{pattern.pattern}/ ran at "
                        f"once, expected {spec['min_peak']} in parallel")
    return problems


def check_chain(messages: list[dict[str, Any]], raws: list[str], spec: dict[str, Any],
                variables: dict[str, Any], request: Any = None) -> list[str]:
    """Check one request's transcript against the invariants and the case's spec.

    Args:
        messages: decoded messages with this ``req_id``, arrival order, the last one
            being the ``chain/resp`` (the runner stops collecting there).
        raws: the raw text of the same frames (for ``raw_excludes``).
        spec: the ``expect_chain`` object (see module docstring).
        variables: case variables for ``$ref`` / ``$bind`` (mutated by ``$bind``).
        request: the ``chain/req`` as sent, if known; one with ``include_outputs: false``
            is exempt from the ``CHAIN-RESP-OUTPUTS`` invariant.

    Returns:
        Problems, each a sentence; empty when the transcript conforms.
    """
    *before, response = messages
    # a durable run's acceptances (its own, an attach's): PROTOCOL.md §5 Durable runs
    before = [m for m in before if m.get("type") != "chain/accepted"]
    problems = [f"CHAIN-EVT-BEFORE-RESP: {m.get('type')!r} arrived before the chain/resp"
                for m in before if m.get("type") != "chain/event"]
    events = [m for m in before if m.get("type") == "chain/event"]
    outputs_sent = not (isinstance(request, dict) and request.get("include_outputs") is False)
    problems += _invariants(events, response, outputs_sent)
    if "events" in spec:
        problems += [f"events: {p}" for p in
                     match(expand_events(spec["events"]), events, variables, "$events")]
    if "response" in spec:
        problems += match(partial_top(spec["response"]), response, variables, "$resp")
    for first, second in spec.get("order", []):
        i, j = _index(events, first), _index(events, second)
        if i is None or j is None or i > j:
            problems.append(f"order: expected {first} before {second} (positions {i}, {j})")
    if "in_flight" in spec:
        problems += _in_flight(events, spec["in_flight"])
    for text in spec.get("raw_excludes", []):
        if any(text in raw for raw in raws):
            problems.append(f"raw frames contain {text!r}, which must be escaped")
    return problems
