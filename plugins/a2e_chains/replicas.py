"""Durable chains across host replicas sharing a PostgreSQL run store (PROTOCOL.md §5
Durable runs across replicas; DURABILITY.md §3.4).

With a :class:`~a2e_host.store.shared.SharedRunStore` any replica serves any run, and no
replica calls another:

- **Takeover.** :func:`follow_replicas` hands the store every run it claims from a
  silent replica, to be resumed exactly as after a restart (:mod:`a2e_chains.resume`);
  a run this replica lost to another is stopped here at once, its late frames neither
  stored nor sent (the store fences them); a cancel asked on another replica stops the
  run here, where it runs.
- **Attach to a run another replica runs**: :class:`Tails` follows the store (a NOTIFY
  wake-up per committed batch, a catch-up read by ``seq``, a poll as the fallback): the
  stored frames after ``since_seq``, in order, none twice, then the stored
  ``chain/resp``. Only committed frames are read, so a client never sees a frame a crash
  could take back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import anyio

from a2e_host.chains.messages import ChainAccepted, ChainDetached
from a2e_host.exceptions import StoreUnavailable
from a2e_host.plugin import PluginContext
from a2e_host.runtime.runs import FrameOutbox
from a2e_host.store import RunRecord, RunStatus, StoreError
from a2e_host.store.shared import SharedRunStore

from .durable import DurableRuns, _check_since, check_not_expired

__all__ = ["POLL_SECONDS", "TAILS", "Tails", "follow_replicas", "shared_store"]

POLL_SECONDS = 1.0
"""A tail re-reads the store at least this often (a missed notification costs this)."""

PAGE = 256  # stored frames read per store call


def shared_store(store: Any) -> SharedRunStore | None:
    """``store`` when replicas share it (PostgreSQL), else None."""
    return store if isinstance(store, SharedRunStore) else None


def follow_replicas(durable: DurableRuns, store: SharedRunStore,
                    resume: Callable[[RunRecord], None]) -> None:
    """Take part in the replicas' ownership: resume (``resume(record)``) each run this
    replica takes over, stop each run it lost, stop each run whose cancel was asked
    on another replica."""

    def lost(run_id: str) -> None:
        live = durable.live.get(run_id)
        if live is not None:
            live.sink.lost(StoreUnavailable(
                f"durable run {run_id!r} was taken over by another replica (this one was "
                "silent past the lease); attach to it again, on any replica, with the last "
                "seq you have"))

    def cancelled(run_id: str) -> None:
        live = durable.live.get(run_id)
        if live is not None and not live.ended:
            live.handle.cancel()  # cancel_requested is stored already

    store.on_lost(lost)
    store.on_cancel(cancelled)
    store.on_claimed(resume)


class Tails:
    """The runs this replica streams to its connections from the store (runs another
    replica owns), so ``chain/detach`` can stop one."""

    def __init__(self) -> None:
        self._tails: dict[tuple[int, str], tuple[anyio.CancelScope, list[int]]] = {}

    def attach(self, store: SharedRunStore, record: RunRecord, ctx: PluginContext,
               since_seq: int, attach_id: str) -> None:
        """``chain/accepted``, then the run's committed frames after ``since_seq`` as
        they are stored, then its ``chain/resp``, on this connection (in a task of it).

        Raises:
            BadSinceSeq: ``since_seq`` is negative or past the run's last stored event.
            RunExpired: the run's retention passed.
        """
        check_not_expired(record)
        _check_since(since_seq, record.last_seq, record.run_id)
        ctx.outbox.send_nowait(ChainAccepted(req_id=record.req_id, run_id=record.run_id,
                                             last_seq=record.last_seq, attach_id=attach_id))
        outbox = cast(FrameOutbox, ctx.outbox)
        key = (id(ctx.outbox), record.run_id)
        previous = self._tails.pop(key, None)
        if previous is not None:
            previous[0].cancel()
        scope = anyio.CancelScope()
        sent = [since_seq]
        self._tails[key] = (scope, sent)

        async def follow() -> None:
            try:
                with scope:
                    await tail(store, record.run_id, outbox, sent)
            finally:
                if self._tails.get(key, (None,))[0] is scope:
                    del self._tails[key]

        ctx.start_soon(follow, name=f"tail {record.run_id}")

    def detach(self, ctx: PluginContext, run_id: str, detach_id: str) -> bool:
        """Stop streaming ``run_id`` to this connection (``chain/detached``); False when
        it is not tailed here."""
        found = self._tails.pop((id(ctx.outbox), run_id), None)
        if found is None:
            return False
        scope, sent = found
        scope.cancel()
        ctx.outbox.send_nowait(ChainDetached(req_id=detach_id, run_id=run_id,
                                             last_seq=sent[0]))
        return True


async def tail(store: SharedRunStore, run_id: str, outbox: FrameOutbox, sent: list[int]
               ) -> None:
    """Send ``run_id``'s stored frames after ``sent[0]`` to ``outbox`` as they are
    committed (``sent[0]`` follows the last one sent), then its stored response.

    Raises:
        StoreError: the store failed, the run vanished or expired, or its log has a gap.
    """
    ended = False  # its ending was read: every frame it stored is committed
    with store.watch(run_id) as watch:  # before reading: no commit falls between
        while True:
            page = await store.frames(run_id, after=sent[0], limit=PAGE)
            if page:
                for stored in page:
                    if stored.seq != sent[0] + 1:
                        raise StoreError(f"the stored log of run {run_id!r} has a gap: seq "
                                         f"{sent[0] + 1} is missing")
                    outbox.send_frame_nowait(stored.frame)
                    sent[0] = stored.seq
                await outbox.wait_writable()
                continue
            record = await store.get(run_id)
            if record is None or record.status is RunStatus.EXPIRED:
                raise StoreError(f"durable run {run_id!r} is no longer stored")
            if record.status is not RunStatus.RUNNING:
                # its ending commits with (or after) its last frames: read them, then end
                if record.last_seq > sent[0]:
                    if ended:  # read again after the ending, and still missing
                        raise StoreError(
                            f"the stored log of run {run_id!r} has a gap: it ended at seq "
                            f"{record.last_seq}, but seq {sent[0] + 1} is missing")
                    ended = True
                    continue
                if record.response is not None:
                    outbox.send_frame_nowait(record.response)
                return
            await watch.wait(POLL_SECONDS)


TAILS = Tails()
"""The process's tails (keys hold the connection's outbox id, so hosts in one process
never mix them)."""
