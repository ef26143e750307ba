"""Running a selection of cases against one host: probe, gate, schedule, collect.

Layer: I/O (asyncio). Talks only the wire protocol; never imports a host.

The suite first *probes* the host once (a handshake asking for every capability the
kit knows) to learn what it advertises, then runs each case on a **fresh
connection** (a fresh process over stdio), several at a time, each bounded by its
own timeout. A case is *skipped* when it needs a feature the host does not
advertise (``chains`` metadata ``features``, PROTOCOL.md §2), a transport other than
the one in use, or a runner condition (:data:`CONDITIONS`) that is not met.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .cases import Case
from .runner import CaseFailure, CaseResult, CaseRun, chains_entry
from .transports import Connection, StdioConnection, WebSocketConnection

__all__ = ["Target", "Probe", "probe_host", "run_case", "run_suite", "CONDITIONS"]

#: Runner conditions a case may list in ``needs``, and what enables each.
CONDITIONS = {
    "auth": "the host was started with an auth token, given as --auth-token",
    "other_cap": "the host serves a capability besides chains (found by the probe)",
    "host_defaults": "the host runs with PROTOCOL.md §6 default ceilings (--host-defaults)",
}
_PROBE_CAPS = ["chains", "tools", "proc", "skill", "memory", "context", "events"]


@dataclass(frozen=True)
class Target:
    """How to reach the host: ``stdio`` = a command line, ``ws`` = a URL."""

    transport: str
    address: str
    stderr: str = "capture"
    auth_token: str | None = None
    host_defaults: bool = False

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


async def probe_host(target: Target, handshake_timeout: float = 15.0) -> Probe:
    """Handshake once and read the advertised capabilities, features and limits.

    Raises:
        RuntimeError: the host did not answer a handshake with ``ok: true``.
    """
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
    except TimeoutError:
        raise RuntimeError(f"no handshake/resp within {handshake_timeout} s"
                           f"\n{conn.diagnostics()}") from None
    finally:
        await conn.aclose()
    resp = frame.message
    assert resp is not None
    if resp.get("ok") is not True:
        raise RuntimeError(f"probe handshake refused: {frame.raw[:500]}")
    metadata = (chains_entry(resp) or {}).get("metadata") or {}
    served = tuple(str(e.get("capability")) for e in resp.get("accepted_caps") or []
                   if isinstance(e, dict) and e.get("enabled", True))
    return Probe(resp, tuple(metadata.get("features") or ()), metadata.get("limits") or {},
                 served)


def skip_reason(case: Case, target: Target, probe: Probe) -> str | None:
    """Why ``case`` cannot run against this host, or None if it can."""
    if case.transports and target.transport not in case.transports:
        return f"only over {', '.join(case.transports)}"
    missing = [f for f in case.features if f not in probe.features]
    if missing:
        return f"host does not advertise {', '.join(missing)}"
    met = {"auth": bool(target.auth_token), "host_defaults": target.host_defaults,
           "other_cap": any(c != "chains" for c in probe.served)}
    unmet = [n for n in case.needs if not met.get(n, False)]
    if unmet:
        return f"needs {', '.join(unmet)}: {'; '.join(CONDITIONS.get(n, n) for n in unmet)}"
    return None


async def run_case(case: Case, target: Target, probe: Probe) -> CaseResult:
    """Run one case on a fresh connection; never raises for a host misbehaviour."""
    reason = skip_reason(case, target, probe)
    if reason:
        return CaseResult(case, "skipped", [reason])
    started = time.monotonic()
    variables = {"probe": probe.handshake, "probe_limits": probe.limits,
                 "other_cap": next((c for c in probe.served if c != "chains"), None),
                 "auth_token": target.auth_token}
    try:
        conn = await target.connect()
    except (OSError, RuntimeError) as exc:
        return CaseResult(case, "failed", [f"cannot connect: {exc}"])
    run = CaseRun(case, conn, variables, target.connect, target.auth_token)
    status, problems = "passed", []
    try:
        async with asyncio.timeout(case.timeout):
            await run.run(target.auth_token)
    except CaseFailure as failure:
        status, problems = "failed", failure.problems
    except TimeoutError:
        status = "failed"
        problems = [f"case timed out after {case.timeout} s; unconsumed: {run.pending_text()}"]
    except Exception as exc:  # a broken case or transport: report, keep the suite going
        status, problems = "failed", [f"runner error: {type(exc).__name__}: {exc}"]
    finally:
        for opened in run.connections:
            await opened.aclose()
    diagnostics = ("\n".join(c.diagnostics() for c in run.connections).strip()
                   if status == "failed" else "")
    return CaseResult(case, status, problems, time.monotonic() - started, diagnostics)


async def run_suite(cases: list[Case], target: Target, jobs: int = 8,
                    on_result: Callable[[CaseResult], Awaitable[None] | None] | None = None,
                    probe: Probe | None = None) -> list[CaseResult]:
    """Probe the host, then run ``cases`` at most ``jobs`` at a time.

    Returns:
        One result per case, in the order of ``cases``.

    Raises:
        RuntimeError: the probe handshake failed (nothing else can run).
    """
    probe = probe or await probe_host(target)
    gate = asyncio.Semaphore(max(1, jobs))

    async def one(case: Case) -> CaseResult:
        async with gate:
            result = await run_case(case, target, probe)
        if on_result is not None:
            maybe = on_result(result)
            if maybe is not None:
                await maybe
        return result

    return list(await asyncio.gather(*(one(c) for c in cases)))
