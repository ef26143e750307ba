"""Exceptions of a2e-host, each carrying its wire code.

Layer: core. Imports nothing from the runtime or transports.

The tree::

    A2EError                      code            where it ends up
    ├── RemoteProtocolError       (the peer sent something wrong → wire ``error``)
    │   ├── ParseError            parse_error         not JSON, not UTF-8, beyond decoder limits
    │   ├── InvalidMessage        invalid_message     not an object, no ``type``, binary frame
    │   ├── UnknownType           unknown_type        a ``type`` this host does not serve
    │   ├── SchemaViolation       schema_violation    a field of the wrong type (``detail.path``)
    │   ├── VersionMismatch       version_mismatch    a major version other than 1
    │   ├── MessageTooLarge       message_too_large   over ``max_message_bytes``
    │   ├── HandshakeRequired     handshake_required  work before ``handshake/req``
    │   ├── UnknownSession        unknown_session     a ``session_id`` not this connection's
    │   ├── CapabilityMissing     capability_missing  capability not granted to the session
    │   ├── Unauthorized          unauthorized        bad or missing ``auth_token``
    │   ├── Busy                  busy                more than ``max_parallel`` chains in flight
    │   ├── UnknownProc           unknown_proc        a ``proc_id`` this session never had
    │   ├── ProcDead              proc_dead           the process has ended (write, kill)
    │   ├── ProcLimit             proc_limit          past the session's ``proc_limit``
    │   ├── UnknownRun            unknown_run         no such run for this principal
    │   ├── RunExpired            run_expired         the run's retention passed
    │   ├── BadSinceSeq           bad_since_seq       ``since_seq`` outside the run's events
    │   └── StoreRequired         store_required      a durable run on a host with no store
    ├── ChainError                (a chain failed → ``chain/resp.error``)
    │   ├── ChainInvalid          chain_invalid / chain_cycle / chain_limit (validation)
    │   ├── NodeError             chain_node_error    a node failed
    │   └── ChainLimitExceeded    chain_limit         a ceiling hit at run time (map items, depth)
    └── LocalProtocolError        runtime_error       we misbehaved (a bug): logged, never detailed

Cancellation is never wrapped or swallowed by anything here. Source: PROTOCOL.md §2, §5.
"""

from __future__ import annotations

from typing import Any


class A2EError(Exception):
    """Base of every error a2e-host raises on purpose.

    Attributes:
        code: the wire error code (PROTOCOL.md §2 / §5).
        message: one sentence a person (or an LLM) can act on.
        detail: machine-readable facts, e.g. ``{"path": "$.nodes[3].kind"}``.
        retryable: whether sending the same thing again may succeed.
    """

    code = "runtime_error"
    retryable = False

    def __init__(
        self, message: str, *, detail: dict[str, Any] | None = None, retryable: bool | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.detail: dict[str, Any] = detail or {}
        if retryable is not None:
            self.retryable = retryable


class RemoteProtocolError(A2EError):
    """The peer sent something this host cannot accept; answered with a wire ``error``.

    Args:
        message / detail / retryable: as :class:`A2EError`.
        req_id: the offending message's ``id`` when it was readable, else ``""`` (the
            error then answers the id the host was handling).
        capability_name: the capability the refused message asked for, ``""`` when none.

    Attributes:
        req_id / capability_name: as given; the wire ``error`` carries them
            (:func:`a2e_host.errors.error_message_of`).
    """

    code = "invalid_message"

    def __init__(
        self,
        message: str,
        *,
        detail: dict[str, Any] | None = None,
        retryable: bool | None = None,
        req_id: str = "",
        capability_name: str = "",
    ) -> None:
        super().__init__(message, detail=detail, retryable=retryable)
        self.req_id = req_id
        self.capability_name = capability_name


class ParseError(RemoteProtocolError):
    code = "parse_error"


class InvalidMessage(RemoteProtocolError):
    code = "invalid_message"


class UnknownType(RemoteProtocolError):
    code = "unknown_type"


class SchemaViolation(RemoteProtocolError):
    code = "schema_violation"


class VersionMismatch(RemoteProtocolError):
    code = "version_mismatch"


class MessageTooLarge(RemoteProtocolError):
    code = "message_too_large"


class HandshakeRequired(RemoteProtocolError):
    code = "handshake_required"


class UnknownSession(RemoteProtocolError):
    code = "unknown_session"


class CapabilityMissing(RemoteProtocolError):
    code = "capability_missing"


class Unauthorized(RemoteProtocolError):
    code = "unauthorized"


class Busy(RemoteProtocolError):
    code = "busy"
    retryable = True


class LocalProtocolError(A2EError):
    """We misbehaved: a bug. Becomes ``runtime_error`` with no detail on the wire."""

    code = "runtime_error"


class ChainError(A2EError):
    """A chain could not run or did not succeed; reported in ``chain/resp.error``.

    Attributes:
        node_id: the node at fault, ``""`` when the chain as a whole is.
        details: the ``error.details`` dict of the response.
    """

    code = "chain_node_error"

    def __init__(
        self,
        message: str,
        *,
        node_id: str = "",
        details: dict[str, Any] | None = None,
        code: str | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message, detail=details, retryable=retryable)
        self.node_id = node_id
        if code is not None:
            self.code = code

    @property
    def details(self) -> dict[str, Any]:
        return self.detail


class ChainInvalid(ChainError):
    """Validation refused the chain; ``details["errors"]`` lists its problems, the first 100
    (``details["problems_total"]`` counts them when there were more; PROTOCOL.md §4)."""

    code = "chain_invalid"


class NodeError(ChainError):
    """A node failed: a tool raised, an expression failed, a process exited non-zero."""

    code = "chain_node_error"


class ChainLimitExceeded(ChainError):
    """A ceiling refused work (PROTOCOL.md §6).

    ``details`` is ``{ceiling, scope, limit, requested}``.
    """

    code = "chain_limit"


class NodeTimeout(NodeError):
    """A node's own deadline (tool ``timeout`` or proc ``timeout``) passed."""

    retryable = True


# ── durable runs (PROTOCOL.md §5 Durable runs) ────────────────────────────────


class UnknownRun(RemoteProtocolError):
    """No run with that id for this session's principal (another principal's run looks
    exactly the same: an id alone never reveals a run)."""

    code = "unknown_run"


class RunExpired(RemoteProtocolError):
    """The run ended and its retention passed: its events were pruned."""

    code = "run_expired"


class BadSinceSeq(RemoteProtocolError):
    """``chain/attach.since_seq`` is negative or past the run's last ``seq``."""

    code = "bad_since_seq"


class StoreRequired(RemoteProtocolError):
    """A durable run was asked of a host that has no run store (``--store``)."""

    code = "store_required"


# ── the skill capability (PROTOCOL.md §9): codes of skill/call/resp.error ──


class UnknownSkill(RemoteProtocolError):
    """A ``skill/call/req`` names no skill version that may run: an unknown name or
    version, a retired version, or a skill with only draft versions named bare
    (``unknown_skill``; sent in ``skill/call/resp.error``, its hint in ``detail``)."""

    code = "unknown_skill"


class SkillError(A2EError):
    """A skill called by ``skill/call/req`` ran and failed (``skill_error``; sent in
    ``skill/call/resp.data.error_code``)."""

    code = "skill_error"


class UnknownProc(RemoteProtocolError):
    """A ``proc/*`` request names a ``proc_id`` this session does not have (PROTOCOL.md §10)."""

    code = "unknown_proc"


class ProcDead(RemoteProtocolError):
    """A ``proc/write`` or ``proc/kill`` for a process that has already ended
    (PROTOCOL.md §10); ``detail`` has its ``proc_id``, ``state`` and ``exit_code``."""

    code = "proc_dead"


class ProcLimit(RemoteProtocolError):
    """A ``proc/spawn/req`` past the session's ``proc_limit`` ceiling (PROTOCOL.md §6, §10);
    ``detail`` is ``{ceiling, scope, limit, requested}``. Retryable: it succeeds once one
    of the session's processes has ended."""

    code = "proc_limit"
    retryable = True
# ── the tools capability (PROTOCOL.md §11) ──────────────────────────────────


class UnknownTool(RemoteProtocolError):
    """A ``tool/call/req`` names a tool this host does not serve (``detail``:
    ``{"tool", "suggestions"}``)."""

    code = "unknown_tool"


class ToolDenied(RemoteProtocolError):
    """A ``tool/call/req`` names a tool this session may not call (``detail``:
    ``{"tool"}``)."""

    code = "tool_denied"


class ToolFailed(RemoteProtocolError):
    """A ``tool/*`` request the host could not serve for a reason of the tool's
    (``tool_error``); a tool that ran and failed answers ``tool/call/resp`` with
    ``success: false`` instead."""

    code = "tool_error"


class CallLimitExceeded(RemoteProtocolError):
    """A direct call (``tool/call/req``) asked past a ceiling, e.g. a ``timeout`` over
    ``max_timeout`` (``detail``: ``{ceiling, scope, limit, requested}``, PROTOCOL.md §6)."""

    code = "chain_limit"


class NodeInterrupted(NodeError):
    """A node was running when the host restarted and may not run again (a durable run
    resumed, PROTOCOL.md §5 Resume): its tool is not declared idempotent and the node
    did not set ``resume: "rerun"``."""

    code = "interrupted"
    retryable = True


class StoreUnavailable(RemoteProtocolError):
    """The host's run store failed (a full disk, an I/O error) and records nothing more
    until the host restarts: a new durable run is refused (PROTOCOL.md §5 Durable runs).
    On the wire a ``runtime_error`` (the host's failure, not the peer's), retryable."""

    code = "runtime_error"
    retryable = True


class IdempotencyConflict(RemoteProtocolError):
    """A durable ``chain/req`` names an ``idempotency_key`` its principal already used for
    a *different* request (its ``nodes``, ``entry_node`` or ``initial_input`` differ;
    PROTOCOL.md §5 Durable runs). ``detail``: ``{idempotency_key, run_id}``."""

    code = "idempotency_conflict"
    retryable = False
