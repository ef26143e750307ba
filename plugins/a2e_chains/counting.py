"""How many nodes a chain may run through its declared skills, counted before it runs
(PROTOCOL.md §6 ``max_total_nodes``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from a2e_host.chains import kinds
from a2e_host.chains.messages import ChainNode
from a2e_host.exceptions import ChainInvalid
from a2e_host.limits import SessionLimits

__all__ = ["check_total_nodes", "worst_case_node_count"]

_COUNT_CEILING = 2**62  # worst-case node counts saturate here


def worst_case_node_count(
    nodes: Sequence[ChainNode], skills: Mapping[str, Any], max_depth: int
) -> int:
    """Node executions a chain makes at most through its declared skills, before running.

    Every declared node counts once, as if every branch side ran (as ``max_nodes``
    counts declared nodes); a ``skill`` node naming a declarative skill adds that skill's
    own count one level deeper, down to ``max_depth`` (a skill node past it counts once:
    it fails when it starts). Map templates count nothing here: their items are unknown
    until the map runs, and counted then (PROTOCOL.md §6 ``max_total_nodes``). Work is
    linear in the chain's nodes plus, per skill and depth reached, that skill's nodes.

    Args:
        nodes: the chain's declared nodes (depth 0).
        skills: declarative skills by name, each with ``nodes`` (a list of ChainNode).
        max_depth: the effective ``max_depth``.

    Returns:
        The count, int (at most :data:`_COUNT_CEILING`).
    """
    counted: dict[tuple[str, int], int] = {}  # (skill, depth it runs at) → its count
    subchain_kinds = kinds.NODE_KINDS.subchain_kinds
    templates_of: dict[str, set[str]] = {}

    def calls(chain: Sequence[ChainNode], depth: int, name: str) -> tuple[int, list[Any]]:
        """Nodes that run at ``depth`` and the (skill, depth + 1) sub-chains they start."""
        templates = templates_of.get(name)
        if templates is None:
            templates = {n.map_node for n in chain if n.map_node}  # a validated chain's maps
            if name:
                templates_of[name] = templates
        own = 0
        subs: list[tuple[str, int]] = []
        for node in chain:
            if node.node_id in templates:
                continue
            own += 1
            if node.kind in subchain_kinds and node.name in skills and depth < max_depth:
                subs.append((node.name, depth + 1))
        return own, subs

    top_own, top_subs = calls(nodes, 0, "")
    stack: list[tuple[str, int]] = list(top_subs)
    while stack:
        key = stack[-1]
        if key in counted:
            stack.pop()
            continue
        own, subs = calls(skills[key[0]].nodes, key[1], key[0])
        missing = [sub for sub in subs if sub not in counted]
        if missing:
            stack.extend(missing)
            continue
        stack.pop()
        counted[key] = min(_COUNT_CEILING, own + sum(counted[sub] for sub in subs))
    return min(_COUNT_CEILING, top_own + sum(counted[sub] for sub in top_subs))


def check_total_nodes(
    nodes: Sequence[ChainNode], skills: Mapping[str, Any], limits: SessionLimits
) -> None:
    """Refuse, before it runs, a chain whose declared skills alone would make it run
    more than ``max_total_nodes`` nodes (see :func:`worst_case_node_count`).

    Raises:
        ChainInvalid: code ``chain_limit``, ``details`` ``{ceiling, scope, limit,
            requested, errors}``.
    """
    effective = limits.effective
    if len(nodes) <= effective.max_total_nodes and not skills:
        return
    count = worst_case_node_count(nodes, skills, effective.max_depth)
    err = limits.refusal("max_total_nodes", count)
    if err is None:
        return
    message = (
        f"the chain would run up to {count} nodes, counting its skills' sub-chains at "
        f"every depth (map items not included), over max_total_nodes "
        f"{err.details['limit']} at {err.details['scope']} scope"
    )
    hint = "split the work into smaller chains, or call fewer skills per chain"
    problem = {"code": "chain_limit", "node_id": "", "field": "nodes", "message": message,
               "hint": hint, **err.details}
    raise ChainInvalid(
        message, code="chain_limit", details={**err.details, "errors": [problem]}
    )
