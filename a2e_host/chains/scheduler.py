"""Run a validated :class:`~a2e_host.chains.validation.ChainPlan` with anyio, streaming events.

Layer: runtime. Drives the pure :class:`~a2e_host.chains.plan.PlanState`; sends ``chain/event``
frames and one ``chain/resp`` through an ``emit`` callable. Source: PROTOCOL.md §3–§5, §8.

Theory of operation.

* **Workers, not a task per node.** A chain has a pool of worker tasks (at most
  ``max_concurrency``) that take ready nodes from one deque. A worker that finishes a
  node pushes the nodes it made ready and keeps going; an idle worker is woken, and a
  new worker is spawned only when every existing one is busy. A chain of fast nodes
  thus runs on one task (anyio task-group children cost ~60 µs each), while a chain of
  slow nodes spreads over the pool. A map node runs its items on its own pool of at
  most ``max_map_concurrency`` item workers, so a 100,000-item map never holds more
  than that many tasks.
* **Exactly one terminal event.** Every started node (and map item) gets ``start`` then
  exactly one ``done`` or ``error``; the :class:`_Events` writer stamps ``seq`` 1, 2, 3 …
  at the moment the event is handed to ``emit``, so the wire order is the ``seq`` order.
* **Ending.** A chain ends when the plan is finished, a node fails under ``abort``, the
  deadline passes, or it is cancelled. Then the workers are cancelled; nodes still
  running after a short grace (a tool ignoring cancellation, a thread that will not
  stop) get their ``error`` event from here, the run is *closed* — any late result is
  discarded, never applied — and the ``chain/resp`` is sent at once. A stubborn task can
  outlive the response, never delay it.
* **Request-wide concurrency.** ``max_concurrency`` and ``max_map_concurrency`` bound
  one *request*, sub-chains included, not each run: every run has one worker of its own
  and every map one item worker of its own (so nothing can wait on a slot its own
  ancestors hold — no deadlock), and any further worker or item worker takes a spare
  slot from the request's :class:`_RequestBudget` and gives it back when it stops. A
  worker holding a spare slot stops when it goes idle while sub-chains run, so the slots
  flow to where work is. Skills that fan out therefore run depth-first once the spare
  slots are taken: at most ``(max_concurrency + max_map_concurrency) × max_depth`` runs
  are alive at once, instead of every node of the whole expansion (4 copies over 8
  levels kept 21,845 runs and 550 MB alive, and full garbage collections of that heap
  stalled every other session for seconds).
* **Request budgets.** One :class:`_RequestBudget` per request, shared with the
  sub-chains its skills run, counts node executions (``max_total_nodes``: every declared
  node that starts, at any depth, plus every map item) and the bytes of outputs the
  request keeps (``max_chain_output_bytes``: each node's and map item's output as it
  arrives; a sub-chain's are released when it ends, since only its final output — then
  counted as the skill node's — is kept). An output is measured without encoding it
  (:mod:`a2e_host.sizes`), in slices that let the event loop breathe.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread
import jmespath.exceptions
import structlog

from ..codec import json_kind
from ..errors import (
    ChainFailure,
    cancelled_failure,
    chain_failure_of,
    failure_message_of,
    timeout_failure,
)
from ..exceptions import ChainError, ChainLimitExceeded, NodeError
from ..limits import Limits, SessionLimits
from ..messages import Message
from ..runtime.limiters import loop_limiter
from ..sizes import JsonSizer, quick_json_size
from .expressions import Expression, clip, is_truthy
from .interpreter import (
    Budget,
    ContextView,
    EvaluationSliceExhausted,
    ExpressionBudgetExceeded,
)
from .messages import ChainEvent, ChainNode, ChainRequest, ChainResponse
from .nodes import Executor, NodeContext
from .plan import NodeStatus, PlanState
from .validation import ChainPlan, PlanNode

__all__ = ["ChainRunner", "Emit", "RunResult"]

Emit = Callable[[Message], None]
"""Hands one message to the connection's outbox; never blocks, never drops."""

_GRACE = 0.25  # seconds running nodes get to wind down after a cancel before we move on
_YIELD_EVERY = 64  # nodes a worker runs before it yields to the event loop
_SIZE_SLICE = 20_000  # values an output measurement counts before it yields to the loop
_INLINE_STEPS = 4096  # expression steps taken on the event loop (~1-2 ms) before a thread
_EXPRESSION_THREADS = 4  # long expression evaluations running at once (per event loop)
_EVALUATION_ERRORS = (
    jmespath.exceptions.JMESPathError, TypeError, ValueError, KeyError, RecursionError,
    ArithmeticError,  # avg() of a 401-digit integer overflows a float
)
_log = structlog.get_logger("a2e_host.scheduler")
_expression_limiter: anyio.lowlevel.RunVar[anyio.CapacityLimiter] = anyio.lowlevel.RunVar(
    "a2e_host_expression_limiter"
)


def _expression_threads() -> anyio.CapacityLimiter:
    """The event loop's own limiter for expression threads: hostile chains can take at
    most these, never every worker thread of the host."""
    return loop_limiter(_expression_limiter, _EXPRESSION_THREADS)


@functools.lru_cache(maxsize=64)
def _inline_budget(max_steps: int, max_bytes: int) -> Budget:
    return Budget(max_steps=max_steps, max_bytes=max_bytes, slice_steps=_INLINE_STEPS)


class _Events:
    """The per-request event writer: stamps ``seq`` and hands events to ``emit``.

    Shared by a chain and the sub-chains its skills run, so ``seq`` stays one gapless
    sequence per request.
    """

    __slots__ = ("emit", "req_id", "seq", "streaming", "outputs", "closed")

    def __init__(self, emit: Emit, req_id: str, streaming: bool, outputs: bool = True) -> None:
        self.emit = emit
        self.req_id = req_id
        self.seq = 0
        self.streaming = streaming
        self.outputs = outputs  # chain/req.event_outputs: false sends done events' output null
        self.closed = False

    def send(self, node_id: str, phase: str, output: Any = None, error: str = "") -> None:
        if self.closed or not self.streaming:
            return
        self.seq += 1
        self.emit(
            ChainEvent(
                req_id=self.req_id,
                seq=self.seq,
                node_id=node_id,
                phase=phase,
                output=output if self.outputs else None,
                error=error,
            )
        )


_REQUEST_CEILINGS = frozenset({"max_chain_output_bytes", "max_total_nodes"})


def _exhausts_request(exc: BaseException) -> bool:
    """Whether a failure is a request-wide ceiling refusing (``max_chain_output_bytes``,
    ``max_total_nodes``): the request's budget does not come back, so a map whose item
    fails so fails as a whole, whatever the template's ``on_error``."""
    return (
        isinstance(exc, ChainError)
        and exc.code == "chain_limit"
        and exc.details.get("ceiling") in _REQUEST_CEILINGS
    )


class _RequestBudget:
    """What one request has used of its chain-wide ceilings (PROTOCOL.md §6), shared by
    the chain and every sub-chain its skills run.

    Attributes:
        nodes: node executions so far (``max_total_nodes``): declared nodes that started,
            at any depth, plus map items started (a map whose items alone would pass the
            ceiling fails before starting any).
        output_bytes: encoded bytes of the outputs the request keeps now
            (``max_chain_output_bytes``).
    """

    __slots__ = (
        "nodes", "output_bytes", "spare_workers", "spare_items", "nested", "idle_borrowed"
    )

    def __init__(self, limits: Limits | None = None) -> None:
        self.nodes = 0
        self.output_bytes = 0
        limits = limits or Limits()
        # slots beyond each run's own worker and each map's own item worker
        self.spare_workers = limits.max_concurrency - 1
        self.spare_items = limits.max_map_concurrency - 1
        self.nested = 0  # sub-chain runs alive now
        # wake-ups of idle workers holding a spare slot, in any run of the request: set
        # when a sub-chain starts, so they give their slots back to it
        self.idle_borrowed: set[anyio.Event] = set()

    def release_idle_slots(self) -> None:
        """Wake every idle worker holding a spare slot: it returns the slot and stops."""
        for wake in self.idle_borrowed:
            wake.set()
        self.idle_borrowed.clear()


@dataclass(slots=True)
class RunResult:
    """What a finished run produced (the sub-chain API returns it; the top level turns it
    into a ``chain/resp``): the response's ``success``, ``outputs``, ``final_output``,
    ``nodes_run`` and ``error`` (PROTOCOL.md §5)."""

    success: bool
    outputs: dict[str, Any]
    final_output: Any
    nodes_run: int
    error: ChainFailure | None


@dataclass(slots=True)
class _Failure:
    """A node failure as the response's ``error`` will describe it."""

    node_index: int
    code: str
    message: str
    details: dict[str, Any]
    retryable: bool


class ChainRunner:
    """Runs one plan once. Not reusable.

    Args:
        plan: the validated plan.
        executors: executors by node kind (``tool``, ``skill``, ``proc``).
        limits: the session's ceilings (a bare :class:`Limits` counts as host scope).
        emit: where events (and, at top level, the response) go.
        wait_writable: awaited before a node starts, so a slow reader applies
            backpressure; None when the sink is unbounded.
        granted: capabilities of the session (passed to executors).
        initial_input: the context's ``input`` (defaults to the request's).
        events: a parent's event writer (sub-chains); None creates one.
        prefix: node id prefix for events (``"outer/"`` inside a skill).
        depth: skill nesting depth (0 at top level).
        subchain_planner: turns ``(skill_name, nodes, entry_node, depth)`` into a plan
            for ``run_subchain`` at that nesting depth, or raises (a ``ChainError`` fails
            the skill node); None disables sub-chains.
        log: a structlog logger bound with the request's ids.
        budget: the request's budget (sub-chains share their parent's); None creates one.
    """

    def __init__(
        self,
        plan: ChainPlan,
        *,
        executors: dict[str, Executor],
        limits: SessionLimits | Limits,
        emit: Emit,
        wait_writable: Callable[[], Any] | None = None,
        granted: frozenset[str] = frozenset(),
        initial_input: dict[str, Any] | None = None,
        events: _Events | None = None,
        prefix: str = "",
        depth: int = 0,
        subchain_planner: Callable[[str, list[ChainNode], str, int], ChainPlan] | None = None,
        log: Any = None,
        budget: _RequestBudget | None = None,
    ) -> None:
        request: ChainRequest = plan.request
        self.plan = plan
        self.executors = executors
        self.scoped_limits = limits if isinstance(limits, SessionLimits) else SessionLimits(limits)
        self.limits: Limits = self.scoped_limits.effective
        self.granted = granted
        self.prefix = prefix
        self.depth = depth
        self.subchain_planner = subchain_planner
        self.log = log if log is not None else _log
        self._emit = emit
        self._wait_writable = wait_writable
        self._events = events or _Events(
            emit, request.id, request.streaming, request.event_outputs
        )
        self._budget = budget if budget is not None else _RequestBudget(self.limits)
        self._kept = 0  # output bytes this run counted in the budget and still keeps
        self._state = PlanState(plan)
        self._context: dict[str, Any] = {
            "input": request.initial_input if initial_input is None else initial_input
        }
        self._outputs: dict[str, Any] = {}
        self._ready: deque[int] = deque()
        self._idle: list[anyio.Event] = []
        self._workers = 0
        self._busy = 0
        self._nodes_run = 0
        self._failures: list[_Failure] = []
        self._abort: _Failure | None = None
        self._end_reason = ""  # "", "done", "abort", "timeout", "cancelled"
        self._stop = anyio.Event()
        self._drive_done = anyio.Event()
        self._work_scope = anyio.CancelScope()
        self._tg: anyio.abc.TaskGroup | None = None
        self._running: dict[str, bool] = {}  # display id → terminal event sent?
        self._closed = False
        self._parent: ChainRunner | None = None  # the run whose skill node runs this one

    # ── public ──────────────────────────────────────────────────────────────

    def cancel(self) -> None:
        """Ask the run to end with ``cancelled`` (``chain/cancel``). Before :meth:`run`
        it ends at once with ``cancelled``: no node starts, no event is sent."""
        if not self._end_reason:
            self._end_reason = "cancelled"
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
            sent.append(self._send_response(result, started))

        await self.run(self.plan.timeout, respond)
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
        if self._end_reason:  # cancelled before it started: nothing runs
            self._closed = True
            result = self._result()
            if on_end is not None:
                on_end(result)
            return result
        async with anyio.create_task_group() as outer:
            outer.start_soon(self._drive)
            try:
                with anyio.move_on_after(chain_timeout):
                    await self._stop.wait()
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    result = await self._wind_down("cancelled")
                    if on_end is not None:
                        on_end(result)
                raise
            if not self._end_reason:
                self._end_reason = "timeout"
            result = await self._wind_down(self._end_reason)
            if on_end is not None:
                on_end(result)
            outer.cancel_scope.cancel()
        return result

    # ── driving ─────────────────────────────────────────────────────────────

    async def _drive(self) -> None:
        try:
            with self._work_scope:
                async with anyio.create_task_group() as tg:
                    self._tg = tg
                    roots = self._state.start()
                    if not roots:
                        self._finish_if_done()
                    self._ready.extend(roots)
                    if roots:
                        self._workers += 1
                        tg.start_soon(self._worker, False)  # this run's own worker
                    for _ in range(min(len(roots), self.limits.max_concurrency) - 1):
                        if not self._spawn_borrowed():
                            break
        finally:
            self._drive_done.set()

    def _push_ready(self, ready: list[int]) -> None:
        self._ready.extend(ready)
        wanted = len(ready)
        while wanted and self._idle:
            self._idle.pop().set()
            wanted -= 1
        # the current worker takes one; spawn only while every worker is busy
        spare = self._workers - self._busy
        while wanted > spare and self._spawn_borrowed():
            wanted -= 1

    def _spawn_borrowed(self) -> bool:
        """Start one more worker on a spare slot of the request, if this run is under
        ``max_concurrency`` and a slot is left; whether one was started."""
        if self._workers >= self.limits.max_concurrency or self._budget.spare_workers <= 0:
            return False
        assert self._tg is not None
        self._budget.spare_workers -= 1
        self._workers += 1
        self._tg.start_soon(self._worker, True)
        return True

    async def _worker(self, borrowed: bool) -> None:
        ready = self._ready
        ran = 0
        try:
            while True:
                if not ready:
                    if self._end_reason:
                        return
                    if borrowed and self._budget.nested:
                        return  # give the slot back to where sub-chains may need it
                    wake = anyio.Event()
                    self._idle.append(wake)
                    if borrowed:
                        self._budget.idle_borrowed.add(wake)
                    await wake.wait()
                    if borrowed:
                        self._budget.idle_borrowed.discard(wake)
                        if wake in self._idle:  # woken to give its slot back, not for work
                            self._idle.remove(wake)
                    continue
                index = ready.popleft()
                if ready and not self._idle and self._budget.nested:
                    # slots given back by idle workers elsewhere in the request: take one
                    # while this run has more ready nodes than workers
                    if len(ready) > self._workers - self._busy - 1:
                        self._spawn_borrowed()
                self._busy += 1
                try:
                    await self._run_node(index)
                finally:
                    self._busy -= 1
                ran += 1
                if ran % _YIELD_EVERY == 0:
                    await anyio.lowlevel.checkpoint()
        finally:
            self._workers -= 1
            if borrowed:
                self._budget.spare_workers += 1

    def _finish_if_done(self) -> None:
        if self._state.finished and not self._end_reason:
            self._end_reason = "done"
            self._stop.set()
            for wake in self._idle:
                wake.set()
            self._idle.clear()

    # ── one node ────────────────────────────────────────────────────────────

    async def _run_node(self, index: int) -> None:
        if self._end_reason:
            return
        if self._wait_writable is not None:
            await self._wait_writable()
            if self._end_reason:
                return
        pnode = self.plan.nodes[index]
        node_id = pnode.node_id
        shown = self.prefix + node_id
        state = self._state
        state.node_started(index)
        self._nodes_run += 1
        self._running[shown] = False
        self._events.send(shown, "start")
        self.log.debug("node started", node_id=shown, kind=pnode.kind)
        taken: int | None = None
        output: Any
        try:
            self._count_nodes(1, shown, node_id)
            context = self._node_context(index, pnode)
            kind = pnode.kind
            if kind == "branch":
                output, taken = await self._run_branch(pnode, context)
            elif kind == "map":
                output = await self._run_map(pnode, context)
            else:
                args = await self._resolve_input(pnode, context, shown)
                output = await self._execute(pnode, args, shown)
            # a map checks and counts its items' outputs as they arrive
            if kind != "map" and self._keep_output(output, shown, node_id) < 0:
                await self._keep_large_output(output, shown, node_id)
        except anyio.get_cancelled_exc_class():
            self._terminal_error(shown, self._cancel_message())
            raise
        except Exception as exc:  # noqa: BLE001 — every node failure becomes data
            failure = self._failure_of(index, exc, shown)
            if self._end_reason and self._end_reason != "done":
                self._terminal_error(shown, failure.message)
                return
            self._running[shown] = True
            self._events.send(shown, "error", error=failure.message)
            self.log.debug("node failed", node_id=shown, code=failure.code,
                           on_error=pnode.on_error, error=failure.message)
            self._node_failed(index, pnode, failure)
            return
        if self._end_reason and self._end_reason != "done":
            # the chain ended while this node ran: its result is never applied
            self._terminal_error(shown, self._cancel_message())
            return
        self._running[shown] = True
        self.log.debug("node done", node_id=shown)
        self._outputs[node_id] = output
        self._context[node_id] = {"output": output, "status": "done"}
        self._events.send(shown, "done", output=output)
        ready, skipped = state.node_done(index, taken)
        self._after(ready, skipped)

    def _node_failed(self, index: int, pnode: PlanNode, failure: _Failure) -> None:
        self._context[pnode.node_id] = {"output": None, "status": "error"}
        if pnode.on_error == "abort":
            self._abort = failure
            self._end_reason = "abort"
            self._stop.set()
            return
        self._failures.append(failure)
        ready, skipped = self._state.node_failed(index)
        self._after(ready, skipped)

    def _after(self, ready: list[int], skipped: list[int]) -> None:
        for s in skipped:
            sid = self.plan.nodes[s].node_id
            self._context[sid] = {"output": None, "status": "skip"}
            self._events.send(self.prefix + sid, "skip")
            self.log.debug("node skipped", node_id=self.prefix + sid)
        if ready:
            self._push_ready(ready)
        self._finish_if_done()

    def _node_context(self, index: int, pnode: PlanNode) -> ContextView:
        state = self._state
        act = state.activator[index]
        own: dict[str, Any] = {
            "output": self._outputs.get(self.plan.nodes[act].node_id) if act >= 0 else None
        }
        failed = state.handled_by.get(index)
        if failed is not None:
            f = next((f for f in reversed(self._failures) if f.node_index == failed), None)
            if f is not None:
                own["error"] = {
                    "node_id": self.plan.nodes[failed].node_id,
                    "code": f.code,
                    "message": f.message,
                    **({"index": f.details["index"]} if "index" in f.details else {}),
                }
        return ContextView(self._context, own)

    async def _evaluate(
        self, pnode: PlanNode, field: str, expr: Expression, context: ContextView, shown: str
    ) -> Any:
        """Evaluate one expression under the session's expression ceilings (PROTOCOL.md §6).

        A dotted path is a few dict lookups, done here. Anything else first runs on the
        event loop for at most ``_INLINE_STEPS`` steps; past that it runs again, under the
        full budget, in a worker thread on a snapshot of the context, and is told to stop
        the moment this node is cancelled (chain timeout, cancel, abort).

        Raises:
            ChainLimitExceeded: ``max_expression_steps`` / ``max_expression_bytes``.
            NodeError: the expression failed on these values.
        """
        if expr.path is not None:
            return expr.search(context)
        limits = self.limits
        try:
            try:
                return expr.search(
                    context,
                    _inline_budget(limits.max_expression_steps, limits.max_expression_bytes),
                )
            except EvaluationSliceExhausted:
                pass
            cancelled = threading.Event()
            budget = Budget(
                max_steps=limits.max_expression_steps,
                max_bytes=limits.max_expression_bytes,
                cancelled=cancelled,
            )
            try:
                return await anyio.to_thread.run_sync(
                    expr.search,
                    context.snapshot(),
                    budget,
                    abandon_on_cancel=True,
                    limiter=_expression_threads(),
                )
            finally:
                cancelled.set()  # an abandoned evaluation stops at its next check
        except ExpressionBudgetExceeded as exc:
            raise self._expression_refusal(pnode, field, expr, exc, shown) from None
        except _EVALUATION_ERRORS as exc:
            reason = "it nests too deeply" if isinstance(exc, RecursionError) else str(exc)
            raise NodeError(
                f"node {shown!r} field {field!r}: expression {clip(expr.text)} failed: {reason}",
                node_id=pnode.node_id,
                details={"field": field, "expression": expr.text},
            ) from None

    def _expression_refusal(
        self, pnode: PlanNode, field: str, expr: Expression, exc: ExpressionBudgetExceeded,
        shown: str,
    ) -> ChainLimitExceeded:
        refused = self.scoped_limits.refusal(exc.ceiling, exc.requested, node_id=pnode.node_id)
        details: dict[str, Any] = (
            dict(refused.details) if refused is not None else
            {"ceiling": exc.ceiling, "scope": "host", "limit": exc.limit,
             "requested": exc.requested}
        )
        scope, limit = details["scope"], details["limit"]
        if exc.ceiling == "max_expression_steps":
            amount, did = f"{limit} steps", f"took more than {limit} steps"
        else:
            amount, did = f"{limit} bytes", f"built a value of at least {exc.requested} bytes"
        how = (
            "ask for more in handshake/req limits, up to the host's"
            if scope == "session"
            else f"A2E_{exc.ceiling.upper()} or [limits] {exc.ceiling} on the host"
        )
        return ChainLimitExceeded(
            f"node {shown!r} field {field!r}: expression {clip(expr.text)} exceeded "
            f"{exc.ceiling} ({amount} at {scope} scope): it {did}; simplify it or raise the "
            f"ceiling ({how})",
            node_id=pnode.node_id,
            details={**details, "field": field},
        )

    async def _resolve_input(
        self, pnode: PlanNode, context: ContextView, shown: str
    ) -> dict[str, Any]:
        args = dict(pnode.node.input)
        for key, expr in pnode.input_map:
            if expr.path is not None:
                args[key] = expr.search(context)  # the dotted fast path, no budget needed
            else:
                args[key] = await self._evaluate(pnode, f"input_map.{key}", expr, context, shown)
        return args

    async def _execute(self, pnode: PlanNode, args: dict[str, Any], shown: str) -> Any:
        executor = self.executors.get(pnode.kind)
        if executor is None:
            raise NodeError(f"node {shown!r}: no executor for kind {pnode.kind!r} on this host")
        ctx = NodeContext(
            node_id=shown,
            chain_id=self.plan.request.chain_id,
            req_id=self.plan.request.id,
            depth=self.depth,
            granted=self.granted,
            max_output_bytes=self.limits.max_output_bytes,
            limits=self.scoped_limits,
            run_subchain=self._make_subchain_runner(shown) if pnode.kind == "skill" else None,
            log=self.log,
        )
        return await executor(pnode.node, args, ctx)

    async def _run_branch(
        self, pnode: PlanNode, context: ContextView
    ) -> tuple[dict[str, Any], int | None]:
        assert pnode.condition is not None
        value = await self._evaluate(
            pnode, "condition", pnode.condition, context, self.prefix + pnode.node_id
        )
        cond = is_truthy(value)
        taken = pnode.true_index if cond else pnode.false_index
        taken_id = self.plan.nodes[taken].node_id if taken is not None else ""
        return {"condition": cond, "taken": taken_id}, taken

    def _keep_output(self, output: Any, shown: str, node_id: str) -> int:
        """Hold a small node output to ``max_output_bytes`` and count it as kept by the
        request (``max_chain_output_bytes``); the fast path, on the loop.

        Returns:
            Its encoded size in bytes, or -1 when the output is not small: then await
            :meth:`_keep_large_output` instead.

        Raises:
            NodeError: the output is not JSON (a type JSON cannot carry, NaN, Infinity).
            ChainLimitExceeded: over ``max_output_bytes`` or ``max_chain_output_bytes``.
        """
        try:
            quick = quick_json_size(output)
        except (TypeError, ValueError, OverflowError) as exc:
            raise NodeError(f"node {shown!r} returned output that is not JSON: {exc}") from None
        if quick is None:
            return -1
        size, non_finite = quick
        self._checked_size(size, True, non_finite, shown, node_id)
        return size

    async def _keep_large_output(self, output: Any, shown: str, node_id: str) -> int:
        """:meth:`_keep_output` for any output: counted without encoding it
        (:class:`~a2e_host.sizes.JsonSizer`), in slices between which the event loop runs,
        stopping as soon as the count passes ``max_output_bytes``.

        Returns:
            Its encoded size in bytes.

        Raises:
            NodeError, ChainLimitExceeded: as :meth:`_keep_output`.
        """
        sizer = JsonSizer(output, self.limits.max_output_bytes)
        try:
            while not sizer.advance(_SIZE_SLICE):
                await anyio.lowlevel.checkpoint()
        except (TypeError, ValueError, OverflowError) as exc:
            raise NodeError(f"node {shown!r} returned output that is not JSON: {exc}") from None
        self._checked_size(sizer.size, not sizer.over, sizer.non_finite, shown, node_id)
        return sizer.size

    def _checked_size(
        self, size: int, exact: bool, non_finite: bool, shown: str, node_id: str
    ) -> None:
        """Refuse an output over ``max_output_bytes`` or holding NaN / Infinity, else count
        its ``size`` bytes as kept (:meth:`_keep`)."""
        cap = self.limits.max_output_bytes
        if size > cap:
            what = f"{size} bytes" if exact else f"at least {size} bytes"
            self._refuse(
                "max_output_bytes",
                size,
                f"node {shown!r} output is {what}, over max_output_bytes {cap}",
                node_id=node_id,
            )
        if non_finite:
            raise NodeError(
                f"node {shown!r} returned a non-finite number (NaN or Infinity), "
                "which JSON cannot carry"
            )
        self._keep(size, shown, node_id)

    def _keep(self, size: int, shown: str, node_id: str) -> None:
        """Count ``size`` output bytes as kept by the request, or refuse them."""
        budget = self._budget
        total = budget.output_bytes + size
        if total > self.limits.max_chain_output_bytes:
            self._refuse(
                "max_chain_output_bytes",
                total,
                f"node {shown!r} output of {size} bytes would bring the outputs this request "
                f"keeps to {total} bytes, over max_chain_output_bytes "
                f"{self.limits.max_chain_output_bytes}; have nodes return less (pass large "
                "data by reference, e.g. a path)",
                node_id=node_id,
            )
        budget.output_bytes = total
        self._kept += size

    def _release(self, size: int) -> None:
        """Give back ``size`` kept output bytes (outputs this run no longer keeps)."""
        self._budget.output_bytes -= size
        self._kept -= size

    def _count_nodes(self, count: int, shown: str, node_id: str, *, items: bool = False) -> None:
        """Count ``count`` node executions against ``max_total_nodes``, or refuse them."""
        budget = self._budget
        total = budget.nodes + count
        if total > self.limits.max_total_nodes:
            cap = self.limits.max_total_nodes
            what = f"its {count} items" if items else "it"
            self._refuse(
                "max_total_nodes",
                total,
                f"node {shown!r} would bring the node executions of this request (nodes at "
                f"every depth plus map items) to {total} with {what}, over max_total_nodes "
                f"{cap}; split the work into smaller chains",
                node_id=node_id,
            )
        budget.nodes = total

    def _limit_error(
        self, ceiling: str, requested: int, message: str, node_id: str = ""
    ) -> ChainLimitExceeded | None:
        """The ``chain_limit`` error naming the scope whose ceiling refuses ``requested``
        (PROTOCOL.md §6), or None when it is within the ceiling."""
        err = self.scoped_limits.refusal(ceiling, requested, node_id=node_id)
        if err is None:
            return None
        return ChainLimitExceeded(message, node_id=node_id, details=err.details)

    def _refuse(self, ceiling: str, requested: int, message: str, node_id: str = "") -> None:
        """Raise :meth:`_limit_error` when ``requested`` is over ``ceiling``."""
        err = self._limit_error(ceiling, requested, message, node_id)
        if err is not None:
            raise err

    # ── map ─────────────────────────────────────────────────────────────────

    async def _run_map(self, pnode: PlanNode, context: ContextView) -> list[Any]:
        shown = self.prefix + pnode.node_id
        assert pnode.items_path is not None and pnode.template_index is not None
        items = await self._evaluate(pnode, "items_path", pnode.items_path, context, shown)
        if not isinstance(items, list):
            raise NodeError(
                f"map node {shown!r}: items_path {pnode.items_path.text!r} gave "
                f"{json_kind(items)}, not a list",
                node_id=pnode.node_id,
                details={"field": "items_path", "got": json_kind(items)},
            )
        n = len(items)
        if n > self.limits.max_map_items:
            self._refuse(
                "max_map_items",
                n,
                f"map node {shown!r} has {n} items, over max_map_items "
                f"{self.limits.max_map_items}",
                node_id=pnode.node_id,
            )
        if n == 0:
            return []
        if self._budget.nodes + n > self.limits.max_total_nodes:  # certain to overflow
            self._count_nodes(n, shown, pnode.node_id, items=True)
        template = self.plan.nodes[pnode.template_index]
        results: list[Any] = [None] * n
        next_item = 0
        failure: list[tuple[int, BaseException]] = []
        kept = 0  # bytes of item outputs counted in the request's budget
        # the map's output so far: brackets, commas and the items finished (a lower bound)
        out_size = n + 1
        out_cap = self.limits.max_output_bytes

        budget = self._budget

        async def item_worker(scope: anyio.CancelScope, borrowed: bool) -> None:
            try:
                await items_loop(scope)
            finally:
                if borrowed:
                    budget.spare_items += 1

        async def items_loop(scope: anyio.CancelScope) -> None:
            nonlocal next_item, kept, out_size
            ran = 0
            while next_item < n and not failure and not self._end_reason:
                i = next_item
                next_item += 1
                ok, value, size = await self._run_item(template, items[i], i, context)
                if ok:
                    results[i] = value
                    kept += size
                    out_size += size
                elif template.on_error == "skip" and not _exhausts_request(value):
                    results[i] = None
                    out_size += 4  # null
                else:
                    failure.append((i, value))
                    scope.cancel()
                    return
                if out_size > out_cap:  # the map's output is sure to be refused: now
                    refused = self._limit_error(
                        "max_output_bytes",
                        out_size,
                        f"map node {shown!r} output would be at least {out_size} bytes "
                        f"with item {i}, over max_output_bytes {out_cap}",
                        node_id=pnode.node_id,
                    )
                    if refused is not None:
                        failure.append((i, refused))
                        scope.cancel()
                        return
                ran += 1
                if ran % _YIELD_EVERY == 0:
                    await anyio.lowlevel.checkpoint()

        try:
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(item_worker, scope, False)  # this map's own item worker
                    for _ in range(min(n, self.limits.max_map_concurrency) - 1):
                        if budget.spare_items <= 0:
                            break
                        budget.spare_items -= 1
                        tg.start_soon(item_worker, scope, True)
        except BaseException:
            self._release(kept)
            raise
        if failure:
            self._release(kept)  # the items' outputs are dropped with the map's failure
            i, exc = failure[0]
            message = failure_message_of(exc)
            own = isinstance(exc, ChainLimitExceeded) and exc.node_id == pnode.node_id
            if own or isinstance(exc, ChainLimitExceeded) or _exhausts_request(exc):
                # a ceiling refused (the map's own, a request-wide one, or an item's
                # expression or output budget): the map fails as chain_limit naming it
                assert isinstance(exc, ChainError)
                raise ChainLimitExceeded(
                    message if own else f"map node {shown!r} failed at item {i}: {message}",
                    node_id=pnode.node_id,
                    details={**exc.details, "index": i},
                )
            raise NodeError(
                f"map node {shown!r} failed at item {i}: {message}",
                node_id=pnode.node_id,
                details={"index": i},
            )
        return results

    async def _run_item(
        self, template: PlanNode, item: Any, index: int, map_context: Any
    ) -> tuple[bool, Any, int]:
        """Run one map item: ``(True, output, size in bytes)`` or ``(False, exception, 0)``."""
        shown = f"{self.prefix}{template.node_id}[{index}]"
        if self._wait_writable is not None:
            await self._wait_writable()  # a slow reader holds items back, as it does nodes
            if self._end_reason:
                return False, NodeError(self._cancel_message()), 0  # never started: no events
        self._running[shown] = False
        self._events.send(shown, "start")
        size = 0
        try:
            self._count_nodes(1, shown, template.node_id)
            own = {"item": item, "_item": item, "index": index, "output": None}
            context = ContextView(self._context, own)
            args = await self._resolve_input(template, context, shown)
            output = await self._execute(template, args, shown)
            size = self._keep_output(output, shown, template.node_id)
            if size < 0:
                size = await self._keep_large_output(output, shown, template.node_id)
        except anyio.get_cancelled_exc_class():
            if self._end_reason:
                self._terminal_error(shown, self._cancel_message())
            else:
                self._terminal_error(shown, "cancelled: another item of the map failed")
            raise
        except Exception as exc:  # noqa: BLE001
            msg = failure_message_of(exc)
            if not isinstance(exc, ChainError):
                self.log.warning("tool raised", node_id=shown, exc_info=exc)
            self._terminal_error(shown, msg)
            return False, exc, 0
        if self._end_reason and self._end_reason != "done":
            self._release(size)
            self._terminal_error(shown, self._cancel_message())
            return False, NodeError(self._cancel_message()), 0
        self._running[shown] = True
        self._events.send(shown, "done", output=output)
        return True, output, size

    # ── sub-chains (skills) ─────────────────────────────────────────────────

    def _make_subchain_runner(self, shown: str) -> Any:
        planner = self.subchain_planner
        if planner is None:
            return None

        async def run_subchain(
            skill_name: str, nodes: list[ChainNode], entry_node: str, initial_input: dict[str, Any]
        ) -> Any:
            depth = self.depth + 1
            if depth > self.limits.max_depth:
                self._refuse(
                    "max_depth",
                    depth,
                    f"skill {skill_name!r} in node {shown!r} would nest {depth} deep, "
                    f"over max_depth {self.limits.max_depth}",
                )
            plan = planner(skill_name, nodes, entry_node, depth)
            child = ChainRunner(
                plan,
                executors=self.executors,
                limits=self.scoped_limits,
                emit=self._emit,
                wait_writable=self._wait_writable,
                granted=self.granted,
                initial_input=initial_input,
                events=self._events,
                prefix=f"{shown}/",
                depth=depth,
                subchain_planner=planner,
                log=self.log,
                budget=self._budget,
            )
            child._parent = self
            self._budget.nested += 1
            self._budget.release_idle_slots()
            try:
                result = await child.run(None)
            finally:
                self._budget.nested -= 1
                # only the final output outlives the sub-chain (kept as this node's)
                self._budget.output_bytes -= child._kept
            if not result.success:
                err = result.error
                assert err is not None
                raise ChainError(
                    f"skill {skill_name!r} failed: {err.message}",
                    code=err.code,
                    details=err.details,
                )
            return result.final_output

        return run_subchain

    # ── ending ──────────────────────────────────────────────────────────────

    def _cancel_message(self) -> str:
        run: ChainRunner = self
        while run._parent is not None and run._parent._end_reason:
            run = run._parent  # a sub-chain ends because the run around it ended
        reason = run._end_reason
        if reason == "timeout":
            return f"cancelled: the chain timed out after {run.plan.timeout:g} s"
        if reason == "abort" and run._abort is not None:
            failed = run.prefix + run.plan.nodes[run._abort.node_index].node_id
            return f"cancelled: node {failed!r} failed and the chain was aborted"
        return "cancelled: the chain was cancelled"

    def _terminal_error(self, shown: str, message: str) -> None:
        if self._running.get(shown) is False and not self._closed:
            self._running[shown] = True
            self._events.send(shown, "error", error=message)
            self.log.debug("node ended", node_id=shown, error=message)

    async def _wind_down(self, reason: str) -> RunResult:
        if not self._end_reason:
            self._end_reason = reason
        if reason != "done":
            self._work_scope.cancel()
            with anyio.move_on_after(_GRACE):
                await self._drive_done.wait()
            # nodes that would not stop: their error event now, their result never
            message = self._cancel_message()
            for shown, ended in list(self._running.items()):
                if not ended:
                    self._terminal_error(shown, message)
        self._closed = True
        return self._result()

    def _result(self) -> RunResult:
        reason = self._end_reason
        error: ChainFailure | None = None
        if reason == "abort" and self._abort is not None:
            error = self._error_of(self._abort)
        elif reason == "timeout":
            error = timeout_failure(self.plan.timeout)
        elif reason == "cancelled":
            error = cancelled_failure()
        else:
            unhandled = [f for f in self._failures if not self._is_handled(f)]
            if unhandled:
                error = self._error_of(unhandled[0])
        state = self._state
        final = None
        for t in reversed(self.plan.terminals):
            if state.status[t] == NodeStatus.DONE:
                final = self._outputs.get(self.plan.nodes[t].node_id)
                break
        return RunResult(error is None, self._outputs, final, self._nodes_run, error)

    def _is_handled(self, failure: _Failure) -> bool:
        pnode = self.plan.nodes[failure.node_index]
        if pnode.on_error == "skip":
            return True
        if pnode.on_error == "handler" and pnode.handler_index is not None:
            return self._state.status[pnode.handler_index] == NodeStatus.DONE
        return False

    def _error_of(self, failure: _Failure) -> ChainFailure:
        node_id = self.plan.nodes[failure.node_index].node_id
        message = failure.message
        if repr(self.prefix + node_id) not in message:
            message = f"node {self.prefix + node_id!r} failed: {message}"
        return ChainFailure(
            code=failure.code,
            message=message,
            node_id=node_id,
            retryable=failure.retryable,
            details=failure.details,
        )

    def _failure_of(self, index: int, exc: BaseException, shown: str) -> _Failure:
        if not isinstance(exc, ChainError):
            self.log.warning("node raised", node_id=shown, exc_info=exc)
        f = chain_failure_of(exc, node_id=self.plan.nodes[index].node_id)
        return _Failure(index, f.code, f.message, f.details, f.retryable)

    def _send_response(self, result: RunResult, started: float) -> ChainResponse:
        request = self.plan.request
        response = ChainResponse(
            req_id=request.id,
            chain_id=request.chain_id,
            success=result.success,
            outputs=result.outputs if request.include_outputs else {},
            final_output=result.final_output,
            duration_ms=int((time.monotonic() - started) * 1000),
            nodes_run=result.nodes_run,
            error=result.error,
        )
        self._events.closed = True
        self._emit(response)
        return response

