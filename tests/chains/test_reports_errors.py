"""A report from a tool's worker thread is dropped (and counted) only when it cannot reach
the event loop; an error raised while sending it on the loop is a host bug and reaches
the tool's thread as it is (PROTOCOL.md §5, §11)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from a2e_host.chains.reports import NodeReports


class BrokenEvents:
    """An event stream whose sending fails."""

    def __init__(self) -> None:
        self.calls = 0

    def send_data(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1
        raise RuntimeError("the event stream broke")


@pytest.mark.asyncio
async def test_an_error_sending_a_report_is_raised_not_counted_as_dropped() -> None:
    events = BrokenEvents()
    reports = NodeReports(events, "t")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="the event stream broke"):
        await anyio.to_thread.run_sync(reports, "log", {"level": "info", "message": "x"})
    assert (events.calls, reports.sent, reports.dropped) == (1, 1, 0)


def test_a_report_from_a_thread_anyio_did_not_start_is_dropped() -> None:
    events = BrokenEvents()
    reports = NodeReports(events, "t")  # type: ignore[arg-type]
    reports._thread = -1  # as if made on a thread other than the loop's
    assert reports("log", {"level": "info", "message": "x"}) is False
    assert (events.calls, reports.sent, reports.dropped) == (0, 0, 1)
