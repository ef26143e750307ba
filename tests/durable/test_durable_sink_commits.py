"""A durable sink releases exactly the frames a commit report covers, in order, even when
the store commits only a prefix of them (the writer took its batch while the run emitted
more) and its tickets interleave with other runs' (PROTOCOL.md §5 Durable runs: a frame
reaches the wire only once committed; no gap, no duplicate)."""

from __future__ import annotations

from collections.abc import Callable

from a2e_host.messages import Message, Pong
from a2e_host.runtime.durable import DurableSink
from a2e_host.store import StoredFrame


class _Store:
    """Queues nothing: hands out tickets with gaps (other runs' writes between), and
    reports commits when the test says so."""

    error = None
    full = False

    def __init__(self) -> None:
        self.ticket = 0
        self.callbacks: dict[int, Callable[[int], None]] = {}
        self.frames: list[StoredFrame] = []

    def append(self, run_id: str, frame: StoredFrame) -> int:
        self.ticket += 2  # another run's write took the ticket between
        self.frames.append(frame)
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
    for message in _messages(5):  # tickets 2, 4, 6, 8, 10
        sink.send_nowait(message)
    store.commit(5)  # the batch holding tickets up to 5: frames 1 and 2
    assert _ids(outbox.frames) == ["m1", "m2"]
    assert (sink.committed_position, sink.uncommitted, sink.delivered) == (2, 3, 2)
    store.commit(6)
    store.commit(6)  # a report covering nothing new releases nothing
    assert _ids(outbox.frames) == ["m1", "m2", "m3"]
    sink.send_nowait(Pong(id="m6"))  # ticket 12
    store.commit(12)  # everything, the frame emitted meanwhile included
    assert _ids(outbox.frames) == ["m1", "m2", "m3", "m4", "m5", "m6"]
    assert (sink.committed_position, sink.uncommitted, sink.delivered) == (6, 0, 6)
    assert store.callbacks == {}  # nothing pending: no longer told of commits
    assert [f.seq for f in store.frames] == [1, 2, 3, 4, 5, 6]


def test_frames_an_attach_has_already_are_not_sent_again_when_committed() -> None:
    store, outbox = _Store(), _Outbox()
    sink = DurableSink(store, "run")  # type: ignore[arg-type]
    for message in _messages(4):  # tickets 2, 4, 6, 8; none committed yet
        sink.send_nowait(message)
    sink.attach(outbox, after=2)  # the attaching side has frames 1 and 2
    store.commit(6)  # frames 1..3 committed: only the 3rd is news to it
    assert _ids(outbox.frames) == ["m3"]
    store.commit(8)
    assert _ids(outbox.frames) == ["m3", "m4"]
    assert sink.delivered == sink.committed_position == 4
