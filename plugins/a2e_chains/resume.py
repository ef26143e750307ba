"""Durable chains resumed after a restart (PROTOCOL.md §5 Resume).

A mixin of :class:`a2e_chains.ChainPlugin`. When the host starts
(:meth:`~a2e_host.plugin.Plugin.host_started`) with a run store, every run the store
holds as ``running`` — left so by a process that stopped or was killed — is claimed and
resumed as a detached run of the host (``DetachPolicy.KEEP``): its frames continue in
the store after its last ``seq``, and a client attaches to it like to any durable run.

A resumed run:

1. reloads its stored ``chain/req`` and validates it again; when what it was validated
   against changed (a tool's or skill's schema, a skill's nodes: the *plan hash* differs,
   or the chain no longer validates) it ends ``interrupted`` with ``details.reason``
   ``resume_drift``, running nothing;
2. folds its stored frames into the runner's starting state
   (:mod:`a2e_host.chains.resume`): finished, skipped and failed nodes never run again,
   an in-flight node runs again only when its tool is ``idempotent`` or the node sets
   ``resume: "rerun"`` (with the same idempotency key), else ends ``interrupted``;
3. keeps its original deadline (``created + timeout``) and a cancel asked while the host
   was down; a run sent with ``streaming: false`` stored no events, so what ran is
   unknown: it ends ``interrupted`` (reason ``resume_unrecorded``), running nothing;
4. runs under the host's ceilings and every gate the host offers: the session that sent
   it is gone, and it was validated under that session's when accepted.

A durable run's terminal node events carry their node's output (or failure) to the
store (:func:`checkpoint_for`), which is what step 2 reads.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import msgspec

from a2e_host.chains import kinds
from a2e_host.chains.events import Checkpoint
from a2e_host.chains.messages import ChainEvent, ChainRequest, ChainResponse, chain_codec
from a2e_host.chains.resume import (
    RESUME_DRIFT,
    Resumption,
    checkpoint_of,
    may_rerun,
    plan_hash,
    read_log,
)
from a2e_host.chains.scheduler import ChainRunner
from a2e_host.chains.toolbox import Toolbox
from a2e_host.chains.validation import ChainPlan, PlanNode
from a2e_host.codec import encode_message
from a2e_host.config import HostConfig
from a2e_host.errors import ChainFailure, chain_failure_of
from a2e_host.exceptions import ChainInvalid, NodeInterrupted
from a2e_host.limits import SessionLimits
from a2e_host.logs import get_logger
from a2e_host.plugin import HostRuns, RunHandle
from a2e_host.runtime.durable import DurableSink
from a2e_host.store import RunRecord, RunStore, StoredFrame, StoreError

from .replicas import follow_replicas, shared_store

__all__ = ["RESUME_FEATURE", "ResumedChains", "checkpoint_for", "plan_hash_of", "start_hold"]

RESUME_FEATURE = "chain/resume"
"""The feature of resume after a restart (``ChainNode.resume``, ``data.resumed``, code
``interrupted``), advertised with ``chain/durable`` by a host with a run store."""

_PAGE = 1000  # stored frames read per store call

UNRECORDED = "resume_unrecorded"
"""``details.reason`` of a durable run that cannot resume because it sent (and so
stored) no events: ``streaming: false``."""

RESUME_FAILED = "resume_failed"
"""``details.reason`` of a durable run whose resume itself failed (its stored request or
log could not be read, its store failed, the resumed body raised): it ends ``interrupted``
rather than staying ``running`` to fail again at every start."""


def checkpoint_for(sink: DurableSink, run: RunHandle, stops: Callable[[], bool]
                   ) -> Checkpoint:
    """A durable run's :data:`~a2e_host.chains.events.Checkpoint`: each terminal event
    goes to the store with its node's failure, or its output when the event carries none
    (``event_outputs: false``); an output the event carries is stored once, in it. Nothing
    goes anywhere once the host stops ``run`` (``run.host_stopping`` and ``stops()``,
    ``DurableRuns.host_stops``: the run stays as stored, to be resumed)."""
    send = sink.send_nowait

    def checkpoint(event: ChainEvent, phase: str, output: Any,
                   failure: ChainFailure | None) -> None:
        if run.host_stopping and stops():
            return
        if phase == "error" or (output is not None and event.output is None):
            send(event, output=checkpoint_of(phase, output, failure))
        else:
            send(event)

    return checkpoint


def start_hold(sink: DurableSink, toolbox: Toolbox, run: RunHandle,
               stops: Callable[[], bool]) -> Callable[[PlanNode], Awaitable[None] | None]:
    """A durable run's :attr:`~a2e_host.chains.run_state.RunConfig.hold_start`: a node
    that would not run again on resume (:func:`~a2e_host.chains.resume.may_rerun`: a
    tool not declared ``idempotent``, a process, a Python skill) executes only once its
    ``start`` is committed, so a ``kill -9`` cannot make a resume run it a second time
    (PROTOCOL.md §5 Resume); any other node pays nothing (None: no wait). Raises
    :class:`~a2e_host.store.StoreError` (the node fails, unrun) when the store broke or
    the host stops ``run`` (as :func:`checkpoint_for` asks it) before the ``start`` was
    stored."""
    tools = toolbox.tools
    declared = toolbox.skills.declared
    # (kind, name, resume) → whether such a node may run again: all may_rerun reads of
    # a node, so nodes alike (a long chain of one tool, a map's items) are decided once
    decided: dict[tuple[str, str, str], bool] = {}

    def decide(pnode: PlanNode) -> bool:
        node = pnode.node
        spec = kinds.NODE_KINDS.get(pnode.kind)
        registry = spec.registry if spec is not None else None
        idempotent = (registry == "tool"
                      and bool(getattr(tools.get(node.name), "idempotent", False)))
        rerun = decided[pnode.kind, node.name, node.resume] = may_rerun(
            pnode, idempotent=idempotent,
            declared_skill=registry == "skill" and node.name in declared)
        return rerun

    async def held() -> None:
        await sink.committed()
        if run.host_stopping and stops():
            raise StoreError("the host is stopping: the node is left for the resume")

    def hold(pnode: PlanNode) -> Awaitable[None] | None:
        node = pnode.node
        rerun = decided.get((pnode.kind, node.name, node.resume))
        if rerun if rerun is not None else decide(pnode):
            return None
        return held()

    return hold


def plan_hash_of(request: ChainRequest, toolbox: Toolbox, encoded: bytes | None = None
                 ) -> str:
    """The plan hash a durable run is stored with (:func:`a2e_host.chains.resume.
    plan_hash`): its encoded request (``encoded`` when the caller has it, the bytes it
    stores; else encoded here), and the schemas of every tool and skill its nodes name
    (a declarative skill's nodes too), as the host declares them now."""
    # each (kind, name, fallback) once: a long chain names the same few tools many times
    shapes = dict.fromkeys((node.kind, node.name, node.fallback) for node in request.nodes)
    named: dict[tuple[str, str], None] = {}  # (registry, name)
    for kind, name, fallback in shapes:
        spec = kinds.NODE_KINDS.get(kind)
        registry = spec.registry if spec is not None else None
        if registry is None:
            continue
        if name:
            named[registry, name] = None
        if registry == "tool" and fallback:
            named[registry, fallback] = None
    signatures: dict[str, Any] = {}
    for registry, name in named:
        signature = toolbox.signature_of(registry, name)
        skill = toolbox.skills.declared.get(name) if registry == "skill" else None
        signatures[f"{registry}:{name}"] = {
            "signature": msgspec.to_builtins(signature) if signature else None,
            "nodes": msgspec.to_builtins(skill.nodes) if skill is not None else None,
        }
    return plan_hash(encode_message(request) if encoded is None else encoded, signatures)


@dataclass(frozen=True)
class _ResumedSession:
    """The session a resumed run runs as (:class:`~a2e_host.plugin.SessionInfo`): its
    own principal, the host's ceilings and gates (the sender's session is gone)."""

    session_id: str
    agent_id: str
    granted: frozenset[str]
    limits: SessionLimits
    principal: str


class ResumedChains:
    """What :class:`a2e_chains.ChainPlugin` does at host start (a mixin)."""

    config: HostConfig
    toolbox: Toolbox
    store: Any = None

    def _plan_hash(self, request: ChainRequest, encoded: bytes | None = None) -> str:
        """:func:`plan_hash_of` with this host's toolbox (stored when a run is accepted)."""
        return plan_hash_of(request, self.toolbox, encoded)

    async def host_started(self, runs: HostRuns) -> None:
        """Claim and resume every run the store holds as ``running`` (oldest first); with
        a store replicas share, every run this replica takes over from a silent one
        (:func:`~a2e_chains.replicas.follow_replicas`), from now on."""
        store: RunStore | None = self.store
        if store is None:
            return
        shared = shared_store(store)
        if shared is not None:  # replicas: resume what this one takes over, when it does
            follow_replicas(self.durable, shared,  # type: ignore[attr-defined]
                            lambda record: self._resume_run(runs, shared, record))
            return
        for record in await store.unfinished():
            claimed = await store.claim(record.run_id)
            if claimed is not None:
                self._resume_run(runs, store, claimed)

    def _resume_run(self, runs: HostRuns, store: RunStore, record: RunRecord) -> None:
        durable: Any = self.durable  # type: ignore[attr-defined]
        sink = durable.make_sink(record, position=record.last_seq)
        handle = runs.start_detached(self._resumed, record, store, req_id=record.req_id,
                                     capability="chains", sink=sink,
                                     name=f"resumed chain {record.req_id}")
        durable.started(record, handle, sink, None)

    async def _resumed(self, run: RunHandle, record: RunRecord, store: RunStore) -> None:
        """The body of a resumed run: reload, check for drift, fold, run to its end."""
        durable: Any = self.durable  # type: ignore[attr-defined]
        live = durable.live[record.run_id]
        sink: DurableSink = live.sink
        log = get_logger().bind(run_id=record.run_id, req_id=record.req_id)
        # duration_ms counts from the run's acceptance, the time the host was down
        # included, as its deadline does (and as `runs show` reads created → updated)
        started = time.monotonic() - max(0.0, time.time() - record.created)
        try:
            message = chain_codec.decode(record.request)
            assert isinstance(message, ChainRequest)
            request = message
            frames = await _all_frames(store, record.run_id)
            log_of_run = read_log(frames)
            session = _ResumedSession(
                session_id=f"resumed/{record.run_id}", agent_id="",
                granted=frozenset({"chains", *self.gates()}),  # type: ignore[attr-defined]
                limits=SessionLimits(self.config.limits), principal=record.principal)
            drift = await self._drift(request, record, session)
            if drift:
                durable.finished(live, _interrupted(request, started, drift, RESUME_DRIFT))
                log.warning("chain not resumed", reason=RESUME_DRIFT, detail=drift)
                return
            if not request.streaming:
                durable.finished(live, _interrupted(request, started, (
                    "it was sent with streaming false, so no event recorded what ran"),
                    UNRECORDED))
                log.warning("chain not resumed", reason=UNRECORDED)
                return
            plan: ChainPlan = await self._plan(request, session)  # type: ignore[attr-defined]
            tools = self.toolbox.tools
            declared = self.toolbox.skills.declared
            resume = Resumption(
                log_of_run,
                idempotent=lambda name: bool(getattr(tools.get(name), "idempotent", False)),
                declared_skill=lambda name: name in declared,
            )

            def emit(m: Any) -> None:
                if live.handle.host_stopping and durable.host_stops(live):
                    return  # the run stays as stored, for the next start to resume
                if isinstance(m, ChainResponse):
                    durable.finished(live, m)
                else:
                    sink.send_nowait(m)

            left = None if record.deadline is None else record.deadline - time.time()
            runner = ChainRunner(
                plan, executors=self.toolbox.executors, limits=session.limits, emit=emit,
                wait_writable=sink.wait_writable, granted=session.granted,
                subchain_planner=self.planner(session),  # type: ignore[attr-defined]
                log=log, tool_of=tools.get,
                step_cache=self.step_cache,  # type: ignore[attr-defined]
                run_key=record.run_id, resume=resume,
                checkpoint=checkpoint_for(sink, live.handle, partial(durable.host_stops, live)),
                timeout_left=left,
                hold_start=start_hold(sink, self.toolbox, live.handle,
                                      partial(durable.host_stops, live)),
            )
            run.on_cancel(runner.cancel)
            if record.cancel_requested:
                runner.cancel()
            log.info("chain resumed", last_seq=log_of_run.last_seq,
                     restored=len(log_of_run.records), in_flight=len(log_of_run.in_flight))
            response = await runner.run_to_response(started)
            log.info("chain finished", success=response.success, nodes_run=response.nodes_run,
                     code=response.error.code if response.error is not None else "")
        except Exception as exc:  # noqa: BLE001 — the run must still end, once
            log.error("chain not resumed", reason=RESUME_FAILED, exc_info=exc)
            if not live.ended and not durable.host_stops(live):
                durable.finished(live, _interrupted(
                    record, started, f"resuming it failed ({type(exc).__name__})",
                    RESUME_FAILED))
        finally:
            await durable.ended(live)

    async def _drift(self, request: ChainRequest, record: RunRecord,
                     session: _ResumedSession) -> str:
        """Why the run cannot resume as accepted (``""``: it can): its plan hash differs,
        or it no longer validates."""
        if record.plan_hash and record.plan_hash != plan_hash_of(request, self.toolbox):
            return ("the tools or skills it names changed since it was accepted (its plan "
                    "hash differs)")
        try:
            await self._plan(request, session)  # type: ignore[attr-defined]
        except ChainInvalid as exc:
            return f"it no longer validates: {exc.message}"
        return ""


def _interrupted(request: ChainRequest | RunRecord, started: float, why: str, reason: str
                 ) -> ChainResponse:
    """The ``chain/resp`` of a run that could not resume (code ``interrupted``,
    ``details.reason``), to ``request`` (its stored record when it could not be read)."""
    req_id = request.req_id if isinstance(request, RunRecord) else request.id
    return ChainResponse(
        req_id=req_id, chain_id=request.chain_id, success=False,
        duration_ms=int((time.monotonic() - started) * 1000),
        error=chain_failure_of(NodeInterrupted(
            f"the chain was not resumed after the host restarted: {why}; send it again",
            details={"reason": reason})),
    )


async def _all_frames(store: RunStore, run_id: str) -> list[StoredFrame]:
    frames: list[StoredFrame] = []
    while True:
        page = await store.frames(run_id, after=frames[-1].seq if frames else 0, limit=_PAGE)
        frames.extend(page)
        if len(page) < _PAGE:
            return frames
