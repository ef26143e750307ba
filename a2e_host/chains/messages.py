"""The ``chains`` capability's messages as msgspec Structs (seed 000; PROTOCOL.md §4–§5).

Layer: core (no I/O, no anyio). Every field name, type and default follows the seed
spec's tables (``docs/chains-spec.txt``: ChainRequest, ChainEvent, ChainResponse,
ChainNode). The chains plugin declares :data:`CHAIN_MESSAGE_TYPES` as its
``message_types``; the host's decoder knows them only through it, as it knows any
plugin's. :data:`chain_codec` decodes the core messages plus these, for clients and
tools that speak chains without a host.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from ..codec import MessageCodec
from ..errors import ChainFailure
from ..messages import CORE_MESSAGE_TYPES, Message, new_chain_id
from .run_messages import RUN_MESSAGE_TYPES

__all__ = [
    "DEFAULT_TIMEOUT",
    "JITTERS",
    "RESUME_MODES",
    "ChainAccepted",
    "ChainAttach",
    "ChainCancel",
    "ChainDetach",
    "ChainDetached",
    "TraceContext",
    "DEFAULT_RETENTION",
    "ChainEvent",
    "ChainNode",
    "ChainRequest",
    "ChainResponse",
    "CHAIN_MESSAGE_TYPES",
    "RetryPolicy",
    "chain_codec",
]

DEFAULT_RETENTION = 86_400
"""Seconds a durable run is kept after it ends when its ``chain/req`` leaves
``retention`` out (capped by ``max_retention``; PROTOCOL.md §5 Durable runs)."""

DEFAULT_TIMEOUT = 300
"""Seconds a chain may run when its ``chain/req`` leaves ``timeout`` out (the seed's
default), capped by ``max_timeout`` (PROTOCOL.md §5)."""

# The default of ``ChainRequest.timeout`` is this very object, built at run time: a
# decoded or written ``300`` is another int object, so ``timeout is _OMITTED_TIMEOUT``
# tells a request that left ``timeout`` out from one that asked for 300 seconds, while
# the field stays a plain ``int`` with the seed's default on the wire and in the schema.
_OMITTED_TIMEOUT: int = int(str(DEFAULT_TIMEOUT))


JITTERS: tuple[str, ...] = ("full", "none")
"""The values of :attr:`RetryPolicy.jitter`."""

RESUME_MODES: tuple[str, ...] = ("", "rerun")
"""The values of :attr:`ChainNode.resume` (PROTOCOL.md §5 Resume)."""


class RetryPolicy(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """*Extension* ``ChainNode.retry`` (PROTOCOL.md §5 Recovery): how a failed attempt is
    tried again, in AWS Step Functions' words.

    Attempt ``n`` (1-based) that fails, when a retry is allowed, waits
    ``min(max_delay, interval * backoff_rate ** (n - 1))`` seconds before attempt
    ``n + 1`` ("full" jitter: a uniform draw between 0 and that).

    Attributes:
        max_attempts: attempts in all, the first included (>= 1, within the
            ``max_attempts`` ceiling of PROTOCOL.md §6).
        interval: seconds before the first retry (>= 0).
        backoff_rate: factor by which each wait grows (>= 1).
        max_delay: the longest wait, seconds (>= 0).
        jitter: ``"full"`` or ``"none"`` (see :data:`JITTERS`).
        retry_on: error codes retried even when the failure does not say it is
            retryable (``timeout``, ``chain_node_error``, or a tool's own code); a
            ceiling (``chain_limit``) or an input the tool refuses (``invalid_input``)
            is never retried.
    """

    max_attempts: int = 3
    interval: float = 1.0
    backoff_rate: float = 2.0
    max_delay: float = 30.0
    jitter: str = "full"
    retry_on: list[str] = []


class ChainNode(msgspec.Struct, kw_only=True):
    """One node of a chain (seed table ``ChainNode``).

    An empty string in an optional field means the field is absent (PROTOCOL.md §4).

    Attributes:
        node_id: unique within the chain.
        kind: ``tool``, ``skill``, ``proc``, ``branch`` or ``map``.
        name: the tool or skill to invoke.
        input: static input values.
        input_map: input field → JMESPath expression over the chain context (§3).
        condition: JMESPath truthiness expression (branch).
        true_node / false_node: branch targets.
        items_path: JMESPath to the list a map iterates.
        map_node: the template node a map runs once per item.
        next_node: the default successor.
        on_error: ``abort`` (default), ``skip`` or a handler's node_id.
        retry: *extension* (PROTOCOL.md §5 Recovery): a :class:`RetryPolicy` (``tool``
            and ``proc`` nodes); null for none.
        timeout: *extension*: float seconds (> 0) each attempt may take (``tool``,
            ``skill``, ``proc``); null for none (the chain's ``timeout`` still applies).
        fallback: *extension*: the tool run with the same input when every attempt
            failed (``tool`` nodes); ``""`` for none.
        cache: *extension*: answer from the host's step cache when the tool is pure
            (``tool`` nodes; the request's ``cache`` sets it for all of them).
        resume: *extension* (PROTOCOL.md §5 Resume): what a durable run resumed after a
            restart does with this node when it had started but not finished (``tool``,
            ``skill`` and ``proc`` nodes): ``""`` (the default) runs it again only when
            that cannot repeat an unknown side effect (a tool declared ``idempotent``, a
            declarative skill), else ends it with an ``interrupted`` error; ``"rerun"``
            runs it again, with the same idempotency key.
    """

    node_id: str
    kind: str
    name: str = ""
    input: dict[str, Any] = {}
    input_map: dict[str, str] = {}
    condition: str = ""
    true_node: str = ""
    false_node: str = ""
    items_path: str = ""
    map_node: str = ""
    next_node: str = ""
    on_error: str = "abort"
    retry: RetryPolicy | None = None
    timeout: float | None = None
    fallback: str = ""
    cache: bool = False
    resume: str = ""


class TraceContext(msgspec.Struct, kw_only=True):
    """*Extension* (PROTOCOL.md §5 Trace context): the agent's W3C trace context, so the
    host's spans join the agent's trace.

    Attributes:
        traceparent: a W3C ``traceparent`` header value
            (``00-<32 hex trace id>-<16 hex span id>-<2 hex flags>``); an invalid one is
            ignored (the host's spans then start a trace of their own).
        tracestate: a W3C ``tracestate`` header value; ``""`` for none.
    """

    traceparent: str = ""
    tracestate: str = ""


class ChainRequest(Message, tag="chain/req", kw_only=True):
    """Agent → host: execute a chain (seed table ``chain/req``).

    Attributes:
        session_id: from ``handshake/resp``.
        chain_id: chain identifier; 8 fresh hex digits when absent or empty.
        nodes: the DAG's nodes (the seed's ``list[dict]``, typed as :class:`ChainNode` so
            a malformed node is a ``schema_violation`` naming its path).
        entry_node: node_id of the first node; must be a root (PROTOCOL.md §4).
        initial_input: the context's ``input``.
        correlation_id: ties the chain to an agent turn.
        streaming: send ``chain/event`` frames; false sends only ``chain/resp``.
        timeout: chain wall-clock limit in int seconds (> 0, within ``max_timeout``).
            Left out, it is ``min(300, max_timeout)`` (:meth:`timeout_within`).
        include_outputs: *extension* (PROTOCOL.md §5): false sends ``chain/resp.outputs``
            as ``{}``; ``final_output`` is sent either way.
        event_outputs: *extension* (PROTOCOL.md §5): false sends every ``done`` event
            with ``output: null``.
        cache: *extension* (PROTOCOL.md §5 Recovery): true lets every ``tool`` node of
            the chain (sub-chains not included) use the host's step cache.
        durable: *extension* (PROTOCOL.md §5 Durable runs): the run is recorded in the
            host's run store and outlives its connection (answered ``chain/accepted``
            first; ``chain/attach`` resumes its events). False (the default): a closed
            connection cancels the chain, as before.
        idempotency_key: *extension*, durable runs: a resubmission with the same key
            by the same principal attaches to the existing run instead of starting
            another. ``""``: none.
        retention: *extension*, durable runs: int seconds the run's record and events
            are kept after it ends (> 0, within ``max_retention``); 0 (the default) keeps
            them :data:`DEFAULT_RETENTION` seconds or ``max_retention``, the smaller.
        trace_context: *extension* (PROTOCOL.md §5 Trace context): the agent's W3C trace
            context (:class:`TraceContext`); the host's spans for this request are its
            children when tracing is on. None: none.
        secrets: *extension* (PROTOCOL.md §5 Secrets): secret name → value, filled by
            the agent's code (never the model): nodes use them as ``{"$secret": "NAME"}``
            in their static ``input``, for the tools and executables the host's
            ``[request_secrets]`` allows. The values never reach an event, the response,
            a log line or the run store (each is replaced by ``«secret:NAME»``).
            ``{}``: none.
    """

    TYPE: ClassVar[str] = "chain/req"
    session_id: str = ""
    chain_id: str = msgspec.field(default_factory=new_chain_id)
    nodes: list[ChainNode] = []
    entry_node: str = ""
    initial_input: dict[str, Any] = {}
    correlation_id: str = ""
    streaming: bool = True
    timeout: int = _OMITTED_TIMEOUT
    include_outputs: bool = True
    event_outputs: bool = True
    cache: bool = False
    durable: bool = False
    idempotency_key: str = ""
    retention: int = 0
    trace_context: TraceContext | None = None
    secrets: dict[str, str] = {}

    def __post_init__(self) -> None:
        """An empty ``chain_id`` means absent (PROTOCOL.md §4): give it a fresh one."""
        if not self.chain_id:
            self.chain_id = new_chain_id()

    @property
    def timeout_omitted(self) -> bool:
        """Whether the request left ``timeout`` out (it then reads 300)."""
        return self.timeout is _OMITTED_TIMEOUT

    def timeout_within(self, max_timeout: int) -> int:
        """The timeout the request asks for, int seconds: ``timeout`` as sent, or
        ``min(300, max_timeout)`` when it was left out — a default is not a request, so
        a host or session whose ``max_timeout`` is under 300 takes it (PROTOCOL.md §5).

        Args:
            max_timeout: the effective ``max_timeout`` ceiling, seconds.
        """
        if self.timeout is _OMITTED_TIMEOUT:
            return min(DEFAULT_TIMEOUT, max_timeout)
        return self.timeout


class ChainEvent(Message, tag="chain/event", kw_only=True):
    """Host → agent progress of one node (seed table ``chain/event``; extends A2EEvent,
    whose field order it keeps: ``kind, req_id, data, seq`` then the seed's own).

    Attributes:
        kind / data: A2EEvent's fields: ``"status"`` and ``{}`` (PROTOCOL.md §5), except
            for a node with recovery fields (PROTOCOL.md §5 Recovery): its attempts are
            ``kind: "progress"`` events (phase ``start``) whose ``data`` says what failed
            and when it is tried again (``{attempt, of, error, code, retry_in_s}``, plus
            ``fallback`` on the switch to one), and its terminal event's ``data`` sums them
            up (``{attempts, errors: [{attempt, tool, code, error}], fallback_used}``,
            plus ``tool`` when done and ``cache``: ``hit``, ``miss`` or ``off``).
        req_id: the ``chain/req`` id.
        seq: 1, 2, 3 … per request, gapless (PROTOCOL.md §5).
        node_id: the node; map items as ``<template>[<index>]``, skill inner nodes as
            ``<outer>/<inner>``.
        phase: ``start``, ``done``, ``skip`` or ``error``.
        output: the node output when ``phase`` is ``done``.
        error: the error message when ``phase`` is ``error``.
    """

    TYPE: ClassVar[str] = "chain/event"
    FROM_HOST: ClassVar[bool] = True
    kind: str = "status"
    req_id: str = ""
    data: dict[str, Any] = {}
    seq: int = 0
    node_id: str = ""
    phase: str = "start"
    output: Any = None
    error: str = ""


class ChainResponse(Message, tag="chain/resp", kw_only=True):
    """Host → agent: the final result, sent once per ``chain/req`` (seed table ``chain/resp``).

    Attributes:
        outputs: node_id → output of every ``done`` node.
        final_output: output of the last terminal node, in declaration order, that is done.
        duration_ms: int milliseconds from receipt to response.
        nodes_run: declared nodes that started (a map counts once).
        error: why it failed, when ``success`` is false (``ChainFailure``: ``{"code",
            "message", "node_id", "retryable", "details"}``), else null.
    """

    TYPE: ClassVar[str] = "chain/resp"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    chain_id: str = ""
    success: bool = False
    outputs: dict[str, Any] = {}
    final_output: Any = None
    duration_ms: int = 0
    nodes_run: int = 0
    error: ChainFailure | None = None


class ChainCancel(Message, tag="chain/cancel", kw_only=True):
    """*Extension* ``chain/cancel``, agent → host (PROTOCOL.md §5): cancel the running chain
    whose ``chain/req`` id is ``req_id``; it ends with a ``chain/resp`` whose error code is
    ``cancelled``. ``session_id`` is the sender's session, as in ``chain/req``.

    *Extension* (§5 Durable runs): ``run_id`` names a durable run instead, which any
    session of the run's principal may cancel, from any connection; a ``req_id`` not in
    flight on this session is also looked up among the principal's durable runs."""

    TYPE: ClassVar[str] = "chain/cancel"
    session_id: str = ""
    req_id: str = ""
    run_id: str = ""


class ChainAccepted(Message, tag="chain/accepted", kw_only=True):
    """*Extension*, host → agent (PROTOCOL.md §5 Durable runs): a durable run was
    accepted (or attached to), before any of its events.

    Attributes:
        req_id: the ``chain/req`` id of the run (its events and response carry it).
        run_id: the run's id in the host's run store (32 hex digits).
        last_seq: the ``seq`` of the last event the run had emitted when this was
            sent (0 for a new run).
        attach_id: the ``chain/attach`` (or resubmitted ``chain/req``) this answers;
            ``""`` for the first acceptance of a ``chain/req``.
    """

    TYPE: ClassVar[str] = "chain/accepted"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    run_id: str = ""
    last_seq: int = 0
    attach_id: str = ""


class ChainAttach(Message, tag="chain/attach", kw_only=True):
    """*Extension*, agent → host (PROTOCOL.md §5 Durable runs): stream a durable run to
    this connection: ``chain/accepted``, then its stored events with ``seq > since_seq``,
    then the live ones, then its ``chain/resp`` (each with the run's original ``req_id``).

    Attributes:
        run_id: the run; or ``""`` and ``req_id``.
        req_id: the run's ``chain/req`` id (the principal's most recent run with it).
        since_seq: the last ``seq`` the agent has (0: from the first event).
    """

    TYPE: ClassVar[str] = "chain/attach"
    session_id: str = ""
    run_id: str = ""
    req_id: str = ""
    since_seq: int = 0


class ChainDetach(Message, tag="chain/detach", kw_only=True):
    """*Extension*, agent → host (PROTOCOL.md §5 Durable runs): stop streaming a durable
    run to this connection without cancelling it; answered ``chain/detached``."""

    TYPE: ClassVar[str] = "chain/detach"
    session_id: str = ""
    run_id: str = ""
    req_id: str = ""


class ChainDetached(Message, tag="chain/detached", kw_only=True):
    """*Extension*, host → agent: the answer to ``chain/detach``; no frame of the run
    follows it on this connection.

    Attributes:
        req_id: the ``chain/detach`` id it answers.
        run_id: the run's.
        last_seq: the last event ``seq`` sent before it (attach with it to go on).
    """

    TYPE: ClassVar[str] = "chain/detached"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    run_id: str = ""
    last_seq: int = 0


CHAIN_MESSAGE_TYPES: tuple[type[Message], ...] = (
    ChainRequest,
    ChainEvent,
    ChainResponse,
    ChainCancel,
    ChainAccepted,
    ChainAttach,
    ChainDetach,
    ChainDetached,
)
"""The chains capability's messages, as its plugin declares them."""

chain_codec = MessageCodec(CORE_MESSAGE_TYPES + CHAIN_MESSAGE_TYPES + RUN_MESSAGE_TYPES)
"""A codec for the core messages plus the chains and runs messages (clients, CLI
commands)."""
