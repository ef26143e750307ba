"""A durable run's frames go to the store as one write per loop tick, and a run that
emits more than :data:`~a2e_host.runtime.durable.GROUP_FRAMES` without yielding has them
written in groups while it goes on (PROTOCOL.md §5 Durable runs: the stored log is the
run's frames, ``seq`` 1, 2, 3 …, exactly as sent). A real SQLite store; each stored
frame's ``seq`` is read from the frame itself, so a group filed under the wrong first
``seq`` fails here."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import msgspec
import pytest

from a2e_host.chains.messages import ChainEvent, ChainResponse, chain_codec
from a2e_host.runtime.durable import GROUP_FRAMES, DurableSink
from a2e_host.store import RunStatus
from a2e_host.store.sqlite import open_sqlite_store
from tests.support.store import RecordingOutbox, record

WAIT = 20  # seconds: the bound on every wait


def _seq_of(frame: bytes) -> int | str:
    message = chain_codec.decode(frame)
    return message.seq if isinstance(message, ChainEvent) else "resp"


@pytest.mark.asyncio
async def test_frames_emitted_without_yielding_are_stored_under_their_own_seq(
        tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    burst = 2 * GROUP_FRAMES + 7  # two groups written mid-tick, seven at the tick's end
    with anyio.fail_after(WAIT):
        store = await open_sqlite_store(path)
        try:
            store.create(record("run1"))
            sink = DurableSink(store, "run1", req_id="q1")
            outbox = RecordingOutbox()
            sink.attach(outbox)
            for seq in range(1, burst + 1):  # one tick: no await between them
                sink.send_nowait(ChainEvent(req_id="q1", seq=seq, node_id=f"n{seq}",
                                            phase="start"))
            assert sink.uncommitted == burst
            # the run, two groups queued (nothing is committed before the loop runs)
            assert store.pending == 3
            await sink.committed()
            for seq in range(burst + 1, burst + 4):  # the next tick: one more group
                sink.send_nowait(ChainEvent(req_id="q1", seq=seq, node_id=f"n{seq}",
                                            phase="done"), output=b'{"o":1}')
            sink.send_nowait(ChainResponse(req_id="q1", success=True),
                             status=RunStatus.SUCCEEDED)
            await sink.committed()
            stored = await store.frames("run1", limit=burst + 10)
        finally:
            await store.aclose()
    last = burst + 3
    assert [f.seq for f in stored] == list(range(1, last + 1))
    assert [_seq_of(f.frame) for f in stored] == list(range(1, last + 1))
    assert [f.node_id for f in stored] == [f"n{seq}" for seq in range(1, last + 1)]
    assert [f.output for f in stored[-3:]] == [b'{"o":1}'] * 3
    assert [_seq_of(frame) for frame in outbox.frames] == [*range(1, last + 1), "resp"]
    with sqlite3.connect(path) as conn:
        spans = conn.execute("SELECT first_seq, last_seq, frames FROM segments "
                             "ORDER BY first_seq").fetchall()
    # every segment's first frame is the seq it is filed under
    for first, end, data in spans:
        items = msgspec.msgpack.decode(data)
        assert len(items) == end - first + 1
        assert _seq_of(items[0][2]) == first
