"""Regression (model test): a durable sink driven through random interleavings of
bursts (around GROUP_FRAMES: frames flushed mid-tick with ``now``), loop ticks (the
deferred flush), commit reports covering any prefix of the tickets handed out (a report
arriving while a group is half built), live attaches and detaches, and the run's end:
every frame is written once under its own ``seq``, and each attached connection gets
exactly the committed frames after its attach point, in order, none twice, none
uncommitted, the response last."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from a2e_host.messages import Pong
from a2e_host.runtime.durable import GROUP_FRAMES, DurableSink
from a2e_host.store import FrameItem, RunStatus


class _Store:
    error = None
    full = False

    def __init__(self) -> None:
        self.ticket = 0
        self.written: list[tuple[int, int]] = []  # (ticket, last position) of each write
        self.seqs: list[int] = []
        self.ids: list[str] = []
        self.callbacks: dict[int, Callable[[int], None]] = {}
        self.deferred: list[Callable[[], object]] = []
        self.committed = 0
        self.nows = 0

    def defer(self, flush: Callable[[], object]) -> None:
        self.deferred.append(flush)

    def tick(self) -> None:
        while self.deferred:
            deferred, self.deferred = self.deferred, []
            for flush in deferred:
                flush()

    def append_many(self, run_id: str, first_seq: int, items: list[FrameItem],
                    nbytes: int = -1, *, now: bool = False) -> int:
        assert items and len(items) <= GROUP_FRAMES
        assert nbytes == sum(len(i[2]) + len(i[3] or b"") for i in items)
        self.nows += now
        self.ticket += 1 + (self.ticket % 3 == 0)  # other runs' tickets in between
        self.seqs += range(first_seq, first_seq + len(items))
        self.ids += [_id_of(item[2]) for item in items]
        self.written.append((self.ticket, first_seq + len(items) - 1))
        return self.ticket

    def finish(self, run_id: str, status: RunStatus, frame: bytes, last: int) -> int:
        assert last == len(self.seqs)  # every event written before the end
        self.ticket += 1
        self.written.append((self.ticket, last + 1))
        return self.ticket

    def on_commit(self, callback: Callable[[int], None]) -> Callable[[], None]:
        key = max(self.callbacks, default=0) + 1
        self.callbacks[key] = callback
        return lambda: self.callbacks.pop(key, None)  # type: ignore[func-returns-value]

    def commit(self, ticket: int) -> None:
        self.committed = max(self.committed, ticket)
        for callback in list(self.callbacks.values()):
            callback(self.committed)

    def committed_position(self) -> int:
        done = [last for ticket, last in self.written if ticket <= self.committed]
        return max(done, default=0)


def _id_of(frame: bytes) -> str:
    return frame.split(b'"id":"')[1].split(b'"')[0].decode()


class _Outbox:
    full = False

    def __init__(self, store: _Store, after: int) -> None:
        self.store = store
        self.after = after
        self.ids: list[str] = []

    def send_frame_nowait(self, frame: bytes) -> None:
        position = self.after + len(self.ids) + 1
        assert position <= self.store.committed_position(), "sent before its commit"
        self.ids.append(_id_of(frame))

    async def wait_writable(self) -> None:
        return None


@pytest.mark.parametrize("seed", range(60))
def test_random_interleavings_of_groups_commits_and_attaches(seed: int) -> None:
    rng = random.Random(seed)
    store = _Store()
    sink = DurableSink(store, "run", max_uncommitted=10**9)  # type: ignore[arg-type]
    outboxes: list[_Outbox] = []
    emitted = 0
    for _ in range(40):
        action = rng.random()
        if action < 0.35:
            count = rng.choice([1, 2, 5, GROUP_FRAMES - 1, GROUP_FRAMES, GROUP_FRAMES + 1,
                                2 * GROUP_FRAMES, 2 * GROUP_FRAMES + 1, rng.randint(1, 1500)])
            for _ in range(count):
                emitted += 1
                output = b"x" * rng.randint(0, 3) if rng.random() < 0.2 else None
                sink.send_nowait(Pong(id=f"m{emitted}"), output=output)
        elif action < 0.55:
            store.tick()
        elif action < 0.8 and store.ticket:
            store.commit(rng.randint(store.committed, store.ticket))
        elif action < 0.9:
            if sink._outbox is None:  # noqa: SLF001 — attach live at the position now
                outboxes.append(_Outbox(store, sink.position))
                sink.attach(outboxes[-1])
        else:
            sink.detach()
    if sink._outbox is None:  # noqa: SLF001
        outboxes.append(_Outbox(store, sink.position))
        sink.attach(outboxes[-1])
    sink.send_nowait(Pong(id="end"), status=RunStatus.SUCCEEDED)
    store.commit(store.ticket)
    store.tick()  # a flush deferred before the end finds nothing
    assert store.seqs == list(range(1, emitted + 1))
    assert store.ids == [f"m{i}" for i in range(1, emitted + 1)]
    assert sink.committed_position == sink.position == emitted + 1 and sink.uncommitted == 0
    assert store.callbacks == {}
    for outbox in outboxes[:-1]:
        # a detached connection got a prefix of what followed its attach point
        assert outbox.ids == [f"m{i}" for i in range(outbox.after + 1,
                                                       outbox.after + 1 + len(outbox.ids))]
    last = outboxes[-1]
    assert last.ids == [*(f"m{i}" for i in range(last.after + 1, emitted + 1)), "end"]
