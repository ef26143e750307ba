"""Run a validated :class:`~a2e_host.chains.validation.ChainPlan` with anyio, streaming events.

Layer: runtime. Drives the pure :class:`~a2e_host.chains.plan.PlanState`; sends ``chain/event``
frames and one ``chain/resp`` through the one ``emit`` callable it is given. Source:
PROTOCOL.md §3–§5, §8.

The runner's parts, one job each: ``workers`` (the run's worker tasks), ``attempt`` (one
attempt at a node or map item: the node lifecycle, written once), ``mapping`` (a map's
items), ``subchains`` (a skill's sub-chain), ``evaluation`` (expressions within their
ceilings), ``budget`` (the request's node, output and worker-slot budgets), ``events``
(``seq`` stamped in one place) and the pure ``outcome`` (end reasons, outcomes, the
response's error). The parts see a run through the ``run_state`` protocol
(:class:`~a2e_host.chains.run_state.RunState`), so none of them imports this module.

Theory of operation.

* **Workers, not a task per node** (:mod:`~a2e_host.chains.workers`). A chain has a
  pool of worker tasks (at most ``max_concurrency``) that take ready nodes from one
  deque; a chain of fast nodes thus runs on one task, while a chain of slow nodes
  spreads over the pool. A map node runs its items on its own pool of at
  most ``max_map_concurrency`` item workers (:mod:`~a2e_host.chains.mapping`), so a
  100,000-item map never holds more than that many tasks.
* **Exactly one terminal event.** Every started node (and map item) gets ``start`` then
  exactly one ``done`` or ``error`` (:func:`~a2e_host.chains.attempt.run_attempt`); the
  :class:`~a2e_host.chains.events.EventStream` stamps ``seq`` 1, 2, 3 … at the moment the
  event is handed to ``emit``, so the wire order is the ``seq`` order.
* **Ending.** A chain ends (:class:`~a2e_host.chains.outcome.EndReason`) when the plan is
  finished, a node fails under ``abort``, the deadline passes, or it is cancelled. Then
  the workers are cancelled; nodes still running after a short grace (a tool ignoring
  cancellation, a thread that will not stop) get their ``error`` event from here, the
  run is *closed* — any late result is discarded, never applied — and the ``chain/resp``
  is sent at once. A stubborn task can outlive the response, never delay it.
* **Request-wide concurrency.** ``max_concurrency`` and ``max_map_concurrency`` bound
  one *request*, sub-chains included, not each run: every run has one worker of its own
  and every map one item worker of its own (so nothing can wait on a slot its own
  ancestors hold — no deadlock), and any further worker or item worker takes a spare
  slot from the request's :class:`~a2e_host.chains.budget.RequestBudget` and gives it
  back when it stops. A worker holding a spare slot stops when it goes idle while
  sub-chains run, so the slots flow to where work is. Skills that fan out therefore run
  depth-first once the spare slots are taken: at most ``(max_concurrency +
  max_map_concurrency) × max_depth`` runs are alive at once, instead of every node of
  the whole expansion (4 copies over 8 levels kept 21,845 runs and 550 MB alive, and
  full garbage collections of that heap stalled every other session for seconds).
* **Request budgets** (:mod:`~a2e_host.chains.budget`): node executions and kept output
  bytes are counted per request, sub-chains included.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import structlog

from ..errors import ChainFailure
from ..limits import Limits, SessionLimits
from ..telemetry import chain_spans, metrics
from ..tools.model import Tool
from .attempt import run_attempt, run_branch
from .budget import RequestBudget, RunBudget
from .events import Checkpoint, Emit, EventStream, stream_for
from .interpreter import ContextView
from .mapping import run_map
from .messages import ChainResponse
from .nodes import Executor
from .outcome import (
    EndReason,
    NodeFailure,
    OutcomeKind,
    RunResult,
    cancel_message,
    handler_error,
    response_of,
    run_result,
)
from .plan import PlanState
from .recovery_policy import Report
from .resume import Resumption, Starting, fold_plan
from .run_state import Clock, KindRunner, RunConfig, SubchainPlanner, logs_debug
from .step_cache import StepCache
from .terminal import send_terminal_error
from .validation import ChainPlan, PlanNode
from .workers import WorkerPool

__all__ = ["ChainRunner", "Clock", "EndReason", "Emit", "KIND_RUNNERS", "LOOP_CLOCK",
           "RunConfig", "RunResult"]

_GRACE = 0.25  # seconds running nodes get to wind down after a cancel before we move on
_log = structlog.get_logger("a2e_host.scheduler")
_DONE, _FAILED = OutcomeKind.DONE, OutcomeKind.FAILED  # enum lookups cost ~0.1 µs each

KIND_RUNNERS: Mapping[str, KindRunner] = {"branch": run_branch, "map": run_map}
"""How a started node of a control kind runs; every other kind runs through its executor
(:func:`~a2e_host.chains.attempt.execute`)."""

LOOP_CLOCK = Clock(now=anyio.current_time, sleep=anyio.sleep, uniform=random.uniform)
"""The clock retries wait by unless a runner is given another: the event loop's."""

class ChainRunner:
    """Runs one plan once. Not reusable.

    Args:
        plan: the validated plan.
        executors: executors by node kind (``tool``, ``skill``, ``proc``).
        limits: the session's ceilings (a bare :class:`Limits` counts as host scope).
        emit: where events and the response go: every frame of the request goes through
            this one callable.
        wait_writable: awaited before a node starts, so a slow reader applies
            backpressure; None when the sink is unbounded.
        granted: capabilities of the session (passed to executors).
        subchain_planner: see :data:`~a2e_host.chains.run_state.SubchainPlanner`; None
            disables sub-chains.
        log: a structlog logger bound with the request's ids.
        clock: what retries wait by (:data:`LOOP_CLOCK` when None; tests pass a fake).
        tool_of: the host's tool by name, for retries and caching (see
            :class:`~a2e_host.chains.run_state.RunConfig`).
        step_cache: the host's step cache, None for none (PROTOCOL.md §5 Recovery).
        run_key: the run's key, whence its nodes' idempotency keys (``RunConfig``);
            ``""``: ``"/<req_id>"`` (the chains plugin passes ``"<session_id>/<req_id>"``).
        resume / hold_start: see :class:`~a2e_host.chains.run_state.RunConfig`.
        checkpoint: a durable run's :data:`~a2e_host.chains.events.Checkpoint`, or None.
        timeout_left: seconds left of the chain's timeout (a resumed run keeps its
            original deadline); None: the plan's ``timeout``.

    It is the :class:`~a2e_host.chains.run_state.RunState` the run's parts (``attempt``,
    ``mapping``, ``subchains``) are given; they know it only through that protocol.

    Attributes (read by the run's parts; they change only ``running``'s contents):
        plan / config / limits (the effective ceilings) / log.
        events: the request's event stream (shared with sub-chains).
        budget: this run's :class:`~a2e_host.chains.budget.RunBudget`.
        kind_runners: :data:`KIND_RUNNERS`.
        prefix: display prefix of node ids (``"outer/"`` inside a skill); depth: skill
            nesting depth (0 at top level); parent: the run whose skill node runs this.
        context: the chain context (PROTOCOL.md §3): ``input`` and each finished node.
        outputs: node_id → output of every ``done`` node.
        running: display id → whether its terminal event was sent, for every started
            node and item.
        reports: display id → recovery report of a started node with recovery fields,
            until its terminal event carries it.
        monotonic_deadline: the same on ``time.monotonic()`` (None until it starts), for
            a tool's context (:attr:`~a2e_host.chains.nodes.NodeContext.deadline`).
        deadline: when the chain's timeout passes, on ``config.clock`` (``inf`` until
            the run starts; a sub-chain's is its parent's).
        end: why the run ended, None while it runs.
        closed: set once the run's result is taken: no late event is sent after it.
    """

    def __init__(
        self,
        plan: ChainPlan,
        *,
        executors: Mapping[str, Executor],
        limits: SessionLimits | Limits,
        emit: Emit,
        wait_writable: Callable[[], Any] | None = None,
        granted: frozenset[str] = frozenset(),
        subchain_planner: SubchainPlanner | None = None,
        log: Any = None,
        clock: Clock | None = None,
        tool_of: Callable[[str], Tool | None] | None = None,
        step_cache: StepCache | None = None,
        run_key: str = "",
        checkpoint: Checkpoint | None = None,
        resume: Resumption | None = None,
        timeout_left: float | None = None,
        hold_start: Callable[[PlanNode], Awaitable[None] | None] | None = None,
    ) -> None:
        scoped = limits if isinstance(limits, SessionLimits) else SessionLimits(limits)
        config = RunConfig(
            executors=executors, limits=scoped, emit=emit, wait_writable=wait_writable,
            granted=granted, subchain_planner=subchain_planner,
            log=log if log is not None else _log,
            clock=clock if clock is not None else LOOP_CLOCK,
            tool_of=tool_of, step_cache=step_cache,
            run_key=run_key or f"/{plan.request.id}", resume=resume, hold_start=hold_start,
        )
        request = plan.request
        events = stream_for(emit, request, checkpoint,
                            resume.log.last_seq if resume is not None else 0)
        self._timeout_left = timeout_left
        self._setup(plan, config, events, RequestBudget(scoped.effective), None,
                    request.initial_input, "")

    def nested(self, plan: ChainPlan, initial_input: dict[str, Any], *, prefix: str) -> ChainRunner:
        """A run of a skill's sub-chain inside this one: one level deeper, sharing this
        run's configuration, event stream and request budget; it ends when this run does.

        Args:
            plan: the sub-chain's plan.
            initial_input: the sub-chain's context ``input``.
            prefix: its node ids' display prefix (``"<skill node>/"``).
        """
        child = object.__new__(ChainRunner)
        child._timeout_left = None
        child._setup(plan, self.config, self.events, self.budget.request, self,
                     initial_input, prefix)
        return child

    def _setup(
        self,
        plan: ChainPlan,
        config: RunConfig,
        events: EventStream,
        request_budget: RequestBudget,
        parent: ChainRunner | None,
        initial_input: dict[str, Any],
        prefix: str,
    ) -> None:
        self.plan = plan
        self.config = config
        self.limits: Limits = config.limits.effective
        self.log = config.log
        self.debug: bool = parent.debug if parent is not None else logs_debug(config.log)
        """Whether per-node debug lines are written: asked once per run, since building
        a log call's arguments costs more than a node's bookkeeping at other levels."""
        self.events = events
        self.budget = RunBudget(config.limits, request_budget)
        self.kind_runners = KIND_RUNNERS
        self.parent = parent
        self.prefix = prefix
        self.depth: int = 0 if parent is None else parent.depth + 1
        self.context: dict[str, Any] = {"input": initial_input}
        self.outputs: dict[str, Any] = {}
        self.running: dict[str, bool] = {}
        self.reports: dict[str, Report] = chain_spans.reports_for_run()
        self._attempt = chain_spans.attempt_runner(run_attempt)  # run_attempt when unobserved
        self.deadline: float = parent.deadline if parent is not None else math.inf
        self.monotonic_deadline: float | None = (
            parent.monotonic_deadline if parent is not None else None
        )
        self.end: EndReason | None = None
        self.closed = False
        self._state = PlanState(plan)
        self._pool = WorkerPool(
            self._run_node, self._ended, request_budget, self.limits.max_concurrency
        )
        self._nodes_run = 0
        self._failures: list[NodeFailure] = []
        self._abort: NodeFailure | None = None
        self._stop = anyio.Event()
        self._drive_done = anyio.Event()
        self._work_scope = anyio.CancelScope()
        self._starting: Starting | None = None
        if config.resume is not None:  # where the log left this plan (PROTOCOL.md §5 Resume)
            st = self._starting = fold_plan(plan, initial_input, config.resume.log, prefix)
            self._state, self.context, self.outputs = st.state, st.context, st.outputs
            self._failures, self._abort, self._nodes_run = st.failures, st.abort, st.nodes_run
            self.budget.restore(st.nodes_run, st.kept)

    # ── public ──────────────────────────────────────────────────────────────

    def cancel(self) -> None:
        """Ask the run to end with ``cancelled`` (``chain/cancel``). Before :meth:`run`
        it ends at once with ``cancelled``: no node starts, no event is sent."""
        if self.end is None:
            self.end = EndReason.CANCELLED
        self._stop.set()

    async def run_to_response(
        self, started: float, *, before_response: Callable[[], None] | None = None
    ) -> ChainResponse:
        """Run the chain and send its ``chain/resp`` through ``emit``.

        Args:
            started: ``time.monotonic()`` when the request arrived (for ``duration_ms``).
            before_response: called just before the response is handed to ``emit`` (the
                chains plugin takes the chain out of its in-flight table there, so a
                client answering the response at once is never told ``busy``).

        Returns:
            The response that was sent. It is sent the moment the run ends — before
            tasks that ignore cancellation have stopped — and also when the calling task
            is cancelled (as ``cancelled``), before the cancellation propagates.
        """
        sent: list[ChainResponse] = []

        def respond(result: RunResult) -> None:
            if before_response is not None:
                before_response()
            sent.append(response := self._send_response(result, started))
            error = response.error
            metrics.chain_finished("ok" if error is None else error.code, stream=self.events)

        timeout = self.plan.timeout if self._timeout_left is None else self._timeout_left
        metrics.chain_started(self.events)  # events count from here, as they are sent
        running: Awaitable[Any] = self.run(max(0.0, timeout), respond)
        if chain_spans.chain_span_needed():
            running = chain_spans.traced_chain(self.plan.request, running, sent)
        await running
        return sent[0]

    async def run(
        self, chain_timeout: float | None, on_end: Callable[[RunResult], None] | None = None
    ) -> RunResult:
        """Run the chain to its end (or ``chain_timeout`` seconds) and return the result.

        Args:
            chain_timeout: seconds; None for no deadline of its own (a sub-chain runs
                under its parent's).
            on_end: called with the result as soon as the run has ended, before waiting
                for tasks that ignore cancellation (the response must not wait for them).
        """
        if self.end is not None:  # cancelled before it started: nothing runs
            self.closed = True
            result = self._result()
            if on_end is not None:
                on_end(result)
            return result
        if chain_timeout is not None:
            self.deadline = self.config.clock.now() + chain_timeout
            self.monotonic_deadline = time.monotonic() + chain_timeout
        async with anyio.create_task_group() as outer:
            outer.start_soon(self._drive)
            try:
                with anyio.move_on_after(chain_timeout):
                    await self._stop.wait()
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    result = await self._wind_down(EndReason.CANCELLED)
                    if on_end is not None:
                        on_end(result)
                raise
            if self.end is None:
                self.end = EndReason.TIMEOUT
            result = await self._wind_down(self.end)
            if on_end is not None:
                on_end(result)
            outer.cancel_scope.cancel()
        return result

    # ── for the run's parts ─────────────────────────────────────────────────

    @property
    def interrupted(self) -> bool:
        """Whether the run ended before finishing (abort, timeout, cancel): a result
        arriving now is discarded."""
        end = self.end
        return end is not None and end is not EndReason.DONE

    def node_started(self, index: int) -> None:
        """A declared node starts: the plan marks it running and ``nodes_run`` counts it."""
        self._state.node_started(index)
        self._nodes_run += 1

    def terminal_error(self, shown: str, message: str, failure: ChainFailure | None = None
                       ) -> None:
        """Send a started node's (or item's) ``error`` event, unless its terminal event
        was sent already or the run is closed; a node with recovery fields' carries its
        report as ``data`` (PROTOCOL.md §5 Recovery), a resumed one ``resumed: true``
        (§5 Resume); ``failure`` is what a durable run keeps with it."""
        send_terminal_error(self, shown, message, failure)

    def cancel_message(self, *, item: bool = False) -> str:
        """The ``error`` text of a node or item stopped before it finished: why the
        outermost ended run around it ended (:func:`~a2e_host.chains.outcome.
        cancel_message`)."""
        run: ChainRunner = self
        while run.parent is not None and run.parent.end is not None:
            run = run.parent  # a sub-chain ends because the run around it ended
        aborted = ""
        if run.end is EndReason.ABORT and run._abort is not None:
            aborted = run.prefix + run.plan.nodes[run._abort.node_index].node_id
        return cancel_message(run.end, timeout=run.plan.timeout, aborted=aborted, item=item)

    # ── driving ─────────────────────────────────────────────────────────────

    async def _drive(self) -> None:
        try:
            with self._work_scope:
                roots = self._state.start() if self._starting is None else self._resumed()
                if not roots:
                    self._finish_if_done()
                await self._pool.serve(roots)
        finally:
            self._drive_done.set()

    def _resumed(self) -> list[int]:
        """A resumed run's first nodes: the skips the log lost are sent; a recorded abort,
        or a deadline passed while the host was down, ends the run at once; else the
        ready nodes run (PROTOCOL.md §5 Resume)."""
        starting = self._starting
        assert starting is not None
        for s in starting.unsent_skips:
            self.events.send(self.prefix + self.plan.nodes[s].node_id, "skip")
        if starting.abort is None and self.config.clock.now() < self.deadline:
            return starting.ready
        self.end = EndReason.ABORT if starting.abort is not None else EndReason.TIMEOUT
        self._stop.set()
        return []

    def _ended(self) -> bool:
        return self.end is not None

    def _finish_if_done(self) -> None:
        if self._state.finished and self.end is None:
            self.end = EndReason.DONE
            self._stop.set()
            self._pool.wake_idle()

    # ── one node: an attempt, applied to the plan ───────────────────────────

    async def _run_node(self, index: int) -> None:
        pnode = self.plan.nodes[index]
        node_id = pnode.node_id
        outcome = await self._attempt(
            self, self.prefix + node_id, pnode, self._node_context(index)
        )
        kind = outcome.kind
        if kind is _DONE:
            self.outputs[node_id] = outcome.output
            self.context[node_id] = {"output": outcome.output, "status": "done"}
            ready, skipped = self._state.node_done(index, outcome.taken)
            self._after(ready, skipped)
        elif kind is _FAILED and not self.interrupted:
            assert outcome.failure is not None
            self._node_failed(index, pnode, outcome.failure)

    def _node_failed(self, index: int, pnode: PlanNode, failure: ChainFailure) -> None:
        self.context[pnode.node_id] = {"output": None, "status": "error"}
        record = NodeFailure(index, failure)
        if pnode.on_error == "abort":
            self._abort = record
            self.end = EndReason.ABORT
            self._stop.set()
            return
        self._failures.append(record)
        ready, skipped = self._state.node_failed(index)
        self._after(ready, skipped)

    def _after(self, ready: list[int], skipped: list[int]) -> None:
        for s in skipped:
            sid = self.plan.nodes[s].node_id
            self.context[sid] = {"output": None, "status": "skip"}
            self.events.send(self.prefix + sid, "skip")
            if self.debug:
                self.log.debug("node skipped", node_id=self.prefix + sid)
        if ready:
            self._pool.push(ready)
        self._finish_if_done()

    def _node_context(self, index: int) -> ContextView:
        """A node's view of the context: ``output`` of the node that activated it, and
        ``error`` inside a handler (PROTOCOL.md §3)."""
        state = self._state
        act = state.activator[index]
        own: dict[str, Any] = {
            "output": self.outputs.get(self.plan.nodes[act].node_id) if act >= 0 else None
        }
        failed = state.handled_by.get(index)
        if failed is not None:
            f = next((f for f in reversed(self._failures) if f.node_index == failed), None)
            if f is not None:
                own["error"] = handler_error(self.plan.nodes[failed].node_id, f.failure)
        return ContextView(self.context, own)

    # ── ending ──────────────────────────────────────────────────────────────

    async def _wind_down(self, reason: EndReason) -> RunResult:
        if self.end is None:
            self.end = reason
        if reason is not EndReason.DONE:
            self._work_scope.cancel()
            with anyio.move_on_after(_GRACE):
                await self._drive_done.wait()
            # nodes that would not stop: their error event now, their result never
            message = self.cancel_message()
            for shown, ended in list(self.running.items()):
                if not ended:
                    self.terminal_error(shown, message)
                    self.log.debug("node abandoned", node_id=shown)
        resume = self.config.resume
        if resume is not None and self.parent is None and resume.log.in_flight:
            # in flight at the restart, never reached: their one terminal event now
            message = self.cancel_message() if reason is not EndReason.DONE else (
                "cancelled: the chain ended before the node could resume")
            for shown in resume.take_in_flight():
                self.running[shown] = False
                self.terminal_error(shown, message)
        self.closed = True
        return self._result()

    def _result(self) -> RunResult:
        plan = self.plan
        return run_result(plan, self.end, self.prefix, self._state.status, self._abort,
                          self._failures, self.outputs, self._nodes_run)

    def _send_response(self, result: RunResult, started: float) -> ChainResponse:
        response = response_of(self.plan.request, result,
                               int((time.monotonic() - started) * 1000))
        self.events.closed = True
        self.config.emit(response)
        return response
