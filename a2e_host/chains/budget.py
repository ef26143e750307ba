"""What a request may still use: node executions, kept output bytes, spare worker slots.

Layer: runtime (anyio only to let the loop breathe while a large output is measured).
Source: PROTOCOL.md §6 (ceilings, ``chain_limit`` refusals naming their scope).

* :class:`RequestBudget` — one per request, shared by the chain and every sub-chain its
  skills run: node executions (``max_total_nodes``), output bytes kept
  (``max_chain_output_bytes``), and the spare worker / item-worker slots beyond each run's
  own (``max_concurrency``, ``max_map_concurrency``).
* :class:`RunBudget` — one run's view of it: counts its nodes, holds each output to
  ``max_output_bytes`` and counts it as kept, gives kept bytes back, and builds the
  ``chain_limit`` refusal naming the scope whose ceiling refused. An output is measured
  without encoding it (:mod:`a2e_host.sizes`), in slices that let the event loop breathe.
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel

from ..exceptions import ChainLimitExceeded, NodeError
from ..limits import Limits, SessionLimits
from ..sizes import JsonSizer, quick_json_size

__all__ = ["RequestBudget", "RunBudget"]

_SIZE_SLICE = 20_000  # values an output measurement counts before it yields to the loop


class RequestBudget:
    """What one request has used of its chain-wide ceilings (PROTOCOL.md §6), shared by
    the chain and every sub-chain its skills run.

    Attributes:
        nodes: node executions so far (``max_total_nodes``): declared nodes that started,
            at any depth, plus map items started (a map whose items alone would pass the
            ceiling fails before starting any).
        output_bytes: encoded bytes of the outputs the request keeps now
            (``max_chain_output_bytes``).
        spare_workers / spare_items: worker and map item-worker slots free beyond each
            run's own worker and each map's own item worker.
        nested: sub-chain runs alive now.
        idle_borrowed: wake-ups of idle workers holding a spare slot, in any run of the
            request (set when a sub-chain starts, so they give their slots back to it).
    """

    __slots__ = (
        "nodes", "output_bytes", "spare_workers", "spare_items", "nested", "idle_borrowed"
    )

    def __init__(self, limits: Limits | None = None) -> None:
        self.nodes = 0
        self.output_bytes = 0
        limits = limits or Limits()
        self.spare_workers = limits.max_concurrency - 1
        self.spare_items = limits.max_map_concurrency - 1
        self.nested = 0
        self.idle_borrowed: set[anyio.Event] = set()

    def release_idle_slots(self) -> None:
        """Wake every idle worker holding a spare slot: it returns the slot and stops."""
        for wake in self.idle_borrowed:
            wake.set()
        self.idle_borrowed.clear()


class RunBudget:
    """One run's use of its request's :class:`RequestBudget`, under the session's ceilings.

    Attributes:
        scoped: the session's scoped ceilings (refusals name their scope).
        limits: the effective ceilings.
        request: the request's shared budget.
        kept: output bytes this run counted in ``request.output_bytes`` and still keeps
            (a sub-chain's are given back when it ends: only its final output is kept,
            as the skill node's).
    """

    __slots__ = ("scoped", "limits", "request", "kept")

    def __init__(self, scoped: SessionLimits, request: RequestBudget) -> None:
        self.scoped = scoped
        self.limits: Limits = scoped.effective
        self.request = request
        self.kept = 0

    def limit_error(
        self, ceiling: str, requested: int, message: str, node_id: str = ""
    ) -> ChainLimitExceeded | None:
        """The ``chain_limit`` error naming the scope whose ceiling refuses ``requested``
        (PROTOCOL.md §6), or None when it is within the ceiling."""
        err = self.scoped.refusal(ceiling, requested, node_id=node_id)
        if err is None:
            return None
        return ChainLimitExceeded(message, node_id=node_id, details=err.details)

    def refuse(self, ceiling: str, requested: int, message: str, node_id: str = "") -> None:
        """Raise :meth:`limit_error` when ``requested`` is over ``ceiling``."""
        err = self.limit_error(ceiling, requested, message, node_id)
        if err is not None:
            raise err

    def count_nodes(self, count: int, shown: str, node_id: str, *, items: bool = False) -> None:
        """Count ``count`` node executions against ``max_total_nodes``, or refuse them.

        Raises:
            ChainLimitExceeded: ``max_total_nodes``.
        """
        request = self.request
        total = request.nodes + count
        if total > self.limits.max_total_nodes:
            cap = self.limits.max_total_nodes
            what = f"its {count} items" if items else "it"
            self.refuse(
                "max_total_nodes",
                total,
                f"node {shown!r} would bring the node executions of this request (nodes at "
                f"every depth plus map items) to {total} with {what}, over max_total_nodes "
                f"{cap}; split the work into smaller chains",
                node_id=node_id,
            )
        request.nodes = total

    def keep_output(self, output: Any, shown: str, node_id: str) -> int:
        """Hold a small node output to ``max_output_bytes`` and count it as kept by the
        request (``max_chain_output_bytes``); the fast path, on the loop.

        Returns:
            Its encoded size in bytes, or -1 when the output is not small: then await
            :meth:`keep_large_output` instead.

        Raises:
            NodeError: the output is not JSON (a type JSON cannot carry, NaN, Infinity).
            ChainLimitExceeded: over ``max_output_bytes`` or ``max_chain_output_bytes``.
        """
        try:
            quick = quick_json_size(output)
        except (TypeError, ValueError, OverflowError) as exc:
            raise NodeError(f"node {shown!r} returned output that is not JSON: {exc}") from None
        if quick is None:
            return -1
        size, non_finite = quick
        self._checked_size(size, True, non_finite, shown, node_id)
        return size

    async def keep_large_output(self, output: Any, shown: str, node_id: str) -> int:
        """:meth:`keep_output` for any output: counted without encoding it
        (:class:`~a2e_host.sizes.JsonSizer`), in slices between which the event loop runs,
        stopping as soon as the count passes ``max_output_bytes``.

        Returns:
            Its encoded size in bytes.

        Raises:
            NodeError, ChainLimitExceeded: as :meth:`keep_output`.
        """
        sizer = JsonSizer(output, self.limits.max_output_bytes)
        try:
            while not sizer.advance(_SIZE_SLICE):
                await anyio.lowlevel.checkpoint()
        except (TypeError, ValueError, OverflowError) as exc:
            raise NodeError(f"node {shown!r} returned output that is not JSON: {exc}") from None
        self._checked_size(sizer.size, not sizer.over, sizer.non_finite, shown, node_id)
        return sizer.size

    def _checked_size(
        self, size: int, exact: bool, non_finite: bool, shown: str, node_id: str
    ) -> None:
        """Refuse an output over ``max_output_bytes`` or holding NaN / Infinity, else count
        its ``size`` bytes as kept (:meth:`_keep`)."""
        cap = self.limits.max_output_bytes
        if size > cap:
            what = f"{size} bytes" if exact else f"at least {size} bytes"
            self.refuse(
                "max_output_bytes",
                size,
                f"node {shown!r} output is {what}, over max_output_bytes {cap}",
                node_id=node_id,
            )
        if non_finite:
            raise NodeError(
                f"node {shown!r} returned a non-finite number (NaN or Infinity), "
                "which JSON cannot carry"
            )
        self._keep(size, shown, node_id)

    def _keep(self, size: int, shown: str, node_id: str) -> None:
        """Count ``size`` output bytes as kept by the request, or refuse them."""
        request = self.request
        total = request.output_bytes + size
        if total > self.limits.max_chain_output_bytes:
            self.refuse(
                "max_chain_output_bytes",
                total,
                f"node {shown!r} output of {size} bytes would bring the outputs this request "
                f"keeps to {total} bytes, over max_chain_output_bytes "
                f"{self.limits.max_chain_output_bytes}; have nodes return less (pass large "
                "data by reference, e.g. a path)",
                node_id=node_id,
            )
        request.output_bytes = total
        self.kept += size

    def restore(self, nodes: int, size: int) -> None:
        """Count ``nodes`` executions and ``size`` kept output bytes a resumed run's log
        restored (admitted when they ran: never refused now; PROTOCOL.md §5 Resume)."""
        self.request.nodes += nodes
        self.request.output_bytes += size
        self.kept += size

    def release(self, size: int) -> None:
        """Give back ``size`` kept output bytes (outputs this run no longer keeps)."""
        self.request.output_bytes -= size
        self.kept -= size
