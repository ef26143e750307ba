"""The readiness state machine of one chain run.

Layer: core (no I/O, no anyio, no clock). The runtime tells :class:`PlanState` what
happened ("node 3 is done and took its true side", "node 5 failed") and it answers which
nodes are now ready and which are skipped. Source: PROTOCOL.md §4 (readiness) and §5
(errors).

Theory of operation. Every node has a counter of distinct predecessors
(``PlanNode.pred_count``). When a node finishes, each of its out-edges either *fires* or
not, according to how it finished and the edge's ``fires`` column in the kind table
(:class:`~a2e_host.chains.kinds.Fires`):

=============================  =====================================================
finished as                    edges that fire
=============================  =====================================================
done                           ``FINISHED`` edges (``next_node``), data edges, and the
                               ``TAKEN`` edges to the side it took (a branch's
                               ``true_node`` / ``false_node``)
failed under ``on_error: skip`` ``FINISHED`` edges, data edges (no side was taken)
failed under a handler          the ``HANDLED`` edge to the handler only
skipped, or failed and aborted  none
=============================  =====================================================

Each target's counter drops by one per finished predecessor. At zero the target is
*decided*: a node with incoming control edges runs if at least one of them fired; a
node with only data edges runs if at least one of those fired; otherwise it is skipped,
which finishes it at once and propagates in turn. Total work is O(nodes + edges); nothing
polls.
"""

from __future__ import annotations

from . import kinds
from .kinds import EdgeKind
from .validation import ChainPlan

__all__ = ["PlanState", "NodeStatus"]

_DATA = int(EdgeKind.DATA)


class NodeStatus:
    """Node states (plain ints for speed). Terminal ones match the context's ``status``."""

    PENDING = 0
    READY = 1
    RUNNING = 2
    DONE = 3
    ERROR = 4
    SKIP = 5

    NAMES = ("pending", "ready", "running", "done", "error", "skip")


class PlanState:
    """Readiness counters for one run of a :class:`~a2e_host.chains.validation.ChainPlan`.

    Map templates are outside this machine: they run per item inside their map node.

    Attributes:
        status: per node index, a :class:`NodeStatus` value.
        activator: per node index, the index of the single node whose ``next_node`` /
            ``true_node`` / ``false_node`` activated it, or -1 (none, or several) —
            the source of the context's ``output`` (PROTOCOL.md §3).
        handled_by: per handler index, the failed node that fired it (last one wins).
        open: declared non-template nodes not yet finished or skipped.
    """

    __slots__ = ("plan", "status", "activator", "handled_by", "open", "_pending", "_fired",
                 "_on_done", "_taken", "_handled", "_control", "_activating")

    def __init__(self, plan: ChainPlan) -> None:
        self.plan = plan
        nodes = plan.nodes
        self._pending = [n.pred_count for n in nodes]
        # bit 1: a control edge fired; bit 2: a data edge fired; bit 4: more than one
        # activating edge (next/true/false) fired; bit 8: an activating edge fired
        self._fired = bytearray(len(nodes))
        self.status = [NodeStatus.PENDING] * len(nodes)
        self.activator = [-1] * len(nodes)
        self.handled_by: dict[int, int] = {}
        self.open = sum(1 for n in nodes if n.template_of is None)
        table = kinds.NODE_KINDS  # which edge bits fire when: the kind table's edges
        self._on_done = table.finished_bits | _DATA
        self._taken = table.taken_bits
        self._handled = table.handled_bits
        self._control = table.control_bits
        self._activating = table.activating_bits

    def start(self) -> list[int]:
        """The roots, in declaration order, marked ready."""
        for i in self.plan.roots:
            self.status[i] = NodeStatus.READY
        return list(self.plan.roots)

    def node_started(self, index: int) -> None:
        """Record that a ready node began running."""
        self.status[index] = NodeStatus.RUNNING

    def node_done(self, index: int, taken: int | None = None) -> tuple[list[int], list[int]]:
        """A node finished successfully.

        Args:
            index: the node.
            taken: for a branch, the index of the side it took (None when the side's
                field was empty).

        Returns:
            ``(ready, skipped)``: node indices now ready to run, and those now skipped
            (in the order they were decided).
        """
        self.status[index] = NodeStatus.DONE
        mask = self._on_done
        if taken is not None:
            for dst, bits in self.plan.nodes[index].out_edges:
                if dst == taken:  # one entry per target: its TAKEN bits are the side taken
                    mask |= bits & self._taken
                    break
        return self._finish(index, mask)

    def node_failed(self, index: int) -> tuple[list[int], list[int]]:
        """A node failed and its ``on_error`` is ``skip`` or a handler (an ``abort``
        ends the chain and is not reported here).

        Returns:
            ``(ready, skipped)`` as for :meth:`node_done`.
        """
        self.status[index] = NodeStatus.ERROR
        node = self.plan.nodes[index]
        if node.on_error == "handler":
            assert node.handler_index is not None
            self.handled_by[node.handler_index] = index
            return self._finish(index, self._handled)
        return self._finish(index, self._on_done)

    def _finish(self, index: int, mask: int) -> tuple[list[int], list[int]]:
        ready: list[int] = []
        skipped: list[int] = []
        self.open -= 1
        nodes = self.plan.nodes
        pending = self._pending
        fired = self._fired
        status = self.status
        control, activating = self._control, self._activating
        work = [(index, mask)]
        while work:
            src, src_mask = work.pop()
            for dst, kinds_in in nodes[src].out_edges:
                hit = kinds_in & src_mask
                if hit & control:
                    bits = fired[dst] | 1
                    if hit & activating:
                        if bits & 8 and self.activator[dst] != src:
                            bits |= 4
                        else:
                            bits |= 8
                            self.activator[dst] = src
                    fired[dst] = bits
                if hit & _DATA:
                    fired[dst] |= 2
                pending[dst] -= 1
                if pending[dst]:
                    continue
                bits = fired[dst]
                if bits & 4:
                    self.activator[dst] = -1
                runs = bits & 1 if nodes[dst].has_control_preds else bits & 2
                if runs:
                    status[dst] = NodeStatus.READY
                    ready.append(dst)
                else:
                    status[dst] = NodeStatus.SKIP
                    self.open -= 1
                    skipped.append(dst)
                    work.append((dst, 0))
        return ready, skipped

    @property
    def finished(self) -> bool:
        """Whether every declared non-template node has finished or been skipped."""
        return self.open == 0
