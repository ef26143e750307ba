"""A durable sink releases exactly the frames a commit report covers, in order, even when
the store commits only a prefix of them (the writer took its batch while the run emitted
more) and its tickets interleave with other runs' (PROTOCOL.md §5 Durable runs: a frame
reaches the wire only once committed; no gap, no duplicate)."""

from __future__ import annotations

from collections.abc import Callable

from a2e_host.messages import Message, Pong
from a2e_host.runtime.durable import DurableSink
from a2e_host.store import FrameItem, RunStatus, StoredFrame


class _Store:
    """Queues nothing: hands out tickets with gaps (other runs' writes between), runs the
    deferred flushes when the test ends a loop tick, and reports commits when it says so."""

    error = None
    full = False

    def __init__(self) -> None:
        self.ticket = 0
        self.callbacks: dict[int, Callable[[int], None]] = {}
        self.frames: list[StoredFrame] = []
        self.deferred: list[Callable[[], object]] = []

    def defer(self, flush: Callable[[], object]) -> None:
        self.deferred.append(flush)

    def tick(self) -> None:
        deferred, self.deferred = self.deferred, []
        for flush in deferred:
            flush()

    def append_many(self, run_id: str, first_seq: int, items: list[FrameItem],
                    nbytes: int = -1, *, now: bool = False) -> int:
        self.ticket += 2  # another run's write took the ticket between
        self.frames += [StoredFrame(first_seq + i, *item) for i, item in enumerate(items)]
        return self.ticket

    def on_commit(self, callback: Callable[[int], None]) -> Callable[[], None]:
        key = len(self.callbacks) + 1
        self.callbacks[key] = callback
        return lambda: self.callbacks.pop(key, None)  # type: ignore[func-returns-value]

    def commit(self, ticket: int) -> None:
        for callback in list(self.callbacks.values()):
            callback(ticket)


class _Outbox:
    full = False

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def send_frame_nowait(self, frame: bytes) -> None:
        self.frames.append(frame)

    async def wait_writable(self) -> None:
        return None


def _messages(n: int) -> list[Message]:
    return [Pong(id=f"m{i}") for i in range(1, n + 1)]


def _ids(frames: list[bytes]) -> list[str]:
    return [frame.split(b'"id":"')[1].split(b'"')[0].decode() for frame in frames]


def test_a_commit_of_a_prefix_releases_that_prefix_and_keeps_the_rest() -> None:
    store, outbox = _Store(), _Outbox()
    sink = DurableSink(store, "run")  # type: ignore[arg-type]
    sink.attach(outbox)
    messages = _messages(5)
    for message in messages[:2]:
        sink.send_nowait(message)
    assert store.frames == [] and len(store.deferred) == 1  # one write per tick
    store.tick()  # frames 1-2: ticket 2
    sink.send_nowait(messages[2])
    store.tick()  # frame 3: ticket 4
    for message in messages[3:]:
        sink.send_nowait(message)
    store.tick()  # frames 4-5: ticket 6
    store.commit(3)  # the batch holding tickets up to 3: frames 1 and 2
    assert _ids(outbox.frames) == ["m1", "m2"]
    assert (sink.committed_position, sink.uncommitted, sink.delivered) == (2, 3, 2)
    store.commit(4)
    store.commit(4)  # a report covering nothing new releases nothing
    assert _ids(outbox.frames) == ["m1", "m2", "m3"]
    sink.send_nowait(Pong(id="m6"))  # emitted, not yet given to the store
    store.commit(6)  # everything written; the frame emitted meanwhile waits
    assert _ids(outbox.frames) == ["m1", "m2", "m3", "m4", "m5"]
    assert (sink.committed_position, sink.uncommitted) == (5, 1)
    store.tick()  # frame 6: ticket 8
    store.commit(8)
    assert _ids(outbox.frames) == ["m1", "m2", "m3", "m4", "m5", "m6"]
    assert (sink.committed_position, sink.uncommitted, sink.delivered) == (6, 0, 6)
    assert store.callbacks == {}  # nothing pending: no longer told of commits
    assert [f.seq for f in store.frames] == [1, 2, 3, 4, 5, 6]
    assert [f.frame for f in store.frames] == outbox.frames


def test_the_end_of_a_run_writes_its_frames_first_and_is_released_after_them() -> None:
    store, outbox = _Store(), _Outbox()
    sink = DurableSink(store, "run")  # type: ignore[arg-type]
    sink.attach(outbox)
    finished: list[tuple[int, int]] = []
    store.finish = lambda run_id, status, frame, last: (  # type: ignore[attr-defined]
        finished.append((len(store.frames), last)) or 10)
    for message in _messages(2):
        sink.send_nowait(message)
    sink.send_nowait(Pong(id="end"), status=RunStatus.SUCCEEDED)
    assert finished == [(2, 2)]  # both frames written before the end, its last seq 2
    store.commit(2)  # the frames' write only
    assert _ids(outbox.frames) == ["m1", "m2"]
    store.commit(10)
    assert _ids(outbox.frames) == ["m1", "m2", "end"]
    assert store.deferred == [sink._flush]  # the tick's flush finds nothing left
    store.tick()
    assert store.ticket == 2


def test_frames_an_attach_has_already_are_not_sent_again_when_committed() -> None:
    store, outbox = _Store(), _Outbox()
    sink = DurableSink(store, "run")  # type: ignore[arg-type]
    for message in _messages(3):
        sink.send_nowait(message)
    store.tick()  # frames 1-3: ticket 2
    sink.send_nowait(Pong(id="m4"))
    store.tick()  # frame 4: ticket 4
    sink.attach(outbox, after=2)  # the attaching side has frames 1 and 2
    store.commit(2)  # frames 1..3 committed: only the 3rd is news to it
    assert _ids(outbox.frames) == ["m3"]
    store.commit(4)
    assert _ids(outbox.frames) == ["m3", "m4"]
    assert sink.delivered == sink.committed_position == 4
