"""The ``chains`` capability: ``chain/req``, ``chain/event``, ``chain/resp`` and the
``chain/cancel`` extension (seed 000; PROTOCOL.md §4–§6).

A first-party plugin that uses only the public plugin API (:mod:`a2e_host.plugin`) and
is found through the entry-point group ``a2e_host.plugins`` like any third-party one.
Per request it validates the chain into a plan (:func:`a2e_host.validation.validate_chain`),
then runs it with :class:`a2e_host.runtime.scheduler.ChainRunner` in the connection's
task group, so several chains of one connection run concurrently.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import anyio

from a2e_host.config import HostConfig
from a2e_host.exceptions import Busy, ChainInvalid, InvalidMessage, UnknownSession
from a2e_host.messages import ChainCancel, ChainNode, ChainRequest, ChainResponse, Message
from a2e_host.plugin import Plugin, PluginContext, SessionInfo
from a2e_host.runtime.scheduler import ChainRunner
from a2e_host.toolbox import Toolbox
from a2e_host.validation import ChainPlan, validate_chain

__all__ = ["ChainPlugin"]


class ChainPlugin(Plugin):
    """Validates and runs chains.

    Args:
        config: the host configuration (tool packs, skills, proc allowlist, limits).
        toolbox: the executors and catalog; built from ``config`` when None.
    """

    capability: ClassVar[str] = "chains"
    namespace: ClassVar[str] = "chain/*"
    priority: ClassVar[int] = 10
    features: ClassVar[tuple[str, ...]] = ("chain/cancel", "handshake/limits")

    def __init__(self, config: HostConfig, toolbox: Toolbox | None = None) -> None:
        super().__init__(config)
        self.toolbox = toolbox if toolbox is not None else Toolbox.from_config(config)
        self._running: dict[str, dict[str, ChainRunner | None]] = {}
        # per session (its limits and grants shape validation): (skill, nodes id) → plan
        self._skill_plans: dict[str, dict[tuple[str, int], ChainPlan]] = {}

    def metadata(self, session: SessionInfo) -> dict[str, Any]:
        """Namespace, priority, features and the session's effective ceilings (§2)."""
        meta = super().metadata(session)
        meta["limits"] = session.limits.effective.to_dict()
        return meta

    async def handle(self, message: Message, ctx: PluginContext) -> None:
        """Start a chain (``chain/req``) or cancel one (``chain/cancel``).

        Raises:
            Busy: ``max_parallel`` chains are in flight, or the host is shutting down.
            InvalidMessage: a ``chain/cancel`` for no chain in flight, or a message type
                this plugin does not take from agents.
        """
        if isinstance(message, ChainRequest):
            self._start(message, ctx)
        elif isinstance(message, ChainCancel):
            self._cancel(message, ctx)
        else:
            raise InvalidMessage(
                f"{message.TYPE!r} is sent by hosts, not agents; send chain/req or chain/cancel"
            )

    def _start(self, request: ChainRequest, ctx: PluginContext) -> None:
        session = ctx.session
        if ctx.closing:
            raise Busy("the host is shutting down and takes no new chains", retryable=True)
        running = self._running.setdefault(session.session_id, {})
        limit = session.limits.effective.max_parallel
        if len(running) >= limit:
            raise Busy(
                f"{len(running)} chains are in flight on this session, the max_parallel "
                f"limit is {limit}; wait for a chain/resp before sending more"
            )
        if request.id in running:
            raise InvalidMessage(
                f"a chain with request id {request.id!r} is already running; use a fresh id"
            )
        running[request.id] = None
        ctx.start_soon(self._run, request, ctx, time.monotonic(), name=f"chain {request.id}")

    def _cancel(self, message: ChainCancel, ctx: PluginContext) -> None:
        session = ctx.session
        if message.session_id and message.session_id != session.session_id:
            raise UnknownSession(
                f"session {message.session_id!r} is not this connection's session"
            )
        runner = self._running.get(session.session_id, {}).get(message.req_id)
        if runner is None:
            raise InvalidMessage(
                f"no chain in flight with req_id {message.req_id!r} on this session "
                "(it may have finished already)"
            )
        runner.cancel()

    async def _run(self, request: ChainRequest, ctx: PluginContext, started: float) -> None:
        session = ctx.session
        running = self._running.setdefault(session.session_id, {})
        log = ctx.log.bind(req_id=request.id, chain_id=request.chain_id)
        try:
            try:
                plan = validate_chain(
                    request, self.toolbox, session.limits, granted=session.granted
                )
            except ChainInvalid as exc:
                problems = len(exc.details.get("errors", []))
                log.info("chain refused", code=exc.code, problems=problems)
                ctx.outbox.send_nowait(_refusal(request, exc, started))
                return
            runner = ChainRunner(
                plan,
                executors=self.toolbox.executors,
                limits=session.limits,
                emit=ctx.outbox.send_nowait,
                wait_writable=ctx.outbox.wait_writable,
                granted=session.granted,
                subchain_planner=self._planner(session),
                log=log,
            )
            running[request.id] = runner
            log.info("chain started", nodes=len(plan.nodes))
            try:
                response = await runner.run_to_response(started)
            except anyio.get_cancelled_exc_class():
                log.info("chain finished", success=False, code="cancelled", reason="cancelled")
                raise
            log.info(
                "chain finished",
                success=response.success,
                nodes_run=response.nodes_run,
                duration_ms=response.duration_ms,
                code=(response.error or {}).get("code", ""),
            )
        finally:
            running.pop(request.id, None)
            if not running:
                self._running.pop(session.session_id, None)

    def _planner(self, session: SessionInfo) -> Any:
        """Plans for declared skills' sub-chains, validated once per skill and session."""
        plans = self._skill_plans.setdefault(session.session_id, {})

        def plan_skill(name: str, nodes: list[ChainNode], entry_node: str) -> ChainPlan:
            key = (name, id(nodes))
            plan = plans.get(key)
            if plan is None:
                request = ChainRequest(nodes=nodes, entry_node=entry_node, chain_id=name)
                plan = validate_chain(
                    request, self.toolbox, session.limits, granted=session.granted
                )
                plans[key] = plan
            return plan

        return plan_skill

    async def session_closed(self, session: SessionInfo) -> None:
        """Cancel the session's chains (their tasks are also cancelled by the host) and
        forget its skill plans."""
        self._skill_plans.pop(session.session_id, None)
        for runner in list(self._running.get(session.session_id, {}).values()):
            if runner is not None:
                runner.cancel()


def _refusal(request: ChainRequest, exc: ChainInvalid, started: float) -> ChainResponse:
    """The ``chain/resp`` for an invalid chain: no events, ``nodes_run`` 0 (PROTOCOL.md §4)."""
    return ChainResponse(
        req_id=request.id,
        chain_id=request.chain_id,
        success=False,
        outputs={},
        final_output=None,
        duration_ms=int((time.monotonic() - started) * 1000),
        nodes_run=0,
        error={
            "code": exc.code,
            "message": exc.message,
            "node_id": exc.node_id,
            "retryable": False,
            "details": exc.details,
        },
    )
