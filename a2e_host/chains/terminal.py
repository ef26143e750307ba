"""A started node's (or map item's) ``error`` event, sent once.

Layer: runtime (plain code called on the event loop). Source: PROTOCOL.md §5 (exactly one
terminal event per started node; a node with recovery fields' carries its report as
``data``, §5 Recovery; a resumed one ``resumed: true``, §5 Resume).

It sees the run through :class:`~a2e_host.chains.run_state.RunState` and must not import
the scheduler (which imports it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..errors import ChainFailure
    from .run_state import RunState

__all__ = ["send_terminal_error"]


def send_terminal_error(run: RunState, shown: str, message: str,
                        failure: ChainFailure | None = None) -> None:
    """Send the ``error`` event of the started node or item ``shown``, unless its terminal
    event was sent already or the run is closed.

    Args:
        run: the run it belongs to (its ``running``, ``reports``, ``events``, config).
        shown: its display id.
        message: the event's ``error`` text.
        failure: what a durable run keeps with the event, or None.
    """
    running = run.running
    if running.get(shown) is False and not run.closed:
        running[shown] = True
        report = run.reports.pop(shown, None) if run.reports else None
        resume = run.config.resume
        if resume is not None and shown in resume.resumed:
            data = {**(report.data(False) if report is not None else {}), "resumed": True}
            run.events.send_data(shown, "error", data, error=message, failure=failure)
        elif report is None:
            run.events.send(shown, "error", error=message, failure=failure)
        else:
            run.events.send_data(shown, "error", report.data(False), error=message,
                                 failure=failure)
