"""Running a selection of cases against one host: probe, gate, schedule, collect.

Layer: I/O (asyncio). Talks only the wire protocol; never imports a host.

The suite first *probes* the host once (a handshake asking for every capability the
kit knows) to learn what it advertises, then runs the cases several at a time, each
bounded by its own timeout. Over WebSocket each case gets a **fresh connection**.
Over stdio, where a connection is a host process, cases with the same handshake take
turns on a few **shared sessions** (:class:`SharedSession`): each case sends its own
ids, must leave nothing unanswered or unread, and a case that fails (or leaves the
session unclean) has the process replaced before the next case; cases that need a
connection of their own (:attr:`~conformance.cases.Case.own_connection`) get one.

A case is *skipped* when it needs a feature the host does not advertise (``chains``
metadata ``features``, PROTOCOL.md §2), a ceiling the host does not publish (``chains``
metadata ``limits``: an extension ceiling such as ``max_total_nodes``), a transport other
than the one in use, or a runner condition (:data:`CONDITIONS`) that is not met.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .cases import Case
from .manifest import Requirement, case_level, gating_features, load_requirements
from .matchers import MatcherError
from .runner import BARRIER_TIMEOUT, RUNNER_ERROR, CaseFailure, CaseResult, CaseRun, chains_entry
from .templates import expand
from .transports import Connection, StdioConnection, WebSocketConnection

__all__ = ["Target", "Probe", "SharedSession", "probe_host", "run_case", "run_suite",
           "session_key", "suite_variables", "default_shared_sessions", "CONDITIONS",
           "not_offered", "skip_reason", "requirements_by_id"]

#: Runner conditions a case may list in ``needs``, and what enables each.
CONDITIONS = {
    "auth": "the host was started with an auth token, given as --auth-token",
    "other_cap": "the host serves a capability besides chains (found by the probe)",
    "host_defaults": "the host runs with PROTOCOL.md §6 default ceilings (--host-defaults)",
    "cap:NAME": "the host serves the capability NAME (found by the probe), e.g. cap:tools",
    "fixture_skills": "the host serves the skill capability with the kit's fixture skills "
                      "(start it with --skills DIR, DIR from `a2e-conformance --skills-dir`)",
    "proc_cat": "the host serves proc and allows cat (its proc metadata lists it: start it "
                "with --allow-proc cat)",
    "proc:NAME": "the host serves proc and allows the executable NAME (its proc metadata "
                 "lists it: a2e-host --allow-proc NAME), e.g. proc:sleep",
    "fast_prune": "the host prunes a durable run within 2 s of its retention passing "
                  "(a2e-host: [store] prune_interval = 1), given as --fast-prune",
}
FIXTURE_SKILL = "conformance_shout"
"""A fixture skill (``conformance/skills/``) the probe looks for with skill/discover/req."""
_PROBE_CAPS = ["chains", "tools", "proc", "skill", "runs", "memory", "context", "events"]


@dataclass(frozen=True)
class Target:
    """How to reach the host: ``stdio`` = a command line, ``ws`` = a URL."""

    transport: str
    address: str
    stderr: str = "capture"
    auth_token: str | None = None
    host_defaults: bool = False
    fast_prune: bool = False
    patience: float = 1.0
    """Multiplies the kit's own waits (case timeouts, handshakes, the probe) on a slow
    or busy machine; a case's own bounds (``within``) are never scaled."""

    async def connect(self) -> Connection:
        if self.transport == "stdio":
            return await StdioConnection.open(self.address, self.stderr)
        return await WebSocketConnection.open(self.address)


@dataclass(frozen=True)
class Probe:
    """What the host advertised in the probe handshake."""

    handshake: dict[str, Any]
    features: tuple[str, ...]
    limits: dict[str, Any]
    served: tuple[str, ...]
    skills: tuple[str, ...] = ()
    """``name@version`` of every skill version ``skill/discover/resp`` listed."""


async def probe_host(target: Target, handshake_timeout: float = 15.0) -> Probe:
    """Handshake once and read the advertised capabilities, features and limits.

    Raises:
        RuntimeError: the host did not answer a handshake with ``ok: true``.
    """
    handshake_timeout *= target.patience
    conn = await target.connect()
    try:
        request = {"type": "handshake/req", "id": "probe-1", "version": "1.0",
                   "ts": time.time(), "agent_id": "a2e-conformance",
                   "agent_caps": _PROBE_CAPS}
        if target.auth_token:
            request["auth_token"] = target.auth_token
        await conn.send_text(json.dumps(request))
        async with asyncio.timeout(handshake_timeout):
            while True:
                frame = await conn.receive()
                if frame is None:
                    raise RuntimeError("the host closed the connection during the handshake")
                if frame.message and frame.message.get("req_id") == "probe-1":
                    break
            skills = await _discover_skills(conn, frame.message, handshake_timeout)
    except TimeoutError:
        raise RuntimeError(f"no handshake/resp within {handshake_timeout} s"
                           f"\n{conn.diagnostics()}") from None
    finally:
        await conn.aclose()
    resp = frame.message
    assert resp is not None
    if resp.get("ok") is not True:
        raise RuntimeError(f"probe handshake refused: {frame.raw[:500]}")
    metadata = (chains_entry(resp) or {}).get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    features = metadata.get("features")
    features = tuple(f for f in features if isinstance(f, str)) if isinstance(
        features, list) else ()
    limits = metadata.get("limits")
    limits = {k: v for k, v in limits.items() if isinstance(v, int)
              and not isinstance(v, bool)} if isinstance(limits, dict) else {}
    caps = resp.get("accepted_caps")
    served = tuple(str(e.get("capability")) for e in (caps if isinstance(caps, list) else [])
                   if isinstance(e, dict) and e.get("enabled", True) is not False)
    return Probe(resp, features, limits, served, skills)


async def _discover_skills(conn: Connection, handshake: dict[str, Any],
                           wait: float) -> tuple[str, ...]:
    """``name@version`` of the skills a host serving ``skill`` lists; () otherwise."""
    listed = handshake.get("accepted_caps")
    caps = [e.get("capability") for e in (listed if isinstance(listed, list) else [])
            if isinstance(e, dict)]
    if handshake.get("ok") is not True or "skill" not in caps:
        return ()
    await conn.send_text(json.dumps({"type": "skill/discover/req", "id": "probe-2",
                                     "version": "1.0", "ts": time.time()}))
    async with asyncio.timeout(wait):
        while True:
            frame = await conn.receive()
            if frame is None:
                return ()
            message = frame.message or {}
            if message.get("req_id") == "probe-2":
                break
    skills = message.get("skills")
    return tuple(f"{s.get('name')}@{s.get('version')}"
                 for s in (skills if isinstance(skills, list) else []) if isinstance(s, dict))


_REQUIREMENTS: dict[str, Requirement] = {}


def requirements_by_id() -> dict[str, Requirement]:
    """The manifest by id, read once (``conformance/requirements.json``)."""
    if not _REQUIREMENTS:
        _REQUIREMENTS.update((r.id, r) for r in load_requirements())
    return _REQUIREMENTS


def not_offered(case: Case, probe: Probe) -> str | None:
    """Which extension ``case`` needs that the host does not offer, or None.

    The case's own ``features`` and ``ceilings``, the ``feature`` of every extension
    requirement it names, and ``handshake/limits`` for a handshake lowering ceilings
    (:func:`conformance.manifest.gating_features`).
    """
    missing = []
    for feature in gating_features(case, requirements_by_id()):
        if feature.startswith("limits:"):
            if feature.removeprefix("limits:") not in probe.limits:
                missing.append(feature)
        elif feature.startswith("cap:"):
            if feature.removeprefix("cap:") not in probe.served:
                missing.append(feature)
        elif feature not in probe.features:
            missing.append(feature)
    if not missing:
        return None
    ceilings = [m.removeprefix("limits:") for m in missing if m.startswith("limits:")]
    others = [m for m in missing if not m.startswith("limits:")]
    if others:
        return f"host does not advertise {', '.join(others)}"
    return f"host does not publish the ceiling {', '.join(ceilings)}"


def skip_reason(case: Case, target: Target, probe: Probe) -> str | None:
    """Why ``case`` cannot run against this host, or None if it can."""
    if case.transports and target.transport not in case.transports:
        return f"only over {', '.join(case.transports)}"
    missing = not_offered(case, probe)
    if missing:
        return missing
    met = {"auth": bool(target.auth_token), "host_defaults": target.host_defaults,
           "fast_prune": target.fast_prune,
           "other_cap": any(c != "chains" for c in probe.served),
           "fixture_skills": f"{FIXTURE_SKILL}@2" in probe.skills,
           "proc_cat": "cat" in _executables(probe.handshake)}
    met.update((n, n.removeprefix("cap:") in probe.served) for n in case.needs
               if n.startswith("cap:"))
    met.update((n, n.removeprefix("proc:") in _executables(probe.handshake))
               for n in case.needs if n.startswith("proc:"))
    unmet = [n for n in case.needs if not met.get(n, False)]
    if unmet:
        why = [CONDITIONS.get(n) or (
            f"the host serves proc and allows {n.removeprefix('proc:')!r}"
            if n.startswith("proc:") else
            f"the host serves the capability {n.removeprefix('cap:')!r}") for n in unmet]
        return f"needs {', '.join(unmet)}: {'; '.join(why)}"
    return None


def _executables(handshake: dict[str, Any]) -> list[Any]:
    """The ``executables`` the ``proc`` entry of a handshake/resp lists (PROTOCOL.md §9)."""
    for entry in handshake.get("accepted_caps") or []:
        if isinstance(entry, dict) and entry.get("capability") == "proc":
            metadata = entry.get("metadata")
            found = metadata.get("executables") if isinstance(metadata, dict) else None
            return found if isinstance(found, list) else []
    return []


def suite_variables(target: Target, probe: Probe) -> dict[str, Any]:
    """The variables every case starts with, before its handshake."""
    return {"probe": probe.handshake, "probe_limits": probe.limits,
            "other_cap": next((c for c in probe.served if c != "chains"), None),
            "auth_token": target.auth_token}


def session_key(case: Case, target: Target, probe: Probe) -> str | None:
    """Cases with equal keys may take turns on one session; None = the case cannot share.

    The key is the case's handshake as it would be sent (templates expanded with the
    suite variables), so two cases lowering the same ceiling to the same value share.
    """
    if case.own_connection or case.handshake is None:
        return None
    variables = suite_variables(target, probe)
    if any(re.split(r"[.\[]", ref, maxsplit=1)[0] not in variables
           for ref in _refs(case.handshake)):
        return None  # it depends on per-case variables (nonce, case, ...)
    try:
        fields = expand(case.handshake, variables)
    except Exception:  # noqa: BLE001 - e.g. a ceiling the host did not publish
        return None  # the case's own run reports it
    sent = {"agent_caps": ["chains"], **(fields if isinstance(fields, dict) else {})}
    return json.dumps(sent, sort_keys=True, default=str)  # as sent: defaults included


def _refs(value: Any) -> list[str]:
    """Every ``$ref`` expression inside a template."""
    if isinstance(value, dict):
        own = [value["$ref"]] if isinstance(value.get("$ref"), str) else []
        return own + [r for v in value.values() for r in _refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    return []


class SharedSession:
    """One connection (one host process over stdio) that cases take turns on.

    The first case opens it and handshakes as usual; when a case passes and
    :meth:`~conformance.runner.CaseRun.settle` finds the session clean, the next case
    runs on it with that session's variables. After a case fails or leaves the session
    unclean, the connection is closed (over stdio: the process is stopped), the case's
    result says so in ``notes``, and the next case opens a fresh one.
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self.conn: Connection | None = None
        self.facts: dict[str, Any] = {}
        self.seen_ids: set[str] = set()
        self.cases = 0  # cases run on the current connection
        self.opened = 0  # connections opened over the suite

    async def aclose(self) -> None:
        """Close the current connection, if any."""
        conn, self.conn = self.conn, None
        self.facts, self.seen_ids, self.cases = {}, set(), 0
        if conn is not None:
            await conn.aclose()


async def run_case(case: Case, target: Target, probe: Probe,
                   shared: SharedSession | None = None) -> CaseResult:
    """Run one case; never raises for a host misbehaviour.

    Args:
        case, target, probe: what to run, where, and what the host advertised.
        shared: run on this session (opening it if it has no connection) and leave it
            for the next case if the case passes clean; None = a connection of its own.
    """
    level = case_level(case, requirements_by_id())
    reason = skip_reason(case, target, probe)
    if reason:
        return CaseResult(case, "skipped", [reason], offered=not_offered(case, probe) is None
                          or not reason.startswith("host does not"), level=level)
    started = time.monotonic()
    variables = suite_variables(target, probe)
    inherited = shared is not None and shared.conn is not None
    try:
        if shared is not None and shared.conn is not None:
            conn = shared.conn
        else:
            conn = await target.connect()
    except (OSError, RuntimeError) as exc:
        return CaseResult(case, "failed", [f"cannot connect: {exc}"])
    if shared is not None and not inherited:
        shared.conn, shared.opened = conn, shared.opened + 1
    run = CaseRun(case, conn, variables, target.connect, target.auth_token,
                  session=shared.facts if shared is not None and inherited else None,
                  seen_ids=shared.seen_ids if shared is not None else None,
                  patience=target.patience)
    status, problems, notes = "passed", [], []
    failed_cleanly = False  # a verdict, not a timeout or a fault of the kit
    try:
        async with asyncio.timeout(case.timeout * target.patience):
            await run.run(target.auth_token)
    except CaseFailure as failure:
        status, problems = "failed", failure.problems
        failed_cleanly = True
    except TimeoutError:
        status = "failed"
        problems = [f"case timed out after {case.timeout * target.patience} s; unconsumed: "
                    f"{run.pending_text()}"]
    except MatcherError as exc:  # the case's template met a value the host sent
        status, problems = "failed", [f"the case could not go on with the host's answers: "
                                      f"{exc}"]
    except Exception as exc:  # a broken case or transport: report, keep the suite going
        status, problems = "failed", [f"{RUNNER_ERROR}: {type(exc).__name__}: {exc}"]
    diagnostics = ("\n".join(c.diagnostics() for c in run.connections).strip()
                   if status == "failed" else "")
    unclean: str | None = "the case failed"
    if status == "passed":
        try:
            unclean = await run.settle()
        except CaseFailure as failure:
            status, problems, unclean = "failed", failure.problems, "the case failed"
            diagnostics = "\n".join(c.diagnostics() for c in run.connections).strip()
    elif shared is not None and failed_cleanly:
        # the host answered everything the case sent: a drained session is reusable,
        # which spares a host process per failed case over stdio
        try:
            why = await asyncio.wait_for(run.settle(drain=True),
                                         BARRIER_TIMEOUT * target.patience + 1)
        except (CaseFailure, TimeoutError, OSError):
            why = "its session could not be drained"
        unclean = None if why is None else f"the case failed; {why}"
    if shared is not None:
        if unclean is None:
            shared.facts = run.session_facts()
            shared.cases += 1
        else:
            what = "host process" if conn.kind == "stdio" else "connection"
            notes.append(f"shared session {shared.label}: closed its {what} after this case "
                         f"({unclean}, case {shared.cases + 1} on it); the next case there "
                         f"opens a fresh one")
            await shared.aclose()
    for opened in run.connections:
        if shared is None or opened is not shared.conn:
            await opened.aclose()
    return CaseResult(case, status, problems, time.monotonic() - started, diagnostics,
                      [*run.notes, *notes], run.findings, level=level)


def default_shared_sessions(target: Target) -> int:
    """Shared sessions for the largest group of cases: 2 over stdio, 0 over WebSocket.

    Over WebSocket a connection costs little, so every case gets its own; over stdio a
    connection is a host process, so cases take turns on a few.
    """
    return 2 if target.transport == "stdio" else 0


async def run_suite(cases: list[Case], target: Target, jobs: int = 8,
                    on_result: Callable[[CaseResult], Awaitable[None] | None] | None = None,
                    probe: Probe | None = None, shared: int | None = None) -> list[CaseResult]:
    """Probe the host, then run ``cases`` at most ``jobs`` at a time.

    Args:
        cases: what to run.
        target: the host.
        jobs: cases in progress at once.
        on_result: called with each result as it comes.
        probe: the host's probe, if already made.
        shared: how many sessions the largest group of cases with the same handshake
            takes turns on (smaller groups take one; :func:`session_key`); 0 = every
            case on a connection of its own. Default :func:`default_shared_sessions`.

    Returns:
        One result per case, in the order of ``cases``.

    Raises:
        RuntimeError: the probe handshake failed (nothing else can run).
    """
    probe = probe or await probe_host(target)
    shared = default_shared_sessions(target) if shared is None else shared
    gate = asyncio.Semaphore(max(1, jobs))
    results: dict[int, CaseResult] = {}

    async def report(index: int, result: CaseResult) -> None:
        results[index] = result
        if on_result is not None:
            maybe = on_result(result)
            if maybe is not None:
                await maybe

    async def alone(index: int) -> None:
        async with gate:
            result = await run_case(cases[index], target, probe)
        await report(index, result)

    async def lane(queue: list[int], session: SharedSession) -> None:
        try:
            while queue:
                index = queue.pop(0)
                async with gate:
                    result = await run_case(cases[index], target, probe, session)
                await report(index, result)
        finally:
            await session.aclose()

    groups: dict[str, list[int]] = {}
    solo: list[int] = []
    for index, case in enumerate(cases):
        key = session_key(case, target, probe) if shared > 0 else None
        if key is None or skip_reason(case, target, probe):
            solo.append(index)
        else:
            groups.setdefault(key, []).append(index)
    workers = [alone(i) for i in solo]
    largest = max((len(g) for g in groups.values()), default=0)
    for number, queue in enumerate(groups.values(), 1):
        lanes = shared if len(queue) == largest else 1
        for lane_number in range(1, min(lanes, len(queue)) + 1):
            label = f"{number}.{lane_number}" if lanes > 1 else f"{number}"
            workers.append(lane(queue, SharedSession(label)))
    await asyncio.gather(*workers)
    return [results[i] for i in range(len(cases))]
