"""A run as its parts see it: :class:`RunConfig` and the :class:`RunState` protocol.

Layer: runtime interface (plain code: no anyio, no I/O). Source: PROTOCOL.md §3–§6.

The run's parts — :mod:`~a2e_host.chains.attempt` (one attempt at a node or map item),
:mod:`~a2e_host.chains.mapping` (a map's items) and :mod:`~a2e_host.chains.subchains` (a
skill's sub-chain) — depend on :class:`RunState`, never on the runner class: the
scheduler imports them, so they must not import it (:mod:`a2e_host.chains.scheduler`),
not even for typing. :class:`~a2e_host.chains.scheduler.ChainRunner` satisfies
:class:`RunState` structurally; the protocol exists for the type checker only and costs
nothing when the chain runs.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .context_view import ContextView
from .messages import ChainNode
from .validation import ChainPlan, PlanNode

if TYPE_CHECKING:
    from ..errors import ChainFailure
    from ..limits import Limits, SessionLimits
    from ..tools.model import Tool
    from .budget import RunBudget
    from .events import Emit, EventStream
    from .nodes import Executor
    from .outcome import EndReason, RunResult
    from .recovery_policy import Report
    from .resume import Resumption
    from .step_cache import StepCache

__all__ = ["Clock", "KindRunner", "RunConfig", "RunState", "SubchainPlanner", "logs_debug"]

SubchainPlanner = Callable[[str, list[ChainNode], str, int], ChainPlan]
"""``(skill_name, nodes, entry_node, depth) -> plan`` for a skill's sub-chain at that
nesting depth; raises (a ``ChainError`` fails the skill node)."""


@dataclass(frozen=True, slots=True)
class Clock:
    """The time a node's retries wait by (PROTOCOL.md §5 Recovery), injectable so tests
    measure backoff without sleeping.

    Attributes:
        now: the current time, float seconds on the clock ``sleep`` waits by (the
            scheduler's default: the event loop's clock).
        sleep: ``await sleep(seconds)``; cancellable.
        uniform: ``uniform(low, high)``, a random float between them (full jitter).
    """

    now: Callable[[], float]
    sleep: Callable[[float], Awaitable[Any]]
    uniform: Callable[[float, float], float]


@dataclass(frozen=True, slots=True)
class RunConfig:
    """What every run of one request (the chain and its sub-chains) is configured with.

    Attributes:
        executors: executors by node kind (``tool``, ``skill``, ``proc``).
        limits: the session's scoped ceilings.
        emit: where events (and, at top level, the response) go.
        wait_writable: awaited before a node or item starts, so a slow reader applies
            backpressure; None when the sink is unbounded.
        granted: capabilities of the session (passed to executors).
        subchain_planner: see :data:`SubchainPlanner`; None disables sub-chains.
        log: a structlog logger bound with the request's ids.
        clock: what retries wait by (:class:`Clock`).
        tool_of: the host's tool by name (its ``side_effects``, ``idempotent``,
            ``cacheable`` and ``version`` decide retries and caching), None when the
            host cannot say: then every tool counts as free of effects and uncacheable.
        step_cache: the host's step cache, None for none.
        run_key: what the run's idempotency keys derive from
            (:attr:`~a2e_host.chains.nodes.NodeContext.idempotency_key`):
            ``"<session_id>/<req_id>"`` by default, a durable run's ``run_id``.
        resume: a durable run resumed after a restart: its stored log, folded into each
            plan's starting state and consulted for map items and in-flight nodes
            (:mod:`~a2e_host.chains.resume`, PROTOCOL.md §5 Resume); None: a fresh run.
        hold_start: a durable run's wait between a node's ``start`` event and its
            execution: None (no wait) for a node that may run again on resume, else an
            awaitable done once that ``start`` is stored for good, so a crash cannot
            forget that the node ran (PROTOCOL.md §5 Resume), which raises to fail the
            node when it cannot be stored.
            None (a run that is not durable): no wait.
    """

    executors: Mapping[str, Executor]
    limits: SessionLimits
    emit: Emit
    wait_writable: Callable[[], Any] | None
    granted: frozenset[str]
    subchain_planner: SubchainPlanner | None
    log: Any
    clock: Clock
    tool_of: Callable[[str], Tool | None] | None = None
    step_cache: StepCache | None = None
    run_key: str = ""
    resume: Resumption | None = None
    hold_start: Callable[[PlanNode], Awaitable[None] | None] | None = None


class RunState(Protocol):
    """One run of a plan, as the run's parts use it (and nothing more).

    The parts read these attributes and never rebind them; the only state they change is
    the contents of :attr:`running`, and the rest through the methods below.
    """

    @property
    def plan(self) -> ChainPlan:
        """The validated plan this run runs."""

    @property
    def config(self) -> RunConfig:
        """The request's configuration, shared with every sub-chain."""

    @property
    def limits(self) -> Limits:
        """The effective ceilings (PROTOCOL.md §6)."""

    @property
    def log(self) -> Any:
        """A structlog logger bound with the request's ids."""

    @property
    def debug(self) -> bool:
        """Whether per-node debug lines are written (asked once per run)."""

    @property
    def events(self) -> EventStream:
        """The request's event stream (shared with sub-chains)."""

    @property
    def budget(self) -> RunBudget:
        """This run's view of the request's budgets."""

    @property
    def kind_runners(self) -> Mapping[str, KindRunner]:
        """How a started node of a control kind runs (``branch``, ``map``)."""

    @property
    def prefix(self) -> str:
        """Display prefix of node ids: ``""`` at top level, ``"outer/"`` inside a skill."""

    @property
    def depth(self) -> int:
        """Skill nesting depth: 0 at top level."""

    @property
    def context(self) -> dict[str, Any]:
        """The chain context (PROTOCOL.md §3): ``input`` and each finished node."""

    @property
    def running(self) -> dict[str, bool]:
        """Display id → whether its terminal event was sent, for every started node and
        item; a part adds its node or item here when it starts it."""

    @property
    def reports(self) -> dict[str, Report]:
        """Display id → the recovery report of a started node or item with recovery
        fields, until its terminal event (which carries it as ``data``) is sent."""

    @property
    def deadline(self) -> float:
        """When the chain's ``timeout`` passes, on :attr:`RunConfig.clock`'s ``now``
        (``inf`` before the run starts)."""

    @property
    def monotonic_deadline(self) -> float | None:
        """:attr:`deadline` on ``time.monotonic()``; None before the run starts."""

    @property
    def end(self) -> EndReason | None:
        """Why the run ended; None while it runs."""

    @property
    def closed(self) -> bool:
        """Set once the run's result is taken: no late event is sent after it."""

    @property
    def interrupted(self) -> bool:
        """Whether the run ended before finishing: a result arriving now is discarded."""

    def node_started(self, index: int) -> None:
        """A declared node starts: the plan marks it running and ``nodes_run`` counts it."""

    def terminal_error(self, shown: str, message: str, failure: ChainFailure | None = None
                       ) -> None:
        """Send a started node's (or item's) ``error`` event, unless its terminal event was
        sent already or the run is closed; ``failure`` is kept by a durable run."""

    def cancel_message(self, *, item: bool = False) -> str:
        """The ``error`` text of a node or item stopped before it finished."""

    def nested(self, plan: ChainPlan, initial_input: dict[str, Any], *, prefix: str) -> RunState:
        """A run of a skill's sub-chain inside this one, one level deeper, sharing this
        run's configuration, event stream and request budget."""

    async def run(self, chain_timeout: float | None) -> RunResult:
        """Run to the end (or ``chain_timeout`` seconds; None: under the parent's deadline)
        and return the result."""


KindRunner = Callable[[RunState, str, PlanNode, ContextView], Awaitable[tuple[Any, int | None]]]
"""Runs one started node of a kind: ``(run, shown, pnode, context) -> (output, taken)``,
``taken`` a branch's side (node index) or None. Raises what the node failed with."""


def logs_debug(log: Any) -> bool:
    """Whether ``log`` (a structlog bound logger) writes ``debug`` lines; True when it
    cannot tell."""
    try:
        return bool(log.is_enabled_for(logging.DEBUG))
    except AttributeError:
        return True
