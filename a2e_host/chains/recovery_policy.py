"""What a node's recovery fields ask for, and the pure decisions about its attempts.

Layer: core (no anyio, no I/O, no clock). Source: PROTOCOL.md §5 Recovery.

* :class:`Recovery` — a node's ``retry``, ``timeout``, ``fallback`` and ``cache`` read
  once, at validation (:func:`recovery_of`); a node without any of them has none, so the
  scheduler's hot path asks one attribute (``PlanNode.recovery is None``).
* :func:`failure_codes` and :func:`may_retry` — whether a failed attempt is tried again:
  never a ceiling or an input the tool refuses; a failure that says it is retryable (a
  timeout, ``NodeError(retryable=True)``) or whose code the node's ``retry_on`` names;
  a tool that writes (or reaches the outside world) without being idempotent only for a
  code ``retry_on`` names.
* :class:`Report` — what the node's terminal event's ``data`` says of its attempts, and
  :func:`progress_data`, what one ``kind: "progress"`` event says.

The waits themselves (exponential, capped, jittered) are computed with tenacity by the
runtime (:mod:`a2e_host.chains.recovery`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import NODE_FAILURE_CODES, failure_message_of
from ..exceptions import A2EError, ChainError, NodeTimeout
from . import kinds
from .messages import ChainNode, RetryPolicy

__all__ = [
    "NEVER_RETRIED",
    "TIMEOUT_CODE",
    "Recovery",
    "Report",
    "failure_codes",
    "is_guarded",
    "may_retry",
    "progress_data",
    "recovery_of",
]

TIMEOUT_CODE = "timeout"
"""The own code of an attempt that ran out of time (its node's ``timeout`` or the tool's)."""

NEVER_RETRIED = frozenset({"chain_limit", "chain_invalid", "chain_cycle", "invalid_input"})
"""Codes no ``retry`` retries: a ceiling refuses the same way again, and an input the tool
refuses (``invalid_input``) or a chain validation refused is refused again."""

_GUARDED_EFFECTS = frozenset({"write", "external"})


@dataclass(frozen=True, slots=True)
class Recovery:
    """A node's recovery fields, read once (PROTOCOL.md §5 Recovery).

    Attributes:
        retry: the node's retry policy, None for one attempt.
        max_attempts: attempts in all: ``retry.max_attempts``, or 1.
        timeout: float seconds each attempt (the fallback's too) may take; None for none.
        fallback: the tool run when every attempt failed; ``""`` for none.
        cache: whether the host's step cache is asked (the node's or the request's
            ``cache``, tool nodes only).
    """

    retry: RetryPolicy | None
    max_attempts: int
    timeout: float | None
    fallback: str
    cache: bool


def recovery_of(node: ChainNode, request_cache: bool = False) -> Recovery | None:
    """The :class:`Recovery` of a validated node, None when it asks for none.

    Args:
        node: the node (its fields already validated: only a kind that takes a field
            sets it).
        request_cache: the request's ``cache``: every node of a kind that takes
            ``cache`` (the kind table's own fields: ``tool``) asks the cache.
    """
    retry, timeout, fallback = node.retry, node.timeout, node.fallback
    cache = node.cache
    if request_cache and not cache:
        spec = kinds.NODE_KINDS.get(node.kind)
        cache = spec is not None and "cache" in spec.own_fields
    if retry is None and timeout is None and not fallback and not cache:
        return None
    return Recovery(
        retry=retry,
        max_attempts=retry.max_attempts if retry is not None else 1,
        timeout=timeout,
        fallback=fallback,
        cache=cache,
    )


def failure_codes(exc: BaseException) -> tuple[str, str]:
    """``(own code, wire code)`` of a failed attempt.

    The own code is ``timeout`` for a :class:`~a2e_host.exceptions.NodeTimeout`, a
    :class:`~a2e_host.exceptions.ChainError`'s ``code`` (a tool may raise
    ``NodeError(..., code="rate_limited")``), else ``chain_node_error``. The wire code is
    what ``chain/resp.error.code`` would say: ``chain_limit`` or ``chain_node_error``.
    """
    if isinstance(exc, NodeTimeout):
        return TIMEOUT_CODE, "chain_node_error"
    if isinstance(exc, ChainError):
        own = exc.code
        return own, own if own in NODE_FAILURE_CODES else "chain_node_error"
    return "chain_node_error", "chain_node_error"


def may_retry(exc: BaseException, retry: RetryPolicy, *, guarded: bool) -> bool:
    """Whether a failed attempt may be tried again (attempts and time left aside).

    Args:
        exc: what the attempt raised.
        retry: the node's policy.
        guarded: the callee may repeat an effect when called again (a ``write`` or
            ``external`` tool not declared ``idempotent``, or a ``proc``): only a code
            ``retry_on`` names is retried.

    Returns:
        False for a code in :data:`NEVER_RETRIED`; else True when ``retry_on`` names the
        own or the wire code, or (unless ``guarded``) when the failure is retryable.
    """
    own, wire = failure_codes(exc)
    if own in NEVER_RETRIED or wire in NEVER_RETRIED:
        return False
    retry_on = retry.retry_on
    if own in retry_on or wire in retry_on:
        return True
    if guarded:
        return False
    return isinstance(exc, A2EError) and exc.retryable


def is_guarded(side_effects: str, idempotent: bool) -> bool:
    """Whether a tool with these declarations is retried only for codes ``retry_on``
    names: it writes or reaches the outside world and is not idempotent."""
    return side_effects in _GUARDED_EFFECTS and not idempotent


MAX_ATTEMPT_ERROR_CHARS = 500
"""Characters of a failed attempt's message kept in ``data`` (``errors[].error``, a
progress event's ``error``): a tool raising a megabyte of text would otherwise repeat it
once per attempt. The node's own ``error`` event keeps the whole final message."""


def attempt_error(exc: BaseException) -> str:
    """A failed attempt's message for ``data``, cut to :data:`MAX_ATTEMPT_ERROR_CHARS`
    characters (the cut says how long it was)."""
    text = failure_message_of(exc)
    if len(text) <= MAX_ATTEMPT_ERROR_CHARS:
        return text
    return f"{text[:MAX_ATTEMPT_ERROR_CHARS]}… ({len(text):,} characters)"


def progress_data(
    attempt: int, of: int, exc: BaseException, retry_in_s: float, fallback: str = ""
) -> dict[str, Any]:
    """The ``data`` of a ``kind: "progress"`` event: attempt ``attempt`` of ``of`` failed
    with ``exc``; the next attempt starts in ``retry_in_s`` seconds, or (``fallback``) the
    fallback tool runs now."""
    data: dict[str, Any] = {
        "attempt": attempt,
        "of": of,
        "error": attempt_error(exc),
        "code": failure_codes(exc)[0],
        "retry_in_s": retry_in_s,
    }
    if fallback:
        data["fallback"] = fallback
    return data


class Report:
    """What a node with recovery fields did, for its terminal event's ``data``.

    Attributes:
        attempts: attempts of the node's own tool (0 when the cache answered or the
            input could not be resolved).
        errors: ``{attempt, tool, code, error}`` per failed attempt (the fallback's
            included), in order.
        fallback_used: whether the fallback ran.
        tool: the tool that produced the output.
        cache: ``"hit"``, ``"miss"`` or ``"off"`` (asked, but the tool is not pure or
            the host keeps no cache); ``""`` when the cache was not asked.
        keep: after a miss, what keeps the output in the cache; called by the node's
            lifecycle once the output passed its checks (an output the node refuses is
            never kept), else None.
    """

    __slots__ = ("attempts", "errors", "fallback_used", "tool", "cache", "keep")

    def __init__(self, tool: str) -> None:
        self.attempts = 0
        self.errors: list[dict[str, Any]] = []
        self.fallback_used = False
        self.tool = tool
        self.cache = ""
        self.keep: Callable[[Any, int], object] | None = None

    def failed(self, attempt: int, tool: str, exc: BaseException) -> None:
        """Record a failed attempt of ``tool``."""
        self.errors.append({
            "attempt": attempt,
            "tool": tool,
            "code": failure_codes(exc)[0],
            "error": attempt_error(exc),
        })

    def data(self, done: bool) -> dict[str, Any]:
        """The terminal event's ``data``: ``{attempts, errors, fallback_used}``, plus
        ``tool`` when ``done`` and ``cache`` when it was asked."""
        data: dict[str, Any] = {
            "attempts": self.attempts,
            "errors": self.errors,
            "fallback_used": self.fallback_used,
        }
        if done:
            data["tool"] = self.tool
        if self.cache:
            data["cache"] = self.cache
        return data
