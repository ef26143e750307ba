"""Validation of the recovery fields: ``retry``, ``timeout``, ``fallback``, ``resume``.

Layer: core (no I/O, no clock, no anyio). Source: PROTOCOL.md §5 Recovery, §6
(``max_attempts``). Run by :func:`~a2e_host.chains.validation.validate_chain` after the
per-node checks; which kinds take which field is the kind table's business (its own
fields: another kind setting one was refused already), so only the values are checked
here, on the kinds that own them:

* ``retry``: ``max_attempts`` at least 1 and within the ``max_attempts`` ceiling
  (``chain_limit``); ``interval``, ``max_delay`` finite and >= 0; ``backoff_rate``
  finite and >= 1; ``jitter`` ``full`` or ``none``; ``retry_on`` codes that can be
  retried;
* ``timeout``: finite, > 0, and not over the chain's own ``timeout``;
* ``fallback``: a registered tool other than the node's own;
* ``resume``: ``""`` or ``"rerun"`` (PROTOCOL.md §5 Resume).

A node with none of them costs three attribute reads.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Any, Protocol

from ..exceptions import ChainLimitExceeded
from ..limits import SessionLimits
from . import kinds
from .catalog import Catalog
from .messages import JITTERS, RESUME_MODES, ChainNode, ChainRequest, RetryPolicy
from .recovery_policy import NEVER_RETRIED

__all__ = ["RecoveryChecked", "check_recovery"]


class RecoveryChecked(Protocol):
    """What :func:`check_recovery` needs of a validation run (its
    :class:`~a2e_host.chains.node_checks.NodeChecks`)."""

    @property
    def request(self) -> ChainRequest: ...

    @property
    def nodes(self) -> Sequence[ChainNode]: ...

    @property
    def catalog(self) -> Catalog | None: ...

    @property
    def limits(self) -> SessionLimits | None: ...

    def is_own(self, i: int) -> bool: ...

    def tool_names(self) -> Collection[str]: ...

    def check_granted(self, nid: str, field: str, name: str) -> None: ...

    def suggest(self, word: str, among: str) -> str: ...

    def invalid(self, node_id: str, field: str, message: str, hint: str,
                **extra: Any) -> None: ...

    def add_limit(self, refused: ChainLimitExceeded, node_id: str, field: str,
                  hint: str) -> None: ...


def check_recovery(checks: RecoveryChecked) -> None:
    """Add a problem for every recovery field value that cannot be honoured."""
    chain_timeout: int | None = None
    for i, node in enumerate(checks.nodes):
        if node.retry is None and node.timeout is None and not node.fallback and not node.resume:
            continue
        spec = kinds.NODE_KINDS.get(node.kind)
        if spec is None or not checks.is_own(i):
            continue
        own = spec.own_fields
        nid = node.node_id
        if node.retry is not None and "retry" in own:
            _check_retry(checks, nid, node.retry)
        if node.timeout is not None and "timeout" in own:
            if chain_timeout is None:
                chain_timeout = _chain_timeout(checks)
            _check_timeout(checks, nid, node.timeout, chain_timeout)
        if node.fallback and "fallback" in own:
            _check_fallback(checks, nid, node)
        if node.resume and "resume" in own and node.resume not in RESUME_MODES:
            checks.invalid(nid, "resume", f"resume must be 'rerun' or left out, got "
                           f"{node.resume!r}", "set resume to 'rerun' to run the node again "
                           "when a durable run resumes after a restart, or leave it out")


def _chain_timeout(checks: RecoveryChecked) -> int:
    request = checks.request
    if checks.limits is None:
        return request.timeout
    return request.timeout_within(checks.limits.effective.max_timeout)


def _check_retry(checks: RecoveryChecked, nid: str, retry: RetryPolicy) -> None:
    n = retry.max_attempts
    if n < 1:
        checks.invalid(nid, "retry.max_attempts", f"retry.max_attempts must be at least 1, "
                       f"got {n}", "set max_attempts to the attempts in all, the first "
                       "included (e.g. 3), or remove retry")
    elif checks.limits is not None:
        refused = checks.limits.refusal("max_attempts", n, node_id=nid)
        if refused is not None:
            limit = refused.details["limit"]
            checks.add_limit(refused, nid, "retry.max_attempts",
                             f"ask for at most {limit} attempts")
    for field, value, low in (("interval", retry.interval, 0.0),
                              ("max_delay", retry.max_delay, 0.0),
                              ("backoff_rate", retry.backoff_rate, 1.0)):
        if not (math.isfinite(value) and value >= low):
            what = "seconds" if field != "backoff_rate" else "a factor"
            checks.invalid(nid, f"retry.{field}", f"retry.{field} must be {what} >= {low:g}, "
                           f"got {value!r}", f"set retry.{field} to a finite number >= {low:g}")
    if retry.jitter not in JITTERS:
        checks.invalid(nid, "retry.jitter", f"retry.jitter must be 'full' or 'none', got "
                       f"{retry.jitter!r}", "use 'full' (a random wait up to the backoff) "
                       "or 'none' (exactly the backoff)")
    for j, code in enumerate(retry.retry_on):
        if not code:
            checks.invalid(nid, f"retry.retry_on[{j}]", "retry.retry_on holds an empty code",
                           "name error codes, e.g. timeout or chain_node_error")
        elif code in NEVER_RETRIED:
            checks.invalid(nid, f"retry.retry_on[{j}]", f"retry.retry_on names {code!r}, "
                           "which is never retried (the same call fails the same way again)",
                           "remove it; retry codes such as timeout, chain_node_error or a "
                           "tool's own code")


def _check_timeout(checks: RecoveryChecked, nid: str, timeout: float, chain: int) -> None:
    if not (math.isfinite(timeout) and timeout > 0):
        checks.invalid(nid, "timeout", f"timeout must be positive seconds, got {timeout!r}",
                       "set the node's timeout to a number of seconds above 0, or leave it "
                       "out (the chain's timeout still applies)")
    elif timeout > chain:
        checks.invalid(nid, "timeout", f"timeout {timeout:g} s is over the chain's timeout "
                       f"of {chain} s", f"lower the node's timeout to at most {chain} s, or "
                       "raise the chain's timeout")


def _check_fallback(checks: RecoveryChecked, nid: str, node: ChainNode) -> None:
    name = node.fallback
    if name == node.name:
        checks.invalid(nid, "fallback", f"fallback names the node's own tool {name!r}",
                       "name another tool, or use retry to run this one again")
    elif checks.catalog is not None and name not in checks.tool_names():
        checks.invalid(nid, "fallback", f"fallback names {name!r}, which is not a registered "
                       f"tool{checks.suggest(name, 'tools')}",
                       "name a registered tool (tool/list/req lists them), or remove fallback")
    elif checks.catalog is not None:
        checks.check_granted(nid, "fallback", name)
