"""The ``chains`` capability: ``chain/req``, ``chain/event``, ``chain/resp`` and the
``chain/cancel`` extension (seed 000; PROTOCOL.md §4–§6).

A first-party plugin that uses only the public plugin API (:mod:`a2e_host.plugin`) and
is found through the entry-point group ``a2e_host.plugins`` like any third-party one.
Per request it validates the chain into a plan (:func:`a2e_host.chains.validation.validate_chain`),
then runs it with :class:`a2e_host.chains.scheduler.ChainRunner` as a *run of the host*
(``ctx.start_run``, :mod:`a2e_host.runtime.runs`), so several chains of one connection
run concurrently. The run owns the chain's task and its event sink (``seq`` is the
run's); the connection that sent the request is attached to it, and detaching it (the
connection dropped) cancels it.

Life of one ``chain/req``, each step keeping "exactly one ``chain/resp``":

1. **Accepted** (:meth:`ChainPlugin.handle`, on the reader): counted against
   ``max_parallel`` and listed as a run under its request id (``ctx.runs``), so a
   ``chain/cancel`` right behind it finds it.
2. **Planned** in its own task: validated, and its worst-case node executions through
   declared skills held to ``max_total_nodes``. A chain of more than
   :data:`THREAD_PLANNING_NODES` nodes is planned in a worker thread (at most two at a
   time), so other sessions keep being served meanwhile. A refusal, and any exception
   while planning (a RecursionError, a bug), ends in a ``chain/resp``.
3. **Run** by a :class:`~a2e_host.chains.scheduler.ChainRunner` emitting into the run's
   sink (or answered ``cancelled`` at once, when cancelled while planned).
4. **Released**: the run leaves the in-flight table just before its ``chain/resp`` is
   written, so a client that sends its next chain the moment the response arrives is
   never told ``busy``.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any, ClassVar

import anyio
import anyio.lowlevel

from a2e_host.chains import kinds
from a2e_host.chains.messages import (
    CHAIN_MESSAGE_TYPES,
    ChainAttach,
    ChainCancel,
    ChainDetach,
    ChainNode,
    ChainRequest,
    ChainResponse,
)
from a2e_host.chains.problems import chain_invalid
from a2e_host.chains.scheduler import ChainRunner
from a2e_host.chains.secret_refs import request_secret_problems
from a2e_host.chains.toolbox import Toolbox
from a2e_host.chains.validation import ChainPlan, expression_chars, validate_chain
from a2e_host.config import HostConfig
from a2e_host.errors import ChainFailure, chain_failure_of
from a2e_host.exceptions import (
    Busy,
    ChainInvalid,
    ChainLimitExceeded,
    InvalidMessage,
    UnknownSession,
)
from a2e_host.messages import Message
from a2e_host.plugin import Plugin, PluginContext, RunHandle, SessionInfo
from a2e_host.runtime.limiters import loop_limiter
from a2e_host.secrets import register, unregister

from .counting import check_total_nodes, worst_case_node_count
from .durable_handlers import DurableChains, forget_durable_runs
from .resume import RESUME_FEATURE, ResumedChains, checkpoint_for, start_hold
from .runs import RunsPlugin
from .shared import forget_engine, step_cache_for, toolbox_for

__all__ = [
    "ChainPlugin", "RunsPlugin", "NODE_KIND_GATES", "THREAD_PLANNING_NODES",
    "worst_case_node_count",
]

NODE_KIND_GATES = kinds.gates()
"""The gates of ``chains``, from the node-kind table: names in ``agent_caps`` that unlock
node kinds (PROTOCOL.md §8); this host offers ``proc`` only when the configuration allows
an executable."""

THREAD_PLANNING_NODES = 1000
"""Declared nodes above which a chain is validated in a worker thread, not on the loop
(validation costs ~17 µs a node: up to ~17 ms on the loop, less than the hop to a thread
and back costs a request of that size in latency and lock contention)."""

THREAD_PLANNING_CHARS = 16_384
"""Characters of expressions above which a chain is validated in a worker thread: parsing
costs by text, not by node (one node may declare 120 expressions of 65,000 characters)."""

DURABLE_FEATURE = "chain/durable"
"""The feature of durable runs: ``chain/req.durable``, ``idempotency_key``, ``retention``,
``chain/accepted``, ``chain/attach``, ``chain/detach``, ``chain/cancel.run_id``."""

_PLANNING_THREADS = 2  # chains validated at once in worker threads, host-wide
_planning_limiter: anyio.lowlevel.RunVar[anyio.CapacityLimiter] = anyio.lowlevel.RunVar(
    "a2e_chains_planning_limiter"
)


class ChainPlugin(ResumedChains, DurableChains, Plugin):
    """Validates and runs chains.

    Args:
        config: the host configuration (tool packs, skills, proc allowlist, limits).
        toolbox: the executors and catalog; built from ``config`` when None.
    """

    capability: ClassVar[str] = "chains"
    namespace: ClassVar[str] = "chain/*"
    priority: ClassVar[int] = 10
    message_types: ClassVar[tuple[type[Message], ...]] = CHAIN_MESSAGE_TYPES
    features: ClassVar[tuple[str, ...]] = (
        "chain/cancel",
        "handshake/limits",
        "chain/req.include_outputs",
        "chain/req.event_outputs",
        "chain/node.retry",
        "chain/node.timeout",
        "chain/node.fallback",
        "chain/cache",
        "chain/event.report",
        "chain/req.trace_context",
        "chain/req.secrets",
    )

    def __init__(self, config: HostConfig, toolbox: Toolbox | None = None) -> None:
        super().__init__(config)
        self.toolbox = toolbox if toolbox is not None else toolbox_for(config)
        self.step_cache = step_cache_for(config)
        """The host's step cache (PROTOCOL.md §5 Recovery): one for every session and
        every plugin of the host (:func:`~a2e_chains.shared.step_cache_for`)."""
        # per session (its limits and grants shape validation): (skill, nodes id) → plan
        self._skill_plans: dict[str, dict[tuple[str, int], ChainPlan]] = {}
        # the configured secrets are redacted from every frame and log line while it lives
        self._secrets_token = register({n: s.value for n, s in config.secrets.items()})

    def gates(self) -> tuple[str, ...]:
        """``skill``, and ``proc`` when ``config.allow_proc`` names an executable (§8)."""
        return tuple(g for g in NODE_KIND_GATES if g != "proc" or self.config.allow_proc)

    def metadata(self, session: SessionInfo) -> dict[str, Any]:
        """Namespace, priority, features and the session's effective ceilings (§2); the
        features ``chain/durable`` and ``chain/resume`` only on a host with a run store
        (§5 Durable runs, Resume)."""
        meta = super().metadata(session)
        meta["limits"] = session.limits.effective.to_dict()
        if self.store is not None:
            meta["features"] += [DURABLE_FEATURE, RESUME_FEATURE]
        return meta

    async def handle(self, message: Message, ctx: PluginContext) -> None:
        """Start a chain (``chain/req``) or cancel one (``chain/cancel``); attach to or
        detach from a durable one (``chain/attach``, ``chain/detach``, §5 Durable runs).

        Raises:
            Busy: ``max_parallel`` chains are in flight, or the host is shutting down.
            InvalidMessage: a ``chain/cancel`` for no chain in flight, or a message type
                this plugin does not take from agents.
            StoreRequired: a durable ``chain/req`` on a host without a run store.
            UnknownRun / RunExpired / BadSinceSeq: an attach, detach or cancel naming
                no run of this principal, an expired one, or a ``since_seq`` outside it.
        """
        if isinstance(message, ChainRequest):
            if message.secrets and self._refuse_secrets(message, ctx):
                return  # refused before a value is registered, stored or run
            token = register(message.secrets)  # redacted from here on (the stored request)
            try:
                if message.durable:
                    await self._start_durable(message, ctx)
                else:
                    self._start(message, ctx)
            finally:
                unregister(token)  # the run registers them for its own lifetime
        elif isinstance(message, ChainCancel):
            await self._cancel(message, ctx)
        elif isinstance(message, ChainAttach):
            await self._attach(message, ctx)
        elif isinstance(message, ChainDetach):
            await self._detach(message, ctx)
        else:
            raise InvalidMessage(
                f"{message.TYPE!r} is sent by hosts, not agents; send chain/req or chain/cancel"
            )

    def _refuse_secrets(self, request: ChainRequest, ctx: PluginContext) -> bool:
        """Answer a request whose own ``secrets`` are malformed (too many, too short, too
        long, shadowing) with its refusal, before anything else; whether it did."""
        found = request_secret_problems(request, self.toolbox.secrets, ctx.session.limits)
        if found:
            ctx.outbox.send_nowait(_refusal(request, chain_invalid(found), time.monotonic()))
        return bool(found)

    def _start(self, request: ChainRequest, ctx: PluginContext) -> None:
        self._check_admission(request, ctx)
        ctx.start_run(self._run, request, ctx.session, ctx.log, time.monotonic(),
                      name=f"chain {request.id}")

    def _check_admission(self, request: ChainRequest, ctx: PluginContext) -> None:
        if ctx.closing:
            raise Busy("the host is shutting down and takes no new chains", retryable=True)
        in_flight = len(ctx.runs)
        limit = ctx.session.limits.effective.max_parallel
        if in_flight >= limit:
            raise Busy(
                f"{in_flight} chains are in flight on this session, the max_parallel "
                f"limit is {limit}; wait for a chain/resp before sending more"
            )
        if ctx.runs.get(request.id) is not None:
            raise InvalidMessage(
                f"a chain with request id {request.id!r} is already running; use a fresh id"
            )

    async def _cancel(self, message: ChainCancel, ctx: PluginContext) -> None:
        session = ctx.session
        if message.session_id and message.session_id != session.session_id:
            raise UnknownSession(
                f"session {message.session_id!r} is not this connection's session"
            )
        run = None if message.run_id else ctx.runs.get(message.req_id)
        if run is None and await self._cancel_durable(message, ctx):
            return
        if run is None:
            raise InvalidMessage(
                f"no chain in flight with req_id {message.req_id!r} on this session "
                "(it may have finished already)"
            )
        live = self.durable.live_by_req(session.principal, message.req_id)
        if live is not None and live.handle is run:
            self.durable.cancel(live)  # recorded, so a restart does not resume it
        else:
            run.cancel()

    async def _run(
        self,
        run: RunHandle,
        request: ChainRequest,
        session: SessionInfo,
        log: Any,
        started: float,
        run_id: str = "",
    ) -> None:
        log = log.bind(chain_id=request.chain_id)
        sink = run.sink
        runner: ChainRunner | None = None
        responded = False
        durable = self.durable  # looked up once: emit runs per event
        live = durable.live.get(run_id) if run_id else None
        secrets = self.toolbox.secrets.resolver_for(request)
        secrets_token = register(secrets.values()) if secrets is not None else None

        def emit(message: Message) -> None:
            if live is None:
                sink.send_nowait(message)
            elif live.handle.host_stopping and durable.host_stops(live):
                return  # the host is stopping: the run stays as stored, to be resumed
            elif isinstance(message, ChainResponse):
                durable.finished(live, message)  # stored with its status, then sent
            else:
                sink.send_nowait(message)

        def respond(response: ChainResponse) -> None:
            nonlocal responded
            responded = True
            run.release()
            emit(response)

        def before_response() -> None:  # the runner sends its own response
            nonlocal responded
            responded = True
            run.release()

        try:
            try:
                plan = await self._plan(request, session)
            except ChainInvalid as exc:
                problems = exc.details.get("problems_total", len(exc.details.get("errors", [])))
                log.info("chain refused", code=exc.code, problems=problems)
                respond(_refusal(request, exc, started))
                return
            except RecursionError:
                log.info("chain refused", code="chain_invalid", reason="recursion")
                respond(_refusal(request, ChainInvalid(
                    "the chain is nested too deeply to validate (an expression or a "
                    "structure inside it exceeded the validator's recursion limit); "
                    "flatten it"
                ), started))
                return
            runner = ChainRunner(
                plan,
                executors=self.toolbox.executors if secrets is None
                else secrets.wrap(self.toolbox.executors),
                limits=session.limits,
                emit=emit,
                wait_writable=sink.wait_writable,
                granted=session.granted,
                subchain_planner=self.planner(session),
                log=log,
                tool_of=self.toolbox.tools.get,
                step_cache=self.step_cache,
                run_key=run_id or f"{session.session_id}/{request.id}",
                checkpoint=None if live is None else checkpoint_for(
                    live.sink, live.handle, partial(durable.host_stops, live)),
                hold_start=None if live is None else start_hold(
                    live.sink, self.toolbox, live.handle, partial(durable.host_stops, live)),
            )
            run.on_cancel(runner.cancel)  # at once when cancelled while it was planned
            log.info("chain started", nodes=len(plan.nodes))
            try:
                response = await runner.run_to_response(started, before_response=before_response)
            except anyio.get_cancelled_exc_class():
                log.info("chain finished", success=False, code="cancelled", reason="cancelled")
                raise
            log.info(
                "chain finished",
                success=response.success,
                nodes_run=response.nodes_run,
                duration_ms=response.duration_ms,
                code=response.error.code if response.error is not None else "",
            )
        except Exception as exc:  # noqa: BLE001 — a bug must still answer the request, once
            if responded:
                log.error("the chain failed inside the host after its response", exc_info=exc)
                return
            log.error("the chain failed inside the host", exc_info=exc)
            stage = "running" if runner is not None else "validating"
            respond(_answer(request, started, chain_failure_of(exc, stage=stage)))
        finally:
            if secrets_token is not None:
                unregister(secrets_token)
            if live is not None:
                await self.durable.ended(live)

    def _refused(self, request: ChainRequest, exc: Exception) -> ChainResponse:
        """The ``chain/resp`` refusing ``request`` before it runs (``nodes_run`` 0)."""
        return _answer(request, time.monotonic(), chain_failure_of(exc))

    async def _plan(self, request: ChainRequest, session: SessionInfo) -> ChainPlan:
        """Validate ``request`` and hold its worst case to ``max_total_nodes``; in a worker
        thread when it has more than :data:`THREAD_PLANNING_NODES` nodes or
        :data:`THREAD_PLANNING_CHARS` characters of expressions.

        Raises:
            ChainInvalid: the chain is refused (every problem in ``details.errors``).
        """
        if (
            len(request.nodes) <= THREAD_PLANNING_NODES
            and expression_chars(request.nodes) <= THREAD_PLANNING_CHARS
        ):
            return self.plan_now(request, session)
        limiter = loop_limiter(_planning_limiter, _PLANNING_THREADS)
        return await anyio.to_thread.run_sync(
            self.plan_now, request, session, limiter=limiter
        )

    def plan_now(self, request: ChainRequest, session: SessionInfo) -> ChainPlan:
        """Validate ``request`` for ``session`` (its limits, grants and tool grant) and
        plan it, on the calling thread (PROTOCOL.md §4, §6).

        Raises:
            ChainInvalid: the chain is refused (``chain_invalid``, with its problems).
            ChainLimitExceeded: a ceiling of §6 (``chain_limit``), the worst-case node
                count through declared skills included.
        """
        plan = validate_chain(request, self.toolbox, session.limits, granted=session.granted,
                              tool_grant=self.config.tool_grant(session.principal))
        check_total_nodes(
            request.nodes, self.toolbox.skills.declared, session.limits
        )
        return plan

    def planner(self, session: SessionInfo) -> Any:
        """Plans for declared skills' sub-chains, validated once per skill and session:
        a :data:`~a2e_host.chains.run_state.SubchainPlanner` for ``ChainRunner``'s
        ``subchain_planner``.

        The planner is called with the depth the sub-chain would run at, and refuses
        (``max_depth``) a skill whose root nodes — which always start — start skills,
        which start skills … past ``max_depth``: such a sub-chain is sure to fail with
        ``max_depth``, and failing now spares expanding every level of it first (a
        fan-out of 4 per level, 9 levels deep, would start ~87,000 nodes before the
        deepest one is refused).
        """
        plans = self._skill_plans.setdefault(session.session_id, {})
        subchain_kinds = kinds.NODE_KINDS.subchain_kinds
        declared = self.toolbox.skills.declared
        nesting: dict[str, int] = {}  # skill → levels its roots certainly nest below it

        def plan_of(name: str, nodes: list[ChainNode], entry_node: str) -> ChainPlan:
            key = (name, id(nodes))
            plan = plans.get(key)
            if plan is None:
                request = ChainRequest(nodes=nodes, entry_node=entry_node, chain_id=name)
                plan = validate_chain(
                    request, self.toolbox, session.limits, granted=session.granted,
                    tool_grant=self.config.tool_grant(session.principal),
                )
                plans[key] = plan
            return plan

        def certain_nesting(name: str, limit: int) -> int:
            """Levels of sub-chains the skill ``name`` is sure to start below itself
            through root skill nodes under ``on_error: abort``; at most ``limit``."""
            stack = [name]
            entered: set[str] = set()
            while stack:
                current = stack[-1]
                if current in nesting:
                    stack.pop()
                    continue
                entered.add(current)
                skill = declared[current]
                try:
                    plan = plan_of(current, skill.nodes, skill.entry_node)
                except ChainInvalid:
                    nesting[current] = 0  # refused when it starts, nothing below it
                    stack.pop()
                    continue
                children = [
                    plan.nodes[r].node.name
                    for r in plan.roots
                    if plan.nodes[r].kind in subchain_kinds
                    and plan.nodes[r].on_error == "abort"
                    and plan.nodes[r].node.name in declared
                ]
                pending = [c for c in children if c not in nesting and c not in entered]
                if pending:
                    stack.extend(pending)
                    continue
                stack.pop()
                # a child still being entered is on a cycle: it nests without end
                nesting[current] = min(limit, max(
                    (1 + nesting.get(c, limit) for c in children), default=0
                ))
            return nesting[name]

        def plan_skill(name: str, nodes: list[ChainNode], entry_node: str, depth: int) -> ChainPlan:
            plan = plan_of(name, nodes, entry_node)
            max_depth = session.limits.effective.max_depth
            if name in declared and depth + certain_nesting(name, max_depth + 1) > max_depth:
                err = session.limits.refusal("max_depth", max_depth + 1)
                if err is None:  # pragma: no cover - max_depth + 1 is over max_depth
                    raise RuntimeError("max_depth refusal expected")
                raise ChainLimitExceeded(
                    f"skill {name!r} would nest past max_depth {err.details['limit']}: its "
                    "root nodes always start skills whose root nodes start skills … deeper "
                    "than that",
                    details=err.details,
                )
            return plan

        return plan_skill

    async def session_closed(self, session: SessionInfo) -> None:
        """Forget the session's skill plans (its chains, runs of the host, were
        cancelled when its connection detached from them; its durable runs keep the plans
        they hold)."""
        self._skill_plans.pop(session.session_id, None)

    async def aclose(self) -> None:
        """The host is stopping: close the run store (committing what is queued)."""
        forget_durable_runs(self.config)
        forget_engine(self.config)
        unregister(self._secrets_token)


def _refusal(request: ChainRequest, exc: ChainInvalid, started: float) -> ChainResponse:
    """The ``chain/resp`` for an invalid chain: no events, ``nodes_run`` 0 (PROTOCOL.md §4)."""
    return _answer(request, started, chain_failure_of(exc))


def _answer(request: ChainRequest, started: float, failure: ChainFailure) -> ChainResponse:
    return ChainResponse(
        req_id=request.id,
        chain_id=request.chain_id,
        success=False,
        outputs={},
        final_output=None,
        duration_ms=int((time.monotonic() - started) * 1000),
        nodes_run=0,
        error=failure,
    )
