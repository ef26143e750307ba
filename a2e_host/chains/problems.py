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

A refusal lists at most :data:`MAX_PROBLEMS` problems, the first ones in that order, and
says how many there were when it lists fewer (``details.problems_total`` and
``details.problems_listed``, and the message): a request of 10,000 nodes with 33 broken
expressions each would otherwise be answered with 330,000 problems (a 91 MB
``chain/resp``). :class:`Problems` collects them keeping no more than that, so the
memory validation takes stays bounded too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..exceptions import ChainInvalid, ChainLimitExceeded

__all__ = [
    "CHAIN_CYCLE",
    "CHAIN_INVALID",
    "CHAIN_LIMIT",
    "CHAIN_WARNING",
    "MAX_PROBLEMS",
    "Problems",
    "chain_invalid",
    "limit_problem",
    "problem",
]

CHAIN_CYCLE, CHAIN_LIMIT, CHAIN_INVALID = "chain_cycle", "chain_limit", "chain_invalid"
CHAIN_WARNING = "chain_warning"
"""The code of a warning: a finding that could be wrong at run time (PROTOCOL.md §4)."""
_PRECEDENCE = (CHAIN_CYCLE, CHAIN_LIMIT, CHAIN_INVALID)
_LIMIT_FIELDS = ("ceiling", "scope", "limit", "requested")

MAX_PROBLEMS = 100
"""Problems one refusal lists in ``details.errors`` (PROTOCOL.md §4); the rest are
counted (``details.problems_total``)."""


def problem(
    code: str, node_id: str, field: str, message: str, hint: str, **extra: Any
) -> dict[str, Any]:
    """One problem in its wire shape (``extra`` keys follow the five common ones)."""
    return {"code": code, "node_id": node_id, "field": field, "message": message,
            "hint": hint, **extra}


def limit_problem(err: ChainLimitExceeded, node_id: str, field: str, hint: str) -> dict[str, Any]:
    """A ``chain_limit`` problem carrying the refusal's ceiling details (PROTOCOL.md §6)."""
    return problem(CHAIN_LIMIT, node_id, field, err.message, hint, **err.details)


class Problems:
    """The problems of one validation, in the order they were found: every one counted,
    the first :data:`MAX_PROBLEMS` of each code kept. That is enough to list the first
    :data:`MAX_PROBLEMS` in code precedence order (stable) however many are found, in
    memory bounded by the cap.

    Attributes:
        total: problems added so far.
    """

    __slots__ = ("total", "_kept")

    def __init__(self, found: Iterable[dict[str, Any]] = ()) -> None:
        self.total = 0
        self._kept: dict[str, list[dict[str, Any]]] = {code: [] for code in _PRECEDENCE}
        for one in found:
            self.add(one)

    def add(self, found: dict[str, Any]) -> None:
        """Count one problem; keep it while its code has fewer than the cap kept."""
        self.total += 1
        kept = self._kept.setdefault(found["code"], [])
        if len(kept) < MAX_PROBLEMS:
            kept.append(found)

    def __bool__(self) -> bool:
        return self.total > 0

    def __len__(self) -> int:
        return self.total

    def listed(self) -> list[dict[str, Any]]:
        """The first :data:`MAX_PROBLEMS` problems in code precedence order (stable)."""
        ordered = [p for kept in self._kept.values() for p in kept]
        return ordered[:MAX_PROBLEMS]


def chain_invalid(
    problems: Problems | Iterable[dict[str, Any]],
    warnings: list[dict[str, Any]] | None = None,
) -> ChainInvalid:
    """The one exception for every problem found, in code precedence order (stable).

    Args:
        problems: at least one problem: a :class:`Problems`, or problems in the order
            they were found.
        warnings: warnings found too; listed as ``details["warnings"]`` when there are any.

    Returns:
        A :class:`~a2e_host.exceptions.ChainInvalid` whose ``code`` and ``node_id`` are the
        first problem's and whose ``details["errors"]`` lists the first
        :data:`MAX_PROBLEMS`. When there were more, ``details`` also has
        ``problems_total`` (how many were found) and ``problems_listed`` (how many
        ``errors`` lists), and the message says so.
    """
    found = problems if isinstance(problems, Problems) else Problems(problems)
    ordered = found.listed()
    first = ordered[0]
    details: dict[str, Any] = {"errors": ordered}
    if first["code"] == CHAIN_LIMIT and all(k in first for k in _LIMIT_FIELDS):
        details = {**{k: first[k] for k in _LIMIT_FIELDS}, "errors": ordered}
    if found.total > len(ordered):
        details["problems_total"] = found.total
        details["problems_listed"] = len(ordered)
    if warnings:
        details["warnings"] = warnings
    code = first["code"] if first["code"] in _PRECEDENCE else CHAIN_INVALID  # tool_denied
    return ChainInvalid(_summary(first, found.total, len(ordered)), code=code,
                        node_id=first["node_id"], details=details)


def _at(node_id: str, field: str) -> str:
    return f"node {node_id!r} field {field!r}" if node_id else f"field {field!r}"


def _summary(first: dict[str, Any], count: int, listed: int) -> str:
    noun = "problem" if count == 1 else "problems"
    shown = f", the first {listed} listed in details.errors" if listed < count else ""
    where = _at(first["node_id"], first["field"])
    return f"chain is invalid ({count} {noun}{shown}); first: {where}: {first['message']}"
