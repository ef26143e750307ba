"""The session side of one connection, as a pure state machine (PROTOCOL.md §2).

Layer: core (no anyio, no sockets, no clock). The runtime feeds it the connection's
messages; it answers with responses or raises the
:class:`~a2e_host.exceptions.RemoteProtocolError` the host puts on the wire.

Theory of operation. A connection holds at most one session. Its state moves along::

    AWAITING_HANDSHAKE ──handshake ok──▶ OPEN ──stop()──▶ CLOSING ──close()──▶ CLOSED
           │  ▲                                                         ▲
           │  └── handshake refused (no_caps) ─┘                        │
           └── handshake refused (auth_failed) → the runtime closes ────┘

What each state does with a message (``core`` = ``ping`` and ``shutdown``, answered in
every state but CLOSED; ``work`` = anything routed to a plugin):

=====================  =========================  ============================  =============
state                  handshake/req              work                          core
=====================  =========================  ============================  =============
AWAITING_HANDSHAKE     negotiate                  ``handshake_required``        answered [2]_
OPEN                   ``invalid_message``        checked, then routed          answered
CLOSING                ``invalid_message``        checked, then routed [1]_     answered
CLOSED                 dropped                    dropped                       dropped
=====================  =========================  ============================  =============

.. [1] the plugin sees ``ctx.closing`` and refuses new work (``chain/cancel`` still works).
.. [2] when the host has an ``auth_token``, core messages before a successful handshake
   get ``handshake_required`` too (:meth:`ConnectionSession.check_core`): an
   unauthenticated peer is answered only its ``handshake/req``.

Decisions where PROTOCOL.md §2 is silent:

- A second ``handshake/req`` after a successful one gets ``error`` ``invalid_message``
  ("already handshaken"); the first session stays. After a *refused* one (``no_caps``)
  the agent may try again.
- An empty ``session_id`` on work after the handshake means this connection's session
  (clients built on typed models send every field, unused ones as ``""``, §4); any
  other value that is not this connection's gets ``unknown_session``.
- ``accepted_caps`` lists, in the order asked and without duplicates, each capability
  both asked and served. ``max_parallel`` is the session's effective ceiling.
- *Gates* (``proc``, ``skill``) are names an agent lists in ``agent_caps`` to unlock
  node kinds of a served capability (PROTOCOL.md §8). A gate whose name is itself a
  served capability (the ``proc`` and ``skill`` plugins) is dropped: asking it grants
  that capability. Otherwise a gate is not a capability: never in ``accepted_caps``,
  never enough for a session on its own; it is granted only with the capability that
  owns it, and :attr:`Session.granted` holds it beside the accepted capabilities.
- Bad ``handshake/req.limits`` (an unknown ceiling, a value that is not a positive
  integer) is ``error`` ``schema_violation`` with ``detail.path`` ``$.limits.<name>``;
  no session is created.
"""

from __future__ import annotations

import enum
import hmac
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .config import ANONYMOUS_PRINCIPAL, TOKEN_PRINCIPAL, HostConfig
from .exceptions import (
    CapabilityMissing,
    HandshakeRequired,
    InvalidMessage,
    SchemaViolation,
    UnknownSession,
)
from .limits import CEILINGS, SessionLimits
from .messages import Capability, HandshakeRequest, HandshakeResponse, Message
from .sizes import SHOWN_CHARS, clip

__all__ = [
    "Session",
    "SessionState",
    "ConnectionSession",
    "HandshakeOutcome",
    "MetadataFn",
]

MetadataFn = Callable[["Session"], dict[str, Any]]
"""``metadata(session) -> accepted_caps[].metadata`` for one served capability."""


class SessionState(enum.Enum):
    """Where a connection's session is; see the module docstring's table."""

    AWAITING_HANDSHAKE = "awaiting_handshake"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


@dataclass(slots=True, eq=False)
class Session:
    """A handshaken session (implements :class:`~a2e_host.plugin.SessionInfo`).

    Attributes:
        session_id: unguessable: 32 hex digits from :mod:`secrets`.
        agent_id: as the agent gave it in ``handshake/req``.
        granted: the capability names in ``accepted_caps`` and the gates granted with
            them (what work and node kinds are checked against).
        limits: the host's ceilings lowered by ``handshake/req.limits`` (PROTOCOL.md §6).
        gates: the gates among ``granted`` (``proc``, ``skill``; PROTOCOL.md §8).
        principal: who authenticated: the name of the ``auth_tokens`` entry presented,
            ``"token"`` for the single ``auth_token``, ``"anonymous"`` on a host without
            tokens (PROTOCOL.md §5 Durable runs: whose runs it may see).
    """

    session_id: str
    agent_id: str
    granted: frozenset[str]
    limits: SessionLimits
    gates: frozenset[str] = frozenset()
    principal: str = ANONYMOUS_PRINCIPAL


@dataclass(frozen=True, slots=True)
class HandshakeOutcome:
    """What to do after a ``handshake/req``.

    Attributes:
        response: the ``handshake/resp`` to send.
        session: the new session, None when refused.
        close: true when the connection must close after sending it (``auth_failed``).
    """

    response: HandshakeResponse
    session: Session | None
    close: bool = False


class ConnectionSession:
    """The session state machine of one connection.

    Args:
        config: the host configuration (ceilings, ``auth_token``).
        served: capability name → its metadata function (None: empty metadata), in the
            order the host serves them.
        gates: gate name → the served capability that owns it (e.g.
            ``{"skill": "chains"}``); a gate is granted when asked and its owner granted.
        how_to_serve: capability name → how an operator makes the host serve it
            (``Plugin.how_to_serve``), named in ``capability_missing`` when not served.
        bearer_token: a token the transport already received (WebSocket
            ``Authorization: Bearer``); it satisfies auth like ``handshake/req.auth_token``.
    """

    def __init__(
        self,
        config: HostConfig,
        served: Mapping[str, MetadataFn | None],
        *,
        gates: Mapping[str, str] | None = None,
        how_to_serve: Mapping[str, str] | None = None,
        bearer_token: str = "",
    ) -> None:
        self.config = config
        self.served = dict(served)
        self.how_to_serve = dict(how_to_serve or {})
        self.gates = {g: owner for g, owner in (gates or {}).items() if g not in self.served}
        self.bearer_token = bearer_token
        self.state = SessionState.AWAITING_HANDSHAKE
        self.session: Session | None = None

    # ── handshake ──────────────────────────────────────────────────────────

    def receive_handshake(self, request: HandshakeRequest) -> HandshakeOutcome:
        """Negotiate a session (PROTOCOL.md §2).

        Args:
            request: the agent's ``handshake/req``.

        Returns:
            The outcome: ``ok`` true with a new session, or ``ok`` false with ``reason``
            ``auth_failed`` (close the connection after sending) or ``no_caps``.

        Raises:
            InvalidMessage: this connection already has a session, or is closing.
            SchemaViolation: ``limits`` names an unknown ceiling or a non-positive value
                (``detail.path`` = ``$.limits.<name>``).
            Exception: whatever a metadata function raises (the caller answers
                ``server_error``); the state is unchanged then.
        """
        if self.session is not None or self.state is not SessionState.AWAITING_HANDSHAKE:
            what = f"session {self.session.session_id!r}" if self.session else "no session"
            raise InvalidMessage(
                f"this connection is already handshaken or closing ({what}); send work with "
                "its session_id, or open a new connection for a new session"
            )
        principal = self._principal(request.auth_token)
        if principal is None:
            reason = "auth_failed"
            return HandshakeOutcome(self._refusal(request, reason), None, close=True)
        limits = self._session_limits(request.limits)
        asked = list(dict.fromkeys(request.agent_caps))
        granted = [cap for cap in asked if cap in self.served]
        if not granted:
            return HandshakeOutcome(self._refusal(request, "no_caps"), None)
        gates = frozenset(g for g in asked if self.gates.get(g) in granted)
        session = Session(
            session_id=secrets.token_hex(16),
            agent_id=request.agent_id,
            granted=frozenset(granted) | gates,
            limits=limits,
            gates=gates,
            principal=principal,
        )
        accepted = []
        for cap in granted:
            metadata_fn = self.served[cap]
            metadata = metadata_fn(session) if metadata_fn is not None else {}
            accepted.append(Capability(capability=cap, enabled=True, metadata=metadata))
        response = HandshakeResponse(
            req_id=request.id,
            session_id=session.session_id,
            accepted_caps=accepted,
            max_parallel=limits.effective.max_parallel,
            ok=True,
        )
        self.session = session
        self.state = SessionState.OPEN
        return HandshakeOutcome(response, session)

    @property
    def auth_required(self) -> bool:
        """Whether the host has a token (``auth_token``, ``auth_tokens``) a handshake
        must present."""
        return self.config.auth_required

    def _principal(self, auth_token: str) -> str | None:
        """The principal the presented token (or bearer token) names; None when the host
        wants a token and none matches. Every configured token is compared, in constant
        time each, so the time taken does not tell which one nearly matched."""
        if not self.config.auth_required:
            return ANONYMOUS_PRINCIPAL
        given = [t.encode() for t in (auth_token, self.bearer_token) if t]
        candidates = [(name, token) for name, token in self.config.auth_tokens.items()]
        if self.config.auth_token:
            candidates.append((TOKEN_PRINCIPAL, self.config.auth_token))
        found: str | None = None
        for name, token in candidates:
            want = token.encode()
            for presented in given:
                if hmac.compare_digest(presented, want) and found is None:
                    found = name
        return found

    def _session_limits(self, asked: dict[str, Any]) -> SessionLimits:
        for name, value in asked.items():
            try:
                self.config.limits.lowered({name: value})
            except ValueError as exc:
                known = ", ".join(CEILINGS)
                hint = "" if name in CEILINGS else f" (known ceilings: {known})"
                raise SchemaViolation(
                    f"handshake/req: {exc}{hint}",
                    detail={"path": f"$.limits.{name}", "type": "handshake/req"},
                ) from None
        return SessionLimits(self.config.limits, asked)

    def _refusal(self, request: HandshakeRequest, reason: str) -> HandshakeResponse:
        return HandshakeResponse(
            req_id=request.id,
            session_id="",
            accepted_caps=[],
            max_parallel=self.config.limits.max_parallel,
            ok=False,
            reason=reason,
        )

    # ── core messages and work ─────────────────────────────────────────────

    def check_core(self, message: Message) -> None:
        """Whether a core message (``ping``, ``shutdown``) may be answered now.

        Before a successful handshake on a host with an ``auth_token``, only
        ``handshake/req`` is answered (docs/DECISIONS.md): an unauthenticated peer learns
        nothing and can do nothing but authenticate.

        Raises:
            HandshakeRequired: an auth token is configured and no session is open yet.
        """
        if self.session is None and self.auth_required:
            raise HandshakeRequired(
                f"this host requires authentication: send handshake/req with its auth_token "
                f"before {message.TYPE!r}"
            )

    def check_work(self, message: Message, capability: str) -> Session:
        """The session a work message belongs to, checked (PROTOCOL.md §2).

        Args:
            message: a message routed to a plugin; its ``session_id`` (if it has one)
                must be this connection's, or ``""``.
            capability: the capability of the plugin that serves ``message``.

        Returns:
            This connection's session.

        Raises:
            HandshakeRequired: no successful handshake yet.
            UnknownSession: ``session_id`` is neither ``""`` nor this connection's.
            CapabilityMissing: the session was not granted ``capability``
                (its ``capability_name`` set).
        """
        mtype = message.TYPE
        if self.session is None:
            raise HandshakeRequired(
                f"send handshake/req (with agent_caps naming {capability!r}) before {mtype!r}"
            )
        session_id = getattr(message, "session_id", "")
        if session_id and session_id != self.session.session_id:
            raise UnknownSession(
                f"session_id {clip(session_id)} is not this connection's session; use the "
                "session_id from this connection's handshake/resp",
                detail={"session_id": session_id[:SHOWN_CHARS]},
            )
        if capability not in self.session.granted:
            hint = self.how_to_serve.get(capability, "")
            fix = (f"list {capability!r} in handshake/req.agent_caps" if capability in self.served
                   else "this host does not serve it" + (f"; to serve it, {hint}" if hint else ""))
            raise CapabilityMissing(
                f"{mtype!r} needs capability {capability!r}, which this session was not "
                f"granted; {fix}",
                detail={"capability": capability},
                capability_name=capability,
            )
        return self.session

    # ── lifecycle ──────────────────────────────────────────────────────────

    def stop(self) -> None:
        """Stop taking work (``shutdown``, a signal, end of input): OPEN → CLOSING."""
        if self.state is not SessionState.CLOSED:
            self.state = SessionState.CLOSING

    def close(self) -> None:
        """The connection is gone: → CLOSED."""
        self.state = SessionState.CLOSED

    @property
    def closing(self) -> bool:
        """Whether new work should be refused (CLOSING or CLOSED)."""
        return self.state in (SessionState.CLOSING, SessionState.CLOSED)
