"""The one place exceptions become wire failures.

Layer: core (no anyio, no I/O; it logs through the logger it is given; it imports nothing
from :mod:`a2e_host.chains`). Two shapes leave the host when something goes wrong, and
each is made here and nowhere else (STYLE.md "Docstrings and errors"; PROTOCOL.md §2, §5):

- a wire ``error`` message, for a message the host could not accept or a bug while
  handling one: :func:`error_message_of`;
- a ``chain/resp.error`` object (:class:`ChainFailure`), for a chain that failed:
  :func:`chain_failure_of` for an exception, :func:`timeout_failure` and
  :func:`cancelled_failure` for a chain that ran out of time or was cancelled.

Anything that is not an :class:`~a2e_host.exceptions.A2EError` raised on purpose is a
bug: logged with its traceback, sent as ``runtime_error`` with no detail. Inside a chain,
a node's exception (a tool raising ``ValueError``) is the node's failure, not the host's:
it becomes ``chain_node_error`` with the text :func:`failure_message_of` gives.

A failure's facts (``error.detail``, ``chain/resp.error.details``) come from whoever
raised it, a third-party tool or plugin included, so they are made sendable here
(:func:`sendable_details`): a value the encoder cannot write is left out and named, and
the failure is still sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from .exceptions import ChainError, RemoteProtocolError
from .messages import ErrorMessage

__all__ = [
    "UNENCODABLE",
    "ChainFailure",
    "cancelled_failure",
    "chain_failure_of",
    "error_message_of",
    "failure_message_of",
    "internal_error_message",
    "sendable_details",
    "timeout_failure",
]

UNENCODABLE = "unencodable"
"""The key under which :func:`sendable_details` lists the keys it left out."""

_MAX_KEY_NAME = 100  # characters of a left-out key's name that are kept
_check_encoder = msgspec.json.Encoder()

NODE_FAILURE_CODES = frozenset({"chain_node_error", "chain_limit", "interrupted"})
"""The codes a failed node reports (PROTOCOL.md §5): a ceiling refusing is
``chain_limit``, a node a restart interrupted ``interrupted`` (§5 Resume), anything else
a node raises is ``chain_node_error``."""


class ChainFailure(msgspec.Struct, frozen=True, kw_only=True):
    """``chain/resp.error``: why a chain failed (PROTOCOL.md §5).

    Encoded as an object with exactly these keys, in this order (the seed's ``error``
    dict): ``{"code", "message", "node_id", "retryable", "details"}``.

    Attributes:
        code: ``chain_node_error``, ``chain_invalid``, ``chain_cycle``, ``chain_limit``,
            ``timeout``, ``cancelled`` or ``runtime_error``.
        message: one sentence a person (or an LLM) can act on.
        node_id: the node at fault (its id in the request, without a skill's prefix);
            ``""`` when the chain as a whole failed.
        retryable: whether sending the same chain again may succeed.
        details: machine-readable facts: ``{ceiling, scope, limit, requested}`` for
            ``chain_limit`` (PROTOCOL.md §6), ``errors`` for ``chain_invalid``,
            ``index`` for a map item, ``timeout`` for ``timeout``; a refused chain's
            ``warnings`` (``chain_warning`` problems) and, past 100 problems,
            ``problems_total`` / ``problems_listed`` (PROTOCOL.md §4); ``unencodable``:
            keys of facts that could not be written as JSON (§8).
    """

    code: str
    message: str = ""
    node_id: str = ""
    retryable: bool = False
    details: dict[str, Any] = {}


def sendable_details(details: Mapping[str, Any]) -> dict[str, Any]:
    """``details`` as a dict the message encoder can write (PROTOCOL.md §2, §5).

    Failure facts are meant to be JSON-like, but a tool or plugin may put anything there
    (an ``object()``, an integer of more than 4,300 digits, a structure nested past the
    encoder's depth). Such a failure must still be answered, so the facts are encoded
    once here: when that works they are sent as they are; otherwise each top-level entry
    the encoder cannot write is left out, and the keys left out are listed (as strings,
    each cut to 100 characters) under :data:`UNENCODABLE`.

    Args:
        details: the failure's facts (``exc.details`` / ``exc.detail``).

    Returns:
        A new dict: a copy of ``details``, or its encodable entries plus
        ``{"unencodable": [key, ...]}``.
    """
    if not isinstance(details, Mapping):  # a plugin's slip: facts are a JSON object
        return {UNENCODABLE: [f"<{type(details).__name__} details>"]}
    copy = dict(details)
    if not copy or _encodes(copy):
        return copy
    kept: dict[str, Any] = {}
    left_out: list[str] = []
    for key, value in copy.items():
        if isinstance(key, str) and _encodes({key: value}):
            kept[key] = value
        else:
            name = key if isinstance(key, str) else f"<{type(key).__name__} key>"
            left_out.append(name[:_MAX_KEY_NAME])
    kept[UNENCODABLE] = left_out
    return kept


def _encodes(value: Any) -> bool:
    """Whether the message encoder can write ``value`` (TypeError: not JSON-like;
    ValueError: an over-long integer; RecursionError: nested too deep)."""
    try:
        _check_encoder.encode(value)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return False
    return True


def failure_message_of(exc: BaseException) -> str:
    """The sentence a failure shows: a :class:`~a2e_host.exceptions.ChainError`'s own
    message, else ``"<Type>: <text>"`` (a tool that raised ``ValueError("bad")`` reads
    ``"ValueError: bad"``)."""
    if isinstance(exc, ChainError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"


def chain_failure_of(
    exc: BaseException, *, node_id: str | None = None, stage: str = "running"
) -> ChainFailure:
    """The ``chain/resp.error`` for an exception (PROTOCOL.md §5).

    Args:
        exc: what was raised.
        node_id: the node that raised it, when a node failed. Its code is then
            ``chain_limit`` when a ceiling refused and ``chain_node_error`` for anything
            else (a sub-chain's ``chain_invalid`` or a tool's ``ValueError`` included),
            and ``node_id`` is this one. None when the chain as a whole failed: a
            :class:`~a2e_host.exceptions.ChainError` (e.g. ``ChainInvalid``) then keeps
            its own code and ``node_id``, anything else is ``runtime_error``.
        stage: what the host was doing when a chain as a whole failed with a bug
            (``"validating"`` or ``"running"``), for the ``runtime_error`` sentence.

    Returns:
        The frozen :class:`ChainFailure`; its ``message`` is :func:`failure_message_of`
        and ``details`` a copy of the exception's (``{}`` for a non-chain exception),
        made sendable (:func:`sendable_details`).
        Nothing is logged here: the caller logs a bug with its traceback.
    """
    if isinstance(exc, ChainError):
        code = exc.code
        if node_id is None:
            node_id = exc.node_id
        elif code not in NODE_FAILURE_CODES:
            code = "chain_node_error"
        return ChainFailure(
            code=code,
            message=exc.message,
            node_id=node_id,
            retryable=exc.retryable,
            details=sendable_details(exc.details),
        )
    if node_id is None:
        return ChainFailure(
            code="runtime_error",
            message=f"the host failed while {stage} the chain ({type(exc).__name__}); "
            "this is a fault in the host, not in the chain",
        )
    return ChainFailure(
        code="chain_node_error", message=failure_message_of(exc), node_id=node_id
    )


def timeout_failure(timeout: float) -> ChainFailure:
    """The ``chain/resp.error`` of a chain that did not finish within ``timeout`` seconds
    (code ``timeout``, retryable; PROTOCOL.md §5)."""
    return ChainFailure(
        code="timeout",
        message=f"the chain did not finish within its timeout of {timeout:g} s",
        retryable=True,
        details={"timeout": timeout},
    )


def cancelled_failure(
    message: str = "the chain was cancelled before it finished",
) -> ChainFailure:
    """The ``chain/resp.error`` of a cancelled chain (code ``cancelled``: a
    ``chain/cancel``, the connection closing, an interrupted run; PROTOCOL.md §5).

    Args:
        message: what cancelled it, when the default sentence does not say enough.
    """
    return ChainFailure(code="cancelled", message=message)


def error_message_of(
    exc: BaseException,
    *,
    req_id: str,
    log: Any,
    message_type: str = "",
    capability_name: str = "",
) -> ErrorMessage:
    """The wire ``error`` for an exception raised while handling a message.

    A :class:`~a2e_host.exceptions.RemoteProtocolError` keeps its code, message, detail
    (made sendable: :func:`sendable_details`) and retryable flag (its own ``req_id`` /
    ``capability_name`` win when set). Anything
    else is a bug: logged with its traceback and sent as ``runtime_error`` with no detail
    (PROTOCOL.md §2).

    Args:
        exc: what was raised.
        req_id: the offending message's id (``""`` if unreadable).
        log: a structlog logger (the connection's).
        message_type: its ``type``, for the runtime_error sentence.
        capability_name: the capability of the plugin that handled it, if any.

    Returns:
        The :class:`~a2e_host.messages.ErrorMessage` to send.
    """
    if isinstance(exc, RemoteProtocolError):
        own_id = exc.req_id or req_id
        log.debug("message refused", code=exc.code, req_id=own_id, error=exc.message)
        return ErrorMessage(
            req_id=own_id,
            code=exc.code,
            message=exc.message,
            detail=sendable_details(exc.detail),
            retryable=exc.retryable,
            capability_name=exc.capability_name or capability_name,
        )
    log.error("internal error while handling a message", req_id=req_id,
              message_type=message_type, exc_info=exc)
    return internal_error_message(req_id=req_id, message_type=message_type,
                                  capability_name=capability_name)


def internal_error_message(
    *, req_id: str, message_type: str = "", capability_name: str = ""
) -> ErrorMessage:
    """The wire ``runtime_error`` for a fault in the host: no detail, no traceback
    (PROTOCOL.md §2); the caller logs the fault. Also the last resort when the error for
    a failure could not be made or sent."""
    what = repr(message_type) if message_type else "a message"
    return ErrorMessage(
        req_id=req_id,
        code="runtime_error",
        message=f"internal error while handling {what}; see the host log",
        capability_name=capability_name,
    )
