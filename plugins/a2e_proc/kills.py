"""``proc/kill/req`` for a process (PROTOCOL.md §10): one kill under way per process.

A kill sends its signal, waits the kill grace for the process to exit, then ends what is
left of its tree. A further ``proc/kill/req`` for the process while that runs sends its
signal at once (when not sent already: an agent may escalate to ``SIGKILL``) and is
answered when the kill under way ends; no task of its own. At most
:data:`MAX_WAITING_KILLS` wait per process; past it ``busy``, so a flood of kills to a
process ignoring its signal costs bounded memory and no tasks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from a2e_host.chains.proc_messages import ProcKillRequest, ProcKillResponse
from a2e_host.exceptions import Busy
from a2e_host.plugin import Outbox

from .process import LiveProcess

__all__ = ["MAX_WAITING_KILLS", "KillUnderWay", "begin_kill", "run_kill"]

MAX_WAITING_KILLS = 16
"""``proc/kill/req`` for one process answered when the kill under way for it ends; past
it ``busy``."""


@dataclass
class KillUnderWay:
    """The kill of one process under way: the signals sent and the requests it answers."""

    sent: set[int] = field(default_factory=set)
    waiting: list[ProcKillRequest] = field(default_factory=list)


def begin_kill(request: ProcKillRequest, process: LiveProcess, signum: int,
               kills: dict[str, KillUnderWay]) -> bool:
    """Whether ``request`` starts the kill of ``process`` (the caller then runs
    :func:`run_kill`, or drops ``kills[process.proc_id]`` when it cannot); otherwise it
    was queued on the kill under way and its signal sent.

    Raises:
        Busy: :data:`MAX_WAITING_KILLS` requests wait for this process's kill already.
    """
    under_way = kills.get(process.proc_id)
    if under_way is None:
        kills[process.proc_id] = KillUnderWay(sent={signum})
        return True
    if len(under_way.waiting) >= MAX_WAITING_KILLS:
        raise Busy(
            f"{len(under_way.waiting)} proc/kill/req for process {process.proc_id!r} wait "
            "for its kill under way already; wait for a proc/kill/resp before sending more"
        )
    if signum not in under_way.sent:
        under_way.sent.add(signum)
        process.signal(signum)
    under_way.waiting.append(request)
    return False


async def run_kill(request: ProcKillRequest, process: LiveProcess, signum: int,
                   kills: dict[str, KillUnderWay], outbox: Outbox) -> None:
    """Kill ``process`` with ``signum`` (bounded: see :meth:`LiveProcess.kill`), then
    answer ``request`` and every request queued on it, each once."""
    try:
        await process.kill(signum)
    finally:
        under_way = kills.pop(process.proc_id, None)
    for answered in (request, *(under_way.waiting if under_way else ())):
        outbox.send_nowait(ProcKillResponse(
            req_id=answered.id, ok=True, state=process.state, proc_id=process.proc_id,
            exit_code=process.exit_code,
        ))
