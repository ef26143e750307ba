"""A property of the run store (issue 17, "the event log is the checkpoint"): however the
writes are batched into commits, ``frames(after=k)`` pages through exactly the appended
frames with ``seq > k``, in order."""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio
import anyio.lowlevel
from hypothesis import given, settings
from hypothesis import strategies as st

from a2e_host.store import _writer
from a2e_host.store.sqlite import open_sqlite_store
from tests.support.store import frame, record

RUNS = ("a", "b", "c")

Op = tuple[str, int, int, int]  # (kind, run index, count, frame size)

ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 2), st.integers(1, 40),
                  st.sampled_from([10, 150, 3000])),
        st.tuples(st.just("flush"), st.just(0), st.just(0), st.just(0)),
        st.tuples(st.just("yield"), st.just(0), st.just(0), st.just(0)),
    ),
    max_size=20,
)


@settings(max_examples=30, deadline=None)
@given(ops=ops, commit_delay=st.sampled_from([0.0, 0.0005]),
       max_batch=st.sampled_from([1, 7, _writer.MAX_BATCH]), after=st.integers(0, 300),
       page=st.integers(1, 60))
def test_frames_after_k_are_exactly_the_later_appended_frames_in_order(
        ops: list[Op], commit_delay: float, max_batch: int, after: int, page: int) -> None:
    saved = _writer.MAX_BATCH
    _writer.MAX_BATCH = max_batch
    try:
        with tempfile.TemporaryDirectory() as folder:
            anyio.run(_check, str(Path(folder) / "runs.db"), ops, commit_delay, after, page,
                      backend="asyncio")
    finally:
        _writer.MAX_BATCH = saved


async def _check(path: str, ops: list[Op], commit_delay: float, after: int, page: int
                 ) -> None:
    store = await open_sqlite_store(path, commit_delay=commit_delay, blob_threshold=100)
    appended: dict[str, list[tuple[int, bytes]]] = {run_id: [] for run_id in RUNS}
    try:
        for run_id in RUNS:
            store.create(record(run_id))
        for kind, run, count, size in ops:
            if kind == "append":
                run_id = RUNS[run]
                for _ in range(count):
                    stored = frame(run_id, len(appended[run_id]) + 1, size,
                                   output=b"o" * size if size > 100 else None)
                    store.append(run_id, stored)
                    appended[run_id].append((stored.seq, stored.frame))
            elif kind == "flush":
                await store.flush()
            else:
                await anyio.lowlevel.checkpoint()
        await store.flush()
        for run_id in RUNS:
            got: list[tuple[int, bytes]] = []
            last = after
            while chunk := await store.frames(run_id, after=last, limit=page):
                assert len(chunk) <= page
                got += [(f.seq, f.frame) for f in chunk]
                last = chunk[-1].seq
            assert got == [(seq, data) for seq, data in appended[run_id] if seq > after]
    finally:
        await store.aclose()
