"""What an executor of a node kind sees: the contract between the scheduler and the
``tool`` / ``skill`` / ``proc`` executors.

Layer: core (no anyio). An executor is ``async def run(node, args, ctx) -> output``; it
raises :class:`~a2e_host.exceptions.NodeError` (or any exception, which the scheduler turns
into the node's error) and must let cancellation propagate. Source: PROTOCOL.md §5.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from ..limits import SessionLimits
from .messages import ChainNode

__all__ = ["NodeContext", "Executor", "SubchainRunner", "current_node", "idempotency_key"]

SubchainRunner = Callable[[str, list[ChainNode], str, dict[str, Any]], Awaitable[Any]]
"""``run_subchain(skill_name, nodes, entry_node, initial_input) -> final_output``: runs a
declared sub-chain inside the current one (inner events stream as ``<outer>/<inner>``).
Raises :class:`~a2e_host.exceptions.ChainError` when the sub-chain fails or is invalid, and
:class:`~a2e_host.exceptions.ChainLimitExceeded` past ``max_depth``."""


@dataclass(slots=True)
class NodeContext:
    """Per-call facts for an executor.

    Attributes:
        node_id: the node's id as events show it (``t[3]`` for a map item,
            ``outer/inner`` inside a skill).
        chain_id / req_id: the running chain and its request id.
        depth: skill nesting depth, 0 for the top-level chain.
        granted: capabilities granted to the session (``{"chains", "proc", …}``).
        max_output_bytes: the effective output ceiling, bytes.
        limits: the session's scoped ceilings, for an executor that refuses work by a
            ceiling and must name its scope (PROTOCOL.md §6); None outside a session.
        run_subchain: see :data:`SubchainRunner`.
        log: a structlog logger bound with the chain's ids.
        run_key: the run's key (``RunConfig.run_key``: ``"<session_id>/<req_id>"``, a
            durable run's ``run_id``), from which :attr:`idempotency_key` is derived.
    """

    node_id: str
    chain_id: str
    req_id: str
    depth: int = 0
    granted: frozenset[str] = frozenset()
    max_output_bytes: int = 8 * 1024 * 1024
    limits: SessionLimits | None = None
    run_subchain: SubchainRunner | None = None
    log: Any = None
    run_key: str = ""

    @property
    def idempotency_key(self) -> str:
        """sha256 hex of the run key and the node's display id (which holds its skill
        prefix and map item index): the same for every attempt of this node in this run,
        and after the run resumes; a tool passes it on to make a call idempotent."""
        return idempotency_key(self.run_key, self.node_id)


def idempotency_key(run_key: str, node_id: str) -> str:
    """sha256 hex of ``run_key`` and ``node_id`` (see :attr:`NodeContext.idempotency_key`)."""
    return hashlib.sha256(f"{run_key}\n{node_id}".encode()).hexdigest()


current_node: ContextVar[NodeContext | None] = ContextVar("a2e_current_node", default=None)
"""The :class:`NodeContext` of the tool node running in this task (and its worker
threads), None outside one. Set by the ``tool`` executor, so a tool function, which sees
only its input, can bound what it builds by ``max_output_bytes`` before building it."""


class Executor(Protocol):
    """Runs one node of an executable kind (``tool``, ``skill``, ``proc``)."""

    async def __call__(self, node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        """Run ``node`` with its resolved input ``args``; return its JSON-able output."""
        ...
