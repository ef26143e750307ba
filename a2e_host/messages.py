"""The A2E wire messages as msgspec Structs.

Layer: core (no I/O, no anyio). The envelope every message shares and the core
messages every session speaks (handshake, ping, shutdown, error: PROTOCOL.md §2, after
the public A2E python SDK). A capability's messages are declared by its plugin
(:attr:`a2e_host.plugin.Plugin.message_types`; the chains capability's live in
:mod:`a2e_host.chains.messages`); messages are tagged by ``type``, and
:class:`a2e_host.codec.MessageCodec` decodes the core types plus every enabled plugin's
with one decoder. Structs encode every field (defaults included), in declaration order
after ``type``.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any, ClassVar

import msgspec

__all__ = [
    "PROTOCOL_VERSION",
    "Capability",
    "ErrorMessage",
    "HandshakeRequest",
    "HandshakeResponse",
    "Message",
    "Ping",
    "Pong",
    "Shutdown",
    "CORE_MESSAGE_TYPES",
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
        a2e: input-only alias of ``version`` (PROTOCOL.md §2). :meth:`a2e_host.codec.
            MessageCodec.decode` checks it, copies it into ``version`` and unsets it, so it is
            never emitted; leave it unset when building messages.
    """

    id: str = msgspec.field(default_factory=new_id)
    version: str = PROTOCOL_VERSION
    ts: float = msgspec.field(default_factory=time.time)
    a2e: str | msgspec.UnsetType = msgspec.UNSET

    TYPE: ClassVar[str] = ""
    FROM_HOST: ClassVar[bool] = False
    """True for types only a host sends (an agent sending one gets ``invalid_message``)."""

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
    FROM_HOST: ClassVar[bool] = True
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
    FROM_HOST: ClassVar[bool] = True
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
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    code: str
    message: str = ""
    detail: dict[str, Any] = {}
    retryable: bool = False
    capability_name: str = ""


CORE_MESSAGE_TYPES: tuple[type[Message], ...] = (
    HandshakeRequest,
    HandshakeResponse,
    Ping,
    Pong,
    Shutdown,
    ErrorMessage,
)
"""The messages every host speaks, whatever its plugins (PROTOCOL.md §2)."""
