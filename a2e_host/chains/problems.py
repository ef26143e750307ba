"""The problems one chain validation reports: their shape, their order, their exception.

Layer: core (pure, no anyio). Source: PROTOCOL.md §4 (problem shape), §6 (ceilings), §8
(code precedence).

Every problem is a dict ``{"code", "node_id", "field", "message", "hint"}`` (cycles add
``"path"``; ceilings add ``"ceiling", "scope", "limit", "requested"``; syntax errors add
``"column"``; static type findings add ``"expected", "inferred"``). A *warning* (could be
wrong, does not refuse the chain) has the same shape with code ``chain_warning``. All
problems are raised together in one
:class:`~a2e_host.exceptions.ChainInvalid` whose code follows the precedence
``chain_cycle`` > ``chain_limit`` > ``chain_invalid``; when that first problem is a
ceiling, its four fields are also at the top of ``details``.
"""

from __future__ import annotations

from typing import Any

from ..exceptions import ChainInvalid, ChainLimitExceeded

__all__ = [
    "CHAIN_CYCLE",
    "CHAIN_INVALID",
    "CHAIN_LIMIT",
    "CHAIN_WARNING",
    "chain_invalid",
    "limit_problem",
    "problem",
]

CHAIN_CYCLE, CHAIN_LIMIT, CHAIN_INVALID = "chain_cycle", "chain_limit", "chain_invalid"
CHAIN_WARNING = "chain_warning"
"""The code of a warning: a finding that could be wrong at run time (PROTOCOL.md §4)."""
_PRECEDENCE = (CHAIN_CYCLE, CHAIN_LIMIT, CHAIN_INVALID)
_LIMIT_FIELDS = ("ceiling", "scope", "limit", "requested")


def problem(
    code: str, node_id: str, field: str, message: str, hint: str, **extra: Any
) -> dict[str, Any]:
    """One problem in its wire shape (``extra`` keys follow the five common ones)."""
    return {"code": code, "node_id": node_id, "field": field, "message": message,
            "hint": hint, **extra}


def limit_problem(err: ChainLimitExceeded, node_id: str, field: str, hint: str) -> dict[str, Any]:
    """A ``chain_limit`` problem carrying the refusal's ceiling details (PROTOCOL.md §6)."""
    return problem(CHAIN_LIMIT, node_id, field, err.message, hint, **err.details)


def chain_invalid(
    problems: list[dict[str, Any]], warnings: list[dict[str, Any]] | None = None
) -> ChainInvalid:
    """The one exception for every problem found, in code precedence order (stable).

    Args:
        problems: at least one problem, in the order they were found.
        warnings: warnings found too; listed as ``details["warnings"]`` when there are any.

    Returns:
        A :class:`~a2e_host.exceptions.ChainInvalid` whose ``code`` and ``node_id`` are the
        first problem's and whose ``details["errors"]`` lists every one.
    """
    order = {code: rank for rank, code in enumerate(_PRECEDENCE)}
    ordered = sorted(problems, key=lambda p: order[p["code"]])
    first = ordered[0]
    details: dict[str, Any] = {"errors": ordered}
    if first["code"] == CHAIN_LIMIT and all(k in first for k in _LIMIT_FIELDS):
        details = {**{k: first[k] for k in _LIMIT_FIELDS}, "errors": ordered}
    if warnings:
        details["warnings"] = warnings
    return ChainInvalid(_summary(ordered), code=first["code"], node_id=first["node_id"],
                        details=details)


def _at(node_id: str, field: str) -> str:
    return f"node {node_id!r} field {field!r}" if node_id else f"field {field!r}"


def _summary(problems: list[dict[str, Any]]) -> str:
    first = problems[0]
    count = len(problems)
    noun = "problem" if count == 1 else "problems"
    where = _at(first["node_id"], first["field"])
    return f"chain is invalid ({count} {noun}); first: {where}: {first['message']}"
