"""Durable runs in process for the resume tests: a log kept as a durable sink keeps it,
and runs resumed from a prefix of it (PROTOCOL.md §5 Resume). Every run is bounded."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import anyio
import msgspec

from a2e_host.chains.messages import ChainEvent, ChainResponse, chain_codec
from a2e_host.chains.nodes import Executor
from a2e_host.chains.resume import Resumption, checkpoint_of, read_log
from a2e_host.chains.run_state import SubchainPlanner
from a2e_host.chains.scheduler import ChainRunner
from a2e_host.chains.validation import ChainPlan
from a2e_host.codec import encode_message
from a2e_host.errors import ChainFailure
from a2e_host.limits import Limits
from a2e_host.messages import Message
from a2e_host.store import StoredFrame

WAIT = 5.0  # seconds: the bound on every run


class DurableLog:
    """What a durable sink stores of a run: every event as a :class:`StoredFrame`, a
    terminal one with its checkpoint; the response apart."""

    def __init__(self) -> None:
        self.frames: list[StoredFrame] = []
        self.response: ChainResponse | None = None

    def emit(self, message: Message) -> None:
        if isinstance(message, ChainResponse):
            self.response = message
            return
        assert isinstance(message, ChainEvent)
        self.frames.append(StoredFrame(message.seq, message.node_id, message.phase,
                                       encode_message(message), None))

    def checkpoint(self, event: ChainEvent, phase: str, output: Any,
                   failure: ChainFailure | None) -> None:
        self.frames.append(StoredFrame(event.seq, event.node_id, event.phase,
                                       encode_message(event),
                                       checkpoint_of(phase, output, failure)))

    @property
    def events(self) -> list[ChainEvent]:
        return [decode_event(f.frame) for f in self.frames]


def decode_event(frame: bytes) -> ChainEvent:
    message = chain_codec.decode(frame)
    assert isinstance(message, ChainEvent)
    return message


async def run_durable(
    plan: ChainPlan,
    executors: Mapping[str, Executor],
    *,
    prefix: Sequence[StoredFrame] | None = None,
    idempotent: Callable[[str], bool] = lambda name: False,
    declared_skill: Callable[[str], bool] = lambda name: False,
    subchain_planner: SubchainPlanner | None = None,
    limits: Limits | None = None,
    timeout_left: float | None = None,
    run_key: str = "run-1",
) -> DurableLog:
    """Run ``plan`` durably to its response; resumed from the stored frames ``prefix``
    when given (None: a fresh run). Returns the frames it emitted (not the prefix)."""
    log = DurableLog()
    resume = None
    if prefix is not None:
        resume = Resumption(read_log(prefix), idempotent, declared_skill)
    runner = ChainRunner(plan, executors=executors, limits=limits or Limits(), emit=log.emit,
                         checkpoint=log.checkpoint, resume=resume, run_key=run_key,
                         subchain_planner=subchain_planner, timeout_left=timeout_left)
    with anyio.fail_after(WAIT):
        await runner.run_to_response(time.monotonic())
    assert log.response is not None, "every run ends with one chain/resp"
    return log


def check_resumed_stream(events: Iterable[ChainEvent], req_id: str) -> None:
    """PROTOCOL.md §5 across a restart: seq gapless from 1; every node or item with an
    event has exactly one terminal event; at most one ``start``; a skipped node none."""
    events = list(events)
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "seq is gapless"
    assert all(e.req_id == req_id for e in events)
    status = [e for e in events if e.kind == "status"]
    starts = Counter(e.node_id for e in status if e.phase == "start")
    terminals = Counter(e.node_id for e in status if e.phase != "start")
    assert all(n == 1 for n in starts.values()), f"a second start: {starts}"
    assert all(n == 1 for n in terminals.values()), f"two terminal events: {terminals}"
    assert set(starts) <= set(terminals), "every start has its terminal event"
    skipped = {e.node_id for e in status if e.phase == "skip"}
    assert not skipped & set(starts), "a skipped node never started"


def data_of(event: ChainEvent) -> dict[str, Any]:
    """The event's ``data`` as plain values."""
    data: dict[str, Any] = msgspec.to_builtins(event.data)
    return data
