"""Sub-chains: a ``skill`` node running its declared chain inside the current one.

Layer: runtime (anyio). Source: PROTOCOL.md §5 (skill inner events as
``<outer>/<inner>``), §6 (``max_depth``; the request's budgets are shared).

A sub-chain is a run nested in the run of its skill node
(:meth:`~a2e_host.chains.run_state.RunState.nested`): it shares the request's event
stream (one gapless ``seq``), its budgets and its configuration, runs under the parent's
deadline, and ends when the parent does. Only its final output outlives it (kept as the
skill node's): the output bytes its nodes kept are given back when it ends. While it runs,
idle workers elsewhere in the request that hold a spare slot give it back, so the slots
flow to where the work is.

It sees the run through :class:`~a2e_host.chains.run_state.RunState` — the nested run
comes from the run itself — and must not import the scheduler (which imports it).
"""

from __future__ import annotations

from typing import Any

from .messages import ChainNode
from .nodes import SubchainRunner
from .outcome import subchain_error
from .run_state import RunState

__all__ = ["subchain_runner"]


def subchain_runner(run: RunState, shown: str) -> SubchainRunner | None:
    """The ``run_subchain`` a skill node's executor gets (see
    :data:`~a2e_host.chains.nodes.SubchainRunner`), or None when the runner has no
    ``subchain_planner``.

    Args:
        run: the run the skill node belongs to.
        shown: the skill node's display id; inner nodes show as ``<shown>/<inner>``.
    """
    planner = run.config.subchain_planner
    if planner is None:
        return None

    async def run_subchain(
        skill_name: str, nodes: list[ChainNode], entry_node: str, initial_input: dict[str, Any]
    ) -> Any:
        depth = run.depth + 1
        max_depth = run.limits.max_depth
        if depth > max_depth:
            run.budget.refuse(
                "max_depth",
                depth,
                f"skill {skill_name!r} in node {shown!r} would nest {depth} deep, "
                f"over max_depth {max_depth}",
            )
        plan = planner(skill_name, nodes, entry_node, depth)
        child = run.nested(plan, initial_input, prefix=f"{shown}/")
        request = run.budget.request
        request.nested += 1
        request.release_idle_slots()
        try:
            result = await child.run(None)
        finally:
            request.nested -= 1
            # only the final output outlives the sub-chain (kept as this node's)
            request.output_bytes -= child.budget.kept
        if not result.success:
            assert result.error is not None
            raise subchain_error(skill_name, result.error)
        return result.final_output

    return run_subchain
