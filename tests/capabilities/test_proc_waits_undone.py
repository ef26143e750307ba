"""A request waiting for a process's start is counted only once its task started
(PROTOCOL.md §10, pipelining): when the host cannot start that task (it is shutting
down), the session's waiting count and held bytes stay as they were, so closing the
session does not wait its whole settle time for a request that will never be answered."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from a2e_proc import ProcPlugin
from a2e_proc.session_procs import SessionProcs

from a2e_host.chains.proc_messages import ProcWriteRequest
from a2e_host.config import HostConfig


def refusing_start(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError("the host's task group is closed")


@pytest.mark.asyncio
async def test_a_wait_whose_task_cannot_start_leaves_the_session_settled() -> None:
    plugin = ProcPlugin(HostConfig(allow_proc=("cat",)))
    procs = SessionProcs(starting={"p1": anyio.Event()})
    plugin._sessions["s"] = procs
    session = SimpleNamespace(session_id="s", limits=SimpleNamespace(
        effective=SimpleNamespace(max_message_bytes=1 << 20)))
    ctx = SimpleNamespace(session=session, start_soon=refusing_start)
    request = ProcWriteRequest(proc_id="p1", data="hello")
    with pytest.raises(RuntimeError, match="task group is closed"):
        plugin._waits_for_start("p1", request, ctx)  # type: ignore[arg-type]
    assert (procs.waiting, procs.pending_bytes) == (0, 0)
    procs.resolved("p1")
    assert procs.settled
