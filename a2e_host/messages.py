"""The A2E wire messages as msgspec Structs.

Layer: core (no I/O, no anyio). Every field name, type and default follows the seed
spec's tables (``docs/chains-spec.txt``: ChainRequest, ChainEvent, ChainResponse,
ChainNode) and PROTOCOL.md §2 (the core messages, after the public A2E python SDK).
Messages are tagged by ``type``; :mod:`a2e_host.codec` decodes them all with one
decoder. Structs encode every field (defaults included), in declaration order after
``type``.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any, ClassVar

import msgspec

__all__ = [
    "PROTOCOL_VERSION",
    "DEFAULT_TIMEOUT",
    "Capability",
    "ChainCancel",
    "ChainEvent",
    "ChainNode",
    "ChainRequest",
    "ChainResponse",
    "ErrorMessage",
    "HandshakeRequest",
    "HandshakeResponse",
    "Message",
    "Ping",
    "Pong",
    "Shutdown",
    "MESSAGE_TYPES",
    "new_id",
    "new_chain_id",
]

PROTOCOL_VERSION = "1.0"
"""The version this host emits; any ``1.x`` is accepted on input (PROTOCOL.md §1)."""


_UUID4_CLEAR = 0xFFFFFFFFFFFF0FFF3FFFFFFFFFFFFFFF  # version nibble and variant bits
_UUID4_SET = 0x00000000000040008000000000000000  # version 4, RFC 4122 variant


_random_bits = random.Random(os.urandom(32)).getrandbits


def new_id() -> str:
    """A fresh message id: a random uuid4 as 32 lowercase hex digits (``uuid4().hex``).

    Same value space as the A2E SDK's ``uuid.uuid4().hex`` default, built without the
    ``uuid.UUID`` object and without a system call per id (a generator seeded from
    ``os.urandom``): ids are unique, not secrets — session ids come from :mod:`secrets`.
    """
    return "%032x" % (_random_bits(128) & _UUID4_CLEAR | _UUID4_SET)


def new_chain_id() -> str:
    """A fresh ``chain_id``: 8 lowercase hex digits (seed table ``chain/req``: ``auto hex[:8]``)."""
    return os.urandom(4).hex()


class Message(msgspec.Struct, kw_only=True, tag_field="type"):
    """The envelope every message carries (A2E ``A2EMessage``; the first four rows of
    every seed message table, PROTOCOL.md §1–§2).

    Attributes:
        type: the tag (``chain/req`` …), written first; not an attribute, see ``TYPE``.
        id: message id; a fresh uuid4 hex string when not given.
        version: protocol version, ``"1.0"``; any ``1.x`` is accepted on input.
        ts: Unix epoch timestamp, float seconds; now when not given.
        a2e: input-only alias of ``version`` (PROTOCOL.md §2). :func:`a2e_host.codec.
            decode_message` checks it, copies it into ``version`` and unsets it, so it is
            never emitted; leave it unset when building messages.
    """

    id: str = msgspec.field(default_factory=new_id)
    version: str = PROTOCOL_VERSION
    ts: float = msgspec.field(default_factory=time.time)
    a2e: str | msgspec.UnsetType = msgspec.UNSET

    TYPE: ClassVar[str] = ""

    @property
    def protocol_version(self) -> str:
        """The version the peer declared: ``a2e`` when given, else ``version``."""
        return self.a2e if isinstance(self.a2e, str) else self.version


# ── core messages (PROTOCOL.md §2) ──────────────────────────────────────────


class HandshakeRequest(Message, tag="handshake/req", kw_only=True):
    """Agent → host, once per session before any work (PROTOCOL.md §2 table).

    Attributes:
        agent_id: free-form agent name.
        agent_caps: capability names asked for, e.g. ``["chains", "proc"]``.
        auth_token: required when the host is configured with a token.
        limits: *extension*: ceilings to lower for this session (PROTOCOL.md §6),
            e.g. ``{"max_nodes": 100}``; a value above the host's is capped to it.
    """

    TYPE: ClassVar[str] = "handshake/req"
    agent_id: str = ""
    agent_caps: list[str] = []
    auth_token: str = ""
    limits: dict[str, Any] = {}


class Capability(msgspec.Struct, kw_only=True):
    """One negotiated capability in ``handshake/resp.accepted_caps``.

    ``metadata`` of ``chains`` is ``{"namespace", "priority", "features", "limits"}``.
    """

    capability: str
    enabled: bool = True
    metadata: dict[str, Any] = {}


class HandshakeResponse(Message, tag="handshake/resp", kw_only=True):
    """Host → agent: the answer to ``handshake/req`` (PROTOCOL.md §2 table).

    Attributes:
        req_id: the ``handshake/req`` id.
        session_id: new and unguessable (a fresh uuid4 hex when not given).
        accepted_caps: the capabilities asked for **and** served.
        max_parallel: chains in flight per session (default 4).
        ok: false when refused, with ``reason``.
        reason: ``auth_failed``, ``version_mismatch``, ``no_caps`` or ``server_error``
            when ``ok`` is false, else ``""``.
    """

    TYPE: ClassVar[str] = "handshake/resp"
    req_id: str = ""
    session_id: str = msgspec.field(default_factory=new_id)
    accepted_caps: list[Capability] = []
    max_parallel: int = 4
    ok: bool = True
    reason: str = ""


class Ping(Message, tag="ping", kw_only=True):
    """Agent → host liveness check, no fields beyond the envelope; answered by
    :class:`Pong` (PROTOCOL.md §2 table)."""

    TYPE: ClassVar[str] = "ping"


class Pong(Message, tag="pong", kw_only=True):
    """Host → agent answer to :class:`Ping` (PROTOCOL.md §2 table): ``req_id`` is the
    ping's id, ``uptime_seconds`` float seconds since the host started."""

    TYPE: ClassVar[str] = "pong"
    req_id: str = ""
    uptime_seconds: float = 0.0


class Shutdown(Message, tag="shutdown", kw_only=True):
    """Agent → host (PROTOCOL.md §2 table): stop taking work, let chains in flight finish
    within ``timeout`` (int seconds, default 10), then close."""

    TYPE: ClassVar[str] = "shutdown"
    timeout: int = 10


class ErrorMessage(Message, tag="error", kw_only=True):
    """Host → agent: a message could not be accepted (PROTOCOL.md §2 table).

    Attributes:
        req_id: id of the offending message, ``""`` when it had no readable id.
        code: a PROTOCOL.md §2 error code, e.g. ``schema_violation``.
        message: one sentence a person can act on.
        detail: facts, e.g. ``{"path": "$.nodes[3].input_map"}``.
        retryable: whether resending unchanged may succeed.
        capability_name: the capability concerned, ``""`` for core errors.
    """

    TYPE: ClassVar[str] = "error"
    req_id: str = ""
    code: str
    message: str = ""
    detail: dict[str, Any] = {}
    retryable: bool = False
    capability_name: str = ""


# ── chains (seed 000) ───────────────────────────────────────────────────────

DEFAULT_TIMEOUT = 300
"""Seconds a chain may run when its ``chain/req`` leaves ``timeout`` out (the seed's
default), capped by ``max_timeout`` (PROTOCOL.md §5)."""

# The default of ``ChainRequest.timeout`` is this very object, built at run time: a
# decoded or written ``300`` is another int object, so ``timeout is _OMITTED_TIMEOUT``
# tells a request that left ``timeout`` out from one that asked for 300 seconds, while
# the field stays a plain ``int`` with the seed's default on the wire and in the schema.
_OMITTED_TIMEOUT: int = int(str(DEFAULT_TIMEOUT))


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
        kind / data: A2EEvent's fields, always ``"status"`` and ``{}`` (PROTOCOL.md §5).
        req_id: the ``chain/req`` id.
        seq: 1, 2, 3 … per request, gapless (PROTOCOL.md §5).
        node_id: the node; map items as ``<template>[<index>]``, skill inner nodes as
            ``<outer>/<inner>``.
        phase: ``start``, ``done``, ``skip`` or ``error``.
        output: the node output when ``phase`` is ``done``.
        error: the error message when ``phase`` is ``error``.
    """

    TYPE: ClassVar[str] = "chain/event"
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
        error: ``{"code", "message", "node_id", "retryable", "details"}`` or null.
    """

    TYPE: ClassVar[str] = "chain/resp"
    req_id: str = ""
    chain_id: str = ""
    success: bool = False
    outputs: dict[str, Any] = {}
    final_output: Any = None
    duration_ms: int = 0
    nodes_run: int = 0
    error: dict[str, Any] | None = None


class ChainCancel(Message, tag="chain/cancel", kw_only=True):
    """*Extension* ``chain/cancel``, agent → host (PROTOCOL.md §5): cancel the running chain
    whose ``chain/req`` id is ``req_id``; it ends with a ``chain/resp`` whose error code is
    ``cancelled``. ``session_id`` is the sender's session, as in ``chain/req``."""

    TYPE: ClassVar[str] = "chain/cancel"
    session_id: str = ""
    req_id: str = ""


MESSAGE_TYPES: dict[str, type[Message]] = {
    cls.TYPE: cls
    for cls in (
        HandshakeRequest,
        HandshakeResponse,
        Ping,
        Pong,
        Shutdown,
        ErrorMessage,
        ChainRequest,
        ChainEvent,
        ChainResponse,
        ChainCancel,
    )
}
"""Every message type this host knows, by its ``type`` tag."""
