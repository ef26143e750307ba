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

The same transcript is held to what the chains spec itself says (level ``spec``,
``docs/chains-spec.txt``), more loosely where PROTOCOL.md settles more:

* ``SPEC-ENVELOPE`` (l.52-55, 76-79) -- events and response carry type, id, version, ts.
* ``SPEC-EVENT-FIELDS`` (l.56-60) -- node_id, phase, seq (int); output on done, error on error.
* ``SPEC-EVENT-SEQ`` (l.61) -- seq rises with every event (monotonic, not necessarily from 1).
* ``SPEC-EVENT-PHASES`` (l.63-69) -- the four phases; done/error after start; skip alone.
* ``SPEC-RESP-FIELDS`` (l.80-87) -- the response's fields and their types.
* ``SPEC-OUTPUTS`` (l.83) -- every declared node with a done event is in outputs, with
  the output its event carried (more keys allowed: a failed node's null, say).
* ``SPEC-NODES-RUN`` (l.86) -- nodes_run counts at least the declared nodes that were done.
* ``SPEC-DURATION`` (l.85) -- duration_ms covers at least the span of the events' ts.

A broken invariant the case does not name is a *finding* (the runner reports it once
per requirement and judges the case on the rest). When ``seq`` is broken, the case's
own ``events`` matcher sees the events re-sequenced by arrival (1, 2, 3 ...), and the
case says so in a note, so one defect is not reported by every case.
"""

from __future__ import annotations

import re
from typing import Any

from .matchers import OPERATORS, match

__all__ = ["check_chain", "expand_events", "partial_top", "ITEM_ID", "INVARIANTS"]

#: Requirements checked on every chain transcript: a case that does not name one gets
#: its breach as a finding, not as its own failure (see module docstring).
INVARIANTS = frozenset({
    "CHAIN-EVT-SEQ", "CHAIN-EVT-LIFECYCLE", "CHAIN-EVT-BEFORE-RESP", "CHAIN-RESP-OUTPUTS",
    "CHAIN-RESP-NODES-RUN", "CHAIN-RESP-ERROR", "SPEC-ENVELOPE", "SPEC-EVENT-FIELDS",
    "SPEC-EVENT-SEQ", "SPEC-EVENT-PHASES", "SPEC-RESP-FIELDS", "SPEC-OUTPUTS",
    "SPEC-NODES-RUN", "SPEC-DURATION", "SPEC-EVENTS-BEFORE-RESP",
})
_SPEC_PHASES = ("start", "done", "skip", "error")
_DURATION_SLACK_MS = 50  # clock granularity between the host's ts and its duration

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
        for op in ("$allOf", "$oneOf"):
            if op in matcher:
                return {op: [expand_events(m) for m in matcher[op]]}
        if "$not" in matcher:
            return {"$not": expand_events(matcher["$not"])}
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
        if not isinstance(event.get("node_id"), str):
            continue  # SPEC-EVENT-FIELDS reports it
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


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _spec_envelope(messages: list[dict[str, Any]]) -> list[str]:
    for message in messages:
        bad = [k for k in ("type", "id", "version") if not isinstance(message.get(k), str)]
        if not _is_number(message.get("ts")):
            bad.append("ts")
        if bad:
            return [f"SPEC-ENVELOPE: a {message.get('type')!r} lacks a valid "
                    f"{', '.join(bad)}: {_cut(message)}"]
    return []


def _cut(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _spec_events(events: list[dict[str, Any]]) -> list[str]:
    problems: list[str] = []
    for event in events:
        bad = [k for k in ("node_id", "phase") if not isinstance(event.get(k), str)]
        if not _is_int(event.get("seq")):
            bad.append("seq (int)")
        if event.get("phase") == "done" and "output" not in event:
            bad.append("output")
        if event.get("phase") == "error" and not (isinstance(event.get("error"), str)
                                                  and event["error"]):
            bad.append("error (a non-empty str)")
        if bad:
            problems.append(f"SPEC-EVENT-FIELDS: an event lacks {', '.join(bad)}: "
                            f"{_cut(event)}")
            break
    seqs: list[Any] = [e.get("seq") for e in events]
    if not all(_is_int(s) for s in seqs) or any(
            b <= a for a, b in zip(seqs, seqs[1:], strict=False)):
        problems.append(f"SPEC-EVENT-SEQ: seq should rise with every event, got {seqs[:40]}")
    seen: dict[str, list[str]] = {}
    for event in events:
        if event.get("kind") == "progress" or not isinstance(event.get("node_id"), str):
            continue  # a running node's report (extension), or SPEC-EVENT-FIELDS' problem
        seen.setdefault(event["node_id"], []).append(str(event.get("phase")))
    for node_id, phases in seen.items():
        odd = [p for p in phases if p not in _SPEC_PHASES]
        pairs = phases[0::2], phases[1::2]
        ok = not odd and (phases == ["skip"] or (
            len(phases) % 2 == 0 and all(p == "start" for p in pairs[0])
            and all(p in ("done", "error") for p in pairs[1])))
        if not ok:
            problems.append(f"SPEC-EVENT-PHASES: node {node_id!r} had phases {phases}")
            break
    return problems


def _spec_response(response: dict[str, Any], events: list[dict[str, Any]],
                   request: Any) -> list[str]:
    problems: list[str] = []
    types = {"chain_id": str, "success": bool, "outputs": dict}
    bad = [k for k, t in types.items() if not isinstance(response.get(k), t)]
    bad += [k for k in ("duration_ms", "nodes_run")
            if not (_is_int(response.get(k)) and response[k] >= 0)]
    if "final_output" not in response:
        bad.append("final_output")
    if not (response.get("error") is None or isinstance(response.get("error"), dict)):
        bad.append("error (object or null)")
    if bad:
        problems.append(f"SPEC-RESP-FIELDS: the chain/resp lacks a valid "
                        f"{', '.join(bad)}: {_cut(response, 300)}")
    declared = _declared(request)
    done: dict[str, list[Any]] = {}
    for event in events:
        node_id = event.get("node_id")
        if event.get("phase") == "done" and event.get("kind") != "progress" and (
                isinstance(node_id, str) and node_id in declared):
            done.setdefault(node_id, []).append(event.get("output"))
    outputs = response.get("outputs")
    opted_out = isinstance(request, dict) and (request.get("include_outputs") is False)
    if isinstance(outputs, dict) and not opted_out:
        missing = sorted(n for n in done if n not in outputs)
        plain = isinstance(request, dict) and request.get("event_outputs") is not False
        differ = sorted(n for n, seen in done.items() if n in outputs and len(seen) == 1
                        and plain and seen[0] != outputs[n])
        if missing or differ:
            problems.append(f"SPEC-OUTPUTS: nodes that completed (done events) are "
                            f"{'missing from outputs: ' + str(missing) if missing else ''}"
                            f"{'; ' if missing and differ else ''}"
                            f"{'in outputs with another output: ' + str(differ) if differ else ''}"
                            f" (outputs keys {sorted(outputs)[:20]})")
    nodes_run: Any = response.get("nodes_run")
    if _is_int(nodes_run) and nodes_run < len(done):
        problems.append(f"SPEC-NODES-RUN: nodes_run {nodes_run} < {len(done)} nodes that "
                        f"completed {sorted(done)[:20]}")
    stamps = [e["ts"] for e in events if _is_number(e.get("ts"))]
    duration: Any = response.get("duration_ms")
    if len(stamps) >= 2 and _is_number(duration):
        span = (max(stamps) - min(stamps)) * 1000
        if duration + _DURATION_SLACK_MS < span:
            problems.append(f"SPEC-DURATION: duration_ms {duration} is less than the "
                            f"{span:.0f} ms between the chain's first and last events")
    return problems


def _declared(request: Any) -> set[str]:
    """The node ids a chain/req declares (empty when it is not known)."""
    nodes = request.get("nodes") if isinstance(request, dict) else None
    if not isinstance(nodes, list):
        return set()
    return {n["node_id"] for n in nodes if isinstance(n, dict)
            and isinstance(n.get("node_id"), str)}


def resequenced(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events with ``seq`` replaced by their arrival position, 1, 2, 3 ..."""
    return [{**event, "seq": i} for i, event in enumerate(events, 1)]


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
                variables: dict[str, Any], request: Any = None,
                notes: list[str] | None = None) -> list[str]:
    """Check one request's transcript against the invariants and the case's spec.

    Args:
        messages: decoded messages with this ``req_id``, arrival order, the last one
            being the ``chain/resp`` (the runner stops collecting there).
        raws: the raw text of the same frames (for ``raw_excludes``).
        spec: the ``expect_chain`` object (see module docstring).
        variables: case variables for ``$ref`` / ``$bind`` (mutated by ``$bind``).
        request: the ``chain/req`` as sent, if known; one with ``include_outputs: false``
            is exempt from the ``CHAIN-RESP-OUTPUTS`` invariant.
        notes: receives what the check did beside its verdict (events re-sequenced).

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
    problems += _spec_envelope([*events, response])
    problems += _spec_events(events)
    problems += _spec_response(response, events, request)
    if any(p.startswith(("CHAIN-EVT-SEQ:", "SPEC-EVENT-SEQ:")) for p in problems):
        events = resequenced(events)
        if notes is not None:
            notes.append("seq broken (CHAIN-EVT-SEQ reported once): the case's other checks "
                         "saw the events re-sequenced by arrival")
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
