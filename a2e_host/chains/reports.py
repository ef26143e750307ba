"""Where a running tool's reports go: :class:`NodeReports`, one per node execution.

Layer: runtime (anyio: a report made in a tool's worker thread is handed to the event
loop). Source: PROTOCOL.md §5 (a ``chain/event`` with ``kind: "progress"``), §11 (a
direct call's ``tool/event``).

A tool reports through :meth:`~a2e_host.chains.nodes.NodeContext.report`, which checks
the kind and the size of the data, then calls the node's sink: this object. It counts
the reports against :data:`~a2e_host.chains.nodes.MAX_REPORTS` on the event loop (so
the count needs no lock), drops every report once :meth:`close` was called (the node's
terminal event is on its way), and sends the rest as ``chain/event`` frames of kind
``progress`` (phase ``start``, ``data: {"report": kind, …}``) through the run's event
stream (a direct call's plugin turns them into ``tool/event`` frames).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import anyio.from_thread

from .nodes import MAX_REPORTS

_DROPPED_LOCK = threading.Lock()

if TYPE_CHECKING:
    from .events import EventStream

__all__ = ["AttemptReports", "NodeReports"]


class NodeReports:
    """A node execution's report sink (a :data:`~a2e_host.chains.nodes.ReportSink`).

    Args:
        events: the run's event stream.
        node_id: the node's display id (``t[3]``, ``outer/inner``).

    Attributes:
        sent: reports delivered.
        dropped: reports refused (over :data:`MAX_REPORTS`, or after :meth:`close`).
        closed: whether :meth:`close` was called.
    """

    __slots__ = ("_events", "_node_id", "_thread", "sent", "dropped", "closed")

    def __init__(self, events: EventStream, node_id: str) -> None:
        self._events = events
        self._node_id = node_id
        self._thread = threading.get_ident()
        self.sent = 0
        self.dropped = 0
        self.closed = False

    def __call__(self, kind: str, data: dict[str, Any]) -> bool:
        """Deliver one report; from a worker thread of anyio's, through the event loop
        (a thread the tool started itself cannot reach the loop: its report is dropped).
        Returns whether it was delivered."""
        return self.deliver(kind, data, None)

    def attempt(self) -> AttemptReports:
        """A sink for one attempt of the node: it counts against this node execution's
        cap and drops everything once the attempt ended (:meth:`AttemptReports.close`),
        so an abandoned attempt's worker thread cannot report during the retry."""
        return AttemptReports(self)

    def deliver(self, kind: str, data: dict[str, Any], gate: AttemptReports | None) -> bool:
        """:meth:`__call__`, also dropped once ``gate`` (an attempt's sink) is closed."""
        if threading.get_ident() == self._thread:
            return self._send(kind, data, gate)
        if self._shut(gate) or self.sent >= MAX_REPORTS:  # dropped without a hop
            self._count_dropped()
            return False
        failed: list[BaseException] = []

        def on_loop() -> bool:
            try:
                return self._send(kind, data, gate)
            except BaseException as exc:  # noqa: BLE001 — re-raised below, not a lost hop
                failed.append(exc)
                return False

        try:
            delivered = anyio.from_thread.run_sync(on_loop)
        except RuntimeError:  # not an anyio worker thread, or the loop is gone
            self._count_dropped()
            return False
        if failed:  # the send itself failed (a host bug): not a dropped report
            raise failed[0]
        return bool(delivered)

    def _count_dropped(self) -> None:
        with _DROPPED_LOCK:  # worker threads count beside the loop
            self.dropped += 1

    def close(self) -> None:
        """The node ended: every later report is dropped."""
        self.closed = True

    def _shut(self, gate: AttemptReports | None) -> bool:
        return self.closed or (gate is not None and gate.closed)

    def _send(self, kind: str, data: dict[str, Any], gate: AttemptReports | None) -> bool:
        if self._shut(gate) or self.sent >= MAX_REPORTS:
            self._count_dropped()
            return False
        self.sent += 1
        payload = {"report": kind}
        payload.update(data)
        payload["report"] = kind
        self._events.send_data(self._node_id, "start", payload, kind="progress")
        return True


class AttemptReports:
    """One attempt's report sink (:meth:`NodeReports.attempt`): the node's, until
    :meth:`close`.

    Attributes:
        closed: whether the attempt ended.
    """

    __slots__ = ("_node", "closed")

    def __init__(self, node: NodeReports) -> None:
        self._node = node
        self.closed = False

    def __call__(self, kind: str, data: dict[str, Any]) -> bool:
        """Deliver one report as :meth:`NodeReports.__call__` does, unless the attempt
        ended (then it is dropped and counted on the node)."""
        return self._node.deliver(kind, data, self)

    def close(self) -> None:
        """The attempt ended: every later report of it is dropped."""
        self.closed = True
