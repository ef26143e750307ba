"""The ``skill`` capability: ``skill/discover/req`` and ``skill/call/req`` (A2E SDK
``a2e/caps/skills/protocol.py`` at commit c8fc1f87; PROTOCOL.md §9).

A first-party plugin over the public plugin API, found through the entry-point group
``a2e_host.plugins``. It serves the skills the host's configuration loads (Python skills
and the declarative skills of ``skills_dirs``), each registered by ``(name, version)``
with a lifecycle (:mod:`a2e_host.chains.skill_versions`).

A ``skill/call/req`` runs exactly as a ``skill`` node of a chain does, through the chain
engine: the call becomes a one-node chain (node id ``skill``, kind ``skill``, ``name``
and ``arguments`` as its name and input), validated by
:func:`~a2e_host.chains.validation.validate_chain` (the reference resolved, the
arguments held to the skill's input schema, the ceilings of the session) and run by a
:class:`~a2e_host.chains.scheduler.ChainRunner` with the same executors, sub-chain
planner, budgets and step cache as the chains capability, as a run of the host attached
to the connection (cancelled when it drops). Its events become ``skill/event`` frames
(at most :data:`MAX_EVENTS` per call); its end becomes the one ``skill/call/resp``.
Calls in flight per session are bounded by ``max_parallel``, counted apart from chains.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import anyio
from a2e_chains import ChainPlugin

from a2e_host.chains.messages import ChainEvent, ChainNode, ChainRequest
from a2e_host.chains.observed import observed_run
from a2e_host.chains.outcome import RunResult
from a2e_host.chains.scheduler import ChainRunner
from a2e_host.chains.skill_messages import (
    SKILL_MESSAGE_TYPES,
    SkillCallRequest,
    SkillCallResponse,
    SkillDiscoverRequest,
    SkillDiscoverResponse,
    SkillEvent,
    SkillResult,
)
from a2e_host.chains.toolbox import Toolbox
from a2e_host.config import HostConfig
from a2e_host.errors import chain_failure_of
from a2e_host.exceptions import (
    A2EError,
    Busy,
    ChainInvalid,
    InvalidMessage,
    SchemaViolation,
    SkillError,
    UnknownSkill,
)
from a2e_host.messages import Message
from a2e_host.plugin import Outbox, Plugin, PluginContext, RunHandle, SessionInfo

from .definitions import MAX_FILTERS, MAX_LISTED, discover, handshake_listing

__all__ = ["CALL_NODE", "DEFAULT_CALL_TIMEOUT", "MAX_EVENTS", "SkillPlugin"]

CALL_NODE = "skill"
"""The node id a call runs as: its events show ``skill``, a declared skill's inner
nodes ``skill/<inner>``."""

MAX_EVENTS = 1000
"""``skill/event`` frames one call sends at most; the rest are counted in
``skill/call/resp.events_dropped`` (a skill mapping over 100,000 items must not send
200,000 frames to an agent that asked for one result)."""

DEFAULT_CALL_TIMEOUT = 60
"""Seconds a call that leaves ``timeout`` out may take (the SDK's default), within
``max_timeout``."""

_FAILURE_CODES = {"chain_node_error": SkillError.code}


class SkillPlugin(Plugin):
    """Discovers and calls versioned skills.

    Args:
        config: the host configuration (skills, tool packs, proc allowlist, limits).
        toolbox: the executors and catalog; built from ``config`` when None.
    """

    capability: ClassVar[str] = "skill"
    namespace: ClassVar[str] = "skill/*"
    priority: ClassVar[int] = 30
    message_types: ClassVar[tuple[type[Message], ...]] = SKILL_MESSAGE_TYPES
    features: ClassVar[tuple[str, ...]] = (
        "skill/lifecycle",
        "skill/call.events_dropped",
    )
    how_to_serve: ClassVar[str] = (
        "start the host with --skills DIR (declarative skills), or install a skill package")

    def __init__(self, config: HostConfig, toolbox: Toolbox | None = None) -> None:
        super().__init__(config)
        # the chain engine a call runs through: validation, sub-chain plans, step cache
        self.engine = ChainPlugin(config, toolbox)
        self.toolbox = self.engine.toolbox

    def metadata(self, session: SessionInfo) -> dict[str, Any]:
        """Namespace, priority, features, and the skills the session may call:
        ``skills`` (``[{name, version, lifecycle}]``, the first
        :data:`~a2e_skills.definitions.MAX_LISTED`) and ``skills_total``."""
        meta = super().metadata(session)
        registry = self.toolbox.skills
        meta["skills"] = handshake_listing(registry)
        meta["skills_total"] = len(registry)
        meta["skills_listed_max"] = MAX_LISTED
        return meta

    async def handle(self, message: Message, ctx: PluginContext) -> None:
        """Answer ``skill/discover/req`` at once; start a ``skill/call/req``.

        Raises:
            SchemaViolation: a discover filter over :data:`~a2e_skills.definitions.MAX_FILTERS`
                entries.
            Busy: ``max_parallel`` calls are in flight, or the host is shutting down.
            InvalidMessage: a call id already in flight, or a host-sent type.
        """
        if isinstance(message, SkillDiscoverRequest):
            for field in ("filter_tags", "filter_categories"):
                asked = len(getattr(message, field))
                if asked > MAX_FILTERS:
                    raise SchemaViolation(
                        f"skill/discover/req {field} lists {asked} entries, over "
                        f"{MAX_FILTERS}; filter by fewer",
                        detail={"path": f"$.{field}"})
            skills = discover(self.toolbox.skills, message.filter_tags,
                              message.filter_categories)
            ctx.outbox.send_nowait(SkillDiscoverResponse(req_id=message.id, skills=skills))
        elif isinstance(message, SkillCallRequest):
            self._start(message, ctx)
        else:
            raise InvalidMessage(
                f"{message.TYPE!r} is sent by hosts, not agents; send skill/discover/req "
                "or skill/call/req")

    def _start(self, request: SkillCallRequest, ctx: PluginContext) -> None:
        if ctx.closing:
            raise Busy("the host is shutting down and takes no new skill calls",
                       retryable=True)
        in_flight = len(ctx.runs)
        limit = ctx.session.limits.effective.max_parallel
        if in_flight >= limit:
            raise Busy(
                f"{in_flight} skill calls are in flight on this session, the max_parallel "
                f"limit is {limit}; wait for a skill/call/resp before sending more")
        if ctx.runs.get(request.id) is not None:
            raise InvalidMessage(
                f"a skill call with request id {request.id!r} is already running; use a "
                "fresh id")
        ctx.start_run(self._call, request, ctx.session, ctx.log, time.monotonic(),
                      name=f"skill {request.id}")

    async def _call(self, run: RunHandle, request: SkillCallRequest, session: SessionInfo,
                    log: Any, started: float) -> None:
        sink = run.sink
        responded = False

        def respond(response: SkillCallResponse) -> None:
            nonlocal responded
            if responded:
                return
            responded = True
            run.release()
            sink.send_nowait(response)

        try:
            found = self.toolbox.skills.resolve(request.name)
            if found.entry is None:
                refused = UnknownSkill(f"{found.message}; {found.hint}",
                                       detail={"hint": found.hint})
                log.info("skill call refused", code=refused.code, skill=request.name)
                respond(_refusal(request, refused))
                return
            ran = {"name": found.name, "version": found.version,
                   "lifecycle": found.lifecycle}
            if found.warning:
                ran["warning"] = found.warning
            chain = _chain_of(request, session)
            try:
                plan = self.engine.plan_now(chain, session)
            except ChainInvalid as exc:
                log.info("skill call refused", code=exc.code, skill=request.name)
                respond(_refusal(request, _call_refusal(exc)))
                return
            events = _EventRelay(sink, request.id)
            secrets = self.toolbox.secrets.resolver_for(chain)  # a skill's own references
            runner = ChainRunner(
                plan,
                executors=self.toolbox.executors if secrets is None
                else secrets.wrap(self.toolbox.executors),
                limits=session.limits,
                emit=events.emit,
                wait_writable=sink.wait_writable,
                granted=session.granted,
                subchain_planner=self.engine.planner(session),
                log=log,
                tool_of=self.toolbox.tools.get,
                step_cache=self.engine.step_cache,
                run_key=f"{session.session_id}/{request.id}",
            )
            run.on_cancel(runner.cancel)

            def on_end(result: RunResult) -> None:
                respond(SkillCallResponse(
                    req_id=request.id, name=request.name, data=_result_of(result, started),
                    skill=ran, events_dropped=events.dropped))

            log.info("skill call started", skill=f"{found.name}@{found.version}")
            try:
                result = await observed_run(
                    runner.run(plan.timeout, on_end), "a2e.skill.call",
                    {"a2e.req_id": request.id, "a2e.chain_id": chain.chain_id,
                     "a2e.node.kind": "skill", "a2e.tool.name": found.name,
                     "a2e.skill.version": found.version})
            except anyio.get_cancelled_exc_class():
                log.info("skill call finished", success=False, code="cancelled")
                raise
            log.info("skill call finished", success=result.success,
                     code=result.error.code if result.error is not None else "")
        except Exception as exc:  # noqa: BLE001 — a bug must still answer the call, once
            log.error("the skill call failed inside the host", exc_info=exc)
            failure = chain_failure_of(exc, stage="running")
            respond(SkillCallResponse(
                req_id=request.id, name=request.name, data=None,
                error={"code": failure.code, "message": failure.message,
                       "retryable": failure.retryable, "details": {}}))

    async def session_closed(self, session: SessionInfo) -> None:
        """Forget the session's skill plans (its calls were cancelled already)."""
        await self.engine.session_closed(session)


class _EventRelay:
    """Turns the one-node chain's ``chain/event`` s into ``skill/event`` s: the call
    node's terminal event is left out (the response carries it), ``seq`` counts the
    events sent, and past :data:`MAX_EVENTS` they are counted, not sent."""

    def __init__(self, sink: Outbox, req_id: str) -> None:
        self.sink = sink
        self.req_id = req_id
        self.sent = 0
        self.dropped = 0

    def emit(self, message: Message) -> None:
        if not isinstance(message, ChainEvent):
            return
        phase = message.phase
        if message.node_id == CALL_NODE and phase in ("done", "error"):
            return
        if self.sent >= MAX_EVENTS:
            self.dropped += 1
            return
        self.sent += 1
        data = dict(message.data)
        data["node_id"] = message.node_id
        data["phase"] = phase
        if phase == "done":
            data["output"] = message.output
        elif phase == "error":
            data["error"] = message.error
        self.sink.send_nowait(SkillEvent(kind=message.kind, req_id=self.req_id, data=data,
                                         seq=self.sent))


def _chain_of(request: SkillCallRequest, session: SessionInfo) -> ChainRequest:
    """The one-node chain a call runs as."""
    timeout = request.timeout
    if timeout is None:
        timeout = min(DEFAULT_CALL_TIMEOUT, session.limits.effective.max_timeout)
    node = ChainNode(node_id=CALL_NODE, kind="skill", name=request.name,
                     input=dict(request.arguments))
    return ChainRequest(id=request.id, nodes=[node], entry_node=CALL_NODE,
                        streaming=request.streaming, timeout=timeout,
                        chain_id=f"skill-{request.id}"[:64])


def _call_refusal(exc: ChainInvalid) -> A2EError:
    """A refused one-node chain as the call's error: a ceiling stays ``chain_limit``
    (its ``{ceiling, scope, limit, requested}``), a ``timeout`` under 1 is the call's
    (``schema_violation``, ``details.path`` ``$.timeout``), anything else is the
    arguments (``schema_violation``, the problems in ``details.errors``)."""
    errors = exc.details.get("errors") or []
    message = errors[0].get("message", exc.message) if errors else exc.message
    if exc.code == "chain_limit":
        return exc
    if errors and errors[0].get("field") == "timeout":  # the call's own field, no argument
        return SchemaViolation(
            f"skill/call/req {message}; send a positive int, or leave it out for "
            f"min({DEFAULT_CALL_TIMEOUT}, max_timeout)",
            detail={"path": "$.timeout", "errors": errors})
    return SchemaViolation(f"the skill's arguments are refused: {message}",
                           detail={"errors": errors})


def _refusal(request: SkillCallRequest, exc: A2EError) -> SkillCallResponse:
    return SkillCallResponse(
        req_id=request.id, name=request.name, data=None,
        error={"code": exc.code, "message": exc.message, "retryable": exc.retryable,
               "details": dict(exc.detail)})


def _result_of(result: RunResult, started: float) -> SkillResult:
    duration_ms = int((time.monotonic() - started) * 1000)
    if result.success:
        return SkillResult(success=True, data=result.final_output, duration_ms=duration_ms)
    failure = result.error
    assert failure is not None
    return SkillResult(success=False, error=failure.message,
                       error_code=_FAILURE_CODES.get(failure.code, failure.code),
                       duration_ms=duration_ms)
