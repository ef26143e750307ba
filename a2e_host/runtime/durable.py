"""The durable sink: a run's frames reach the wire only after the store committed them.

Layer: runtime (anyio). A :class:`DurableSink` is the :class:`~a2e_host.runtime.runs.RunSink`
of a durable run (DURABILITY.md §3.1 "Batching", §3.2). It never awaits the disk per
event: :meth:`DurableSink.send_nowait` encodes the frame and keeps it in memory; the
frames a run emits in one loop tick go to the store as one write
(:meth:`~a2e_host.store.RunStore.append_many`, which only queues it; the store calls
the sink back for it, :meth:`~a2e_host.store.RunStore.defer`); when the store reports
the batch holding them committed (a commit callback, on the loop), the sink sends them
to the attached outbox. So a frame a client has seen is always on
disk, and a host that crashes and resumes never reuses a ``seq`` a client saw.

**Ordering.** Frames reach the outbox in ``seq`` order, none lost, none twice: the store
commits in ticket order and the sink releases frames in the order it made them.

**Outputs and the end.** The engine passes what the store keeps beside the frame as
keywords of :meth:`DurableSink.send_nowait`:

- ``output=`` the encoded output of a terminal node (:attr:`StoredFrame.output
  <a2e_host.store.StoredFrame.output>`), kept even when the wire event carries none
  (``streaming: false``). Pass it only when the frame does not carry the output itself,
  or it is stored twice.
- ``status=`` on the run's last frame (its ``chain/resp``): the frame is then stored
  as the run's response with :meth:`~a2e_host.store.RunStore.finish` (status, last
  ``seq`` = the position before it), not as an event; it still reaches the wire after
  its commit, after every event.

A plain :class:`~a2e_host.plugin.Outbox` caller (``send_nowait(message)``) works
unchanged: every frame is stored as an event with the message's ``node_id`` and
``phase`` when it has them ("" otherwise).

**Attaching behind the live position** (``attach(outbox, after=n)``, ``chain/attach``
with ``since_seq``): the sink subscribes first (frames committed from then on are
counted, not sent), then reads the store page by page (:meth:`RunStore.frames
<a2e_host.store.RunStore.frames>`, waiting for the outbox between pages), sends every
frame with ``seq > n``, and switches to live delivery once it has sent everything
committed — a check made without awaiting, so no frame falls between the two: no gap, no
duplicate. The replay runs in a task: the ``start_soon`` given to the sink, or the
caller's own with :meth:`DurableSink.catch_up`.

**Backpressure.** :meth:`DurableSink.wait_writable` waits while the attached outbox is
over its mark, while the store is :attr:`~a2e_host.store.RunStore.full`, and while this
run's uncommitted frames exceed ``max_uncommitted`` frames or ``max_uncommitted_bytes``.

**A failing store.** When the store breaks, nothing more is stored nor sent as an
event: the attached connection gets one wire ``runtime_error`` for the run's
``req_id``, ``on_store_error`` is called (e.g. to abort the run), and later frames are
dropped (logged once). :meth:`send_nowait` still never raises.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

from ..codec import encode_message
from ..errors import error_message_of, internal_error_message
from ..exceptions import StoreUnavailable
from ..logs import get_logger
from ..messages import Message
from ..store import FrameItem, RunStatus, RunStore, StoreError
from .replay import send_page
from .runs import Append, FrameOutbox, RunSink

__all__ = ["DurableSink", "GROUP_FRAMES"]

GROUP_FRAMES = 2048
"""Frames a run emits in one loop tick that the sink writes as one group at most: a
run that emits many without yielding (a map's items whose tools return at once) has
them committed while it goes on, not only when it stops at ``max_uncommitted`` (half
of its default). Smaller groups wake the writer thread more often, and each wake is a
take of the interpreter lock from the busy loop: bench c ran 1.30× its in-memory time
with 512, 1.21× with 2,048 (DECISIONS.md "Durable sink")."""

Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], None]
"""``start_soon(fn)``: run ``fn()`` in a task that outlives the call."""


class DurableSink(RunSink):
    """A durable run's sink: frames are stored first and sent once committed.

    Args:
        store: the run store (the run's row is created already, or queued before the
            first frame).
        run_id: the run whose frames these are.
        req_id: the request it serves (the ``req_id`` of the error sent when the store
            fails).
        capability: named in that error.
        position: the frames this run emitted before (a resumed run: its ``last_seq``);
            the next frame is ``position + 1``.
        start_soon: spawns the replay task of an :meth:`attach` behind the live
            position; None: such an attach raises and callers use :meth:`catch_up`.
        max_uncommitted: frames emitted and not yet committed above which
            :meth:`wait_writable` waits (> 0).
        max_uncommitted_bytes: their bytes, likewise (> 0).
        page_size: frames read per store call while replaying.
        on_store_error: called once with the cause when the store breaks.
        append: like :class:`RunSink`'s (called with every frame before it is stored).

    Attributes:
        position: frames emitted (stored or queued), as :class:`RunSink`'s.
        committed_position: the highest position the store committed.
        delivered: the last position sent to the attached outbox.
        live: attached and caught up (committed frames go straight to the outbox).
    """

    __slots__ = ("store", "run_id", "req_id", "capability", "committed_position",
                 "delivered", "live", "max_uncommitted", "max_uncommitted_bytes",
                 "page_size", "_frames", "_tickets", "_ends", "_group", "_group_bytes",
                 "_pending_bytes", "_unsubscribe", "_gen", "_final", "_start_soon",
                 "_on_store_error", "_failed", "_drained", "_waiters", "_log")

    def __init__(
        self,
        store: RunStore,
        run_id: str,
        *,
        req_id: str = "",
        capability: str = "",
        position: int = 0,
        start_soon: Spawn | None = None,
        max_uncommitted: int = 4096,
        max_uncommitted_bytes: int = 8 * 1024 * 1024,
        page_size: int = 256,
        on_store_error: Callable[[BaseException], None] | None = None,
        append: Append | None = None,
    ) -> None:
        if max_uncommitted <= 0 or max_uncommitted_bytes <= 0 or page_size <= 0:
            raise ValueError("max_uncommitted, max_uncommitted_bytes and page_size must be > 0")
        super().__init__(append)
        self.store = store
        self.run_id = run_id
        self.req_id = req_id
        self.capability = capability
        self.position = position
        self.committed_position = position
        self.delivered = position
        self.live = False
        self.max_uncommitted = max_uncommitted
        self.max_uncommitted_bytes = max_uncommitted_bytes
        self.page_size = page_size
        # frames emitted and not yet committed: the first is at committed_position + 1
        # (positions are consecutive). The last ones, not yet given to the store, are
        # in _group as (node_id, phase, frame, output); the others were written in
        # groups, the store's ticket and last position of each in _tickets and _ends.
        # Tickets increase, so a commit report finds the groups it covers by bisection
        # and cuts their frames off in one slice
        self._frames: list[bytes] = []
        self._group: list[FrameItem] = []
        self._group_bytes = 0  # the group's output bytes (its frames' are counted at flush)
        self._tickets: list[int] = []
        self._ends: list[int] = []
        self._pending_bytes = 0
        self._unsubscribe: Callable[[], None] | None = None
        self._gen = 0
        self._final = 0  # the position of the response frame, 0: not sent yet
        self._start_soon = start_soon
        self._on_store_error = on_store_error
        self._failed = False
        self._drained: anyio.Event | None = None
        # tasks waiting in committed(): one future each, woken by the next commit report
        # (a bare future: a map's items each wait here once, so this is paid per item)
        self._waiters: list[asyncio.Future[None]] = []
        self._log = get_logger().bind(run_id=run_id, req_id=req_id)

    @property
    def uncommitted(self) -> int:
        """Frames emitted and not yet committed."""
        return len(self._frames)

    # ── producing ───────────────────────────────────────────────────────────

    def send_nowait(self, message: Message, *, output: bytes | None = None,
                    status: RunStatus | None = None) -> None:
        """Emit one message: encoded, counted, queued in the store, and sent to the
        attached outbox once committed. Never blocks, never raises for the store.

        Args:
            message: the frame (a ``chain/event``: its ``node_id`` and ``phase`` are
                stored with it).
            output: the encoded output of a terminal node, kept beside the frame.
            status: set on the run's last frame (``chain/resp``): stored as the run's
                response with this outcome (see the module docstring).
        """
        frame = encode_message(message)
        self.position += 1
        position = self.position
        if self.append is not None:
            self.append(position, frame)
        if self._failed:
            return
        if status is None:
            # paid on every event of a durable run: no call that can be spared
            group = self._group
            if not group:
                self.store.defer(self._flush)
            event: Any = message
            try:
                group.append((event.node_id or "", event.phase or "", frame, output))
            except AttributeError:  # a frame about no node
                group.append(("", "", frame, output))
            self._frames.append(frame)
            self._pending_bytes += len(frame)
            if output is not None:
                self._group_bytes += len(output)
            if len(group) >= GROUP_FRAMES:  # a run that emits on without yielding
                self._flush(now=True)
        else:
            self._flush()  # the run's frames are queued before its end
            if self._failed:
                return
            try:
                ticket = self.store.finish(self.run_id, status, frame, position - 1)
            except StoreError as exc:
                self._store_failed(exc)
                return
            self._final = position
            self._tickets.append(ticket)
            self._ends.append(position)
            self._frames.append(frame)
            self._pending_bytes += len(frame)
        if self._unsubscribe is None:
            self._unsubscribe = self.store.on_commit(self._committed)

    def _flush(self, *, now: bool = False) -> None:
        """Give the store the frames emitted since the last flush, as one write (called
        by the store, :meth:`~a2e_host.store.RunStore.defer`, before the run's end, and
        when :data:`GROUP_FRAMES` are waiting: ``now``, the writer is woken at once, not
        at the end of the loop tick, so it commits while the run goes on emitting)."""
        group = self._group
        if not group or self._failed:
            return
        self._group = []
        count = len(group)
        nbytes = self._group_bytes + sum(map(len, self._frames[-count:]))
        self._group_bytes = 0
        first = len(self._frames) - count + self.committed_position + 1
        try:
            ticket = self.store.append_many(self.run_id, first, group, nbytes, now=now)
        except StoreError as exc:
            self._store_failed(exc)
            return
        self._tickets.append(ticket)
        self._ends.append(first + count - 1)

    def _over(self) -> bool:
        return (len(self._frames) > self.max_uncommitted
                or self._pending_bytes > self.max_uncommitted_bytes)

    async def wait_writable(self) -> None:
        """Wait while the attached outbox is full, the store is full, or this run's
        uncommitted frames are over their ceilings (at once when the store broke)."""
        outbox = self._outbox
        if ((outbox is None or not outbox.full) and not self.store.full
                and len(self._frames) <= self.max_uncommitted
                and self._pending_bytes <= self.max_uncommitted_bytes):
            return  # the usual case, asked before every node: no loop, no call
        while not self._failed:
            outbox = self._outbox
            if outbox is not None and outbox.full:
                await outbox.wait_writable()
            elif self.store.full:
                try:
                    await self.store.wait_writable()
                except StoreError:
                    return
            elif self._over():
                if self._drained is None:
                    self._drained = anyio.Event()
                await self._drained.wait()
            else:
                return

    async def committed(self) -> None:
        """Wait until every frame emitted so far is committed (at once when it is).

        Raises:
            StoreError: the store broke before they were (they never will be).
        """
        target = self.position
        while self.committed_position < target:
            if self._failed:
                raise StoreError(f"the run store failed before frame {target} of run "
                                 f"{self.run_id!r} was stored")
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    # ── commits ─────────────────────────────────────────────────────────────

    def _committed(self, committed: int) -> None:
        """The store committed every ticket up to ``committed`` (on the loop)."""
        error = self.store.error
        if error is not None:
            self._store_failed(error)
            return
        tickets, frames = self._tickets, self._frames
        if not tickets or tickets[0] > committed:
            done: list[bytes] = []
        elif tickets[-1] <= committed and not self._group:  # all of them at once
            done, self._frames = frames, []
            tickets.clear()
            self._ends.clear()
            self._pending_bytes = 0
        else:  # a prefix: the frames emitted while the batch was written wait
            count = bisect_right(tickets, committed)
            cut = self._ends[count - 1] - self.committed_position
            done = frames[:cut]
            del frames[:cut]
            del tickets[:count]
            del self._ends[:count]
            self._pending_bytes -= sum(map(len, done))
        if done:
            first = self.committed_position + 1
            self.committed_position += len(done)
            outbox = self._outbox if self.live else None
            if outbox is not None and self.delivered < self.committed_position:
                send = outbox.send_frame_nowait
                skip = self.delivered + 1 - first  # frames a replay sent already
                for frame in done if skip <= 0 else done[skip:]:
                    send(frame)
                self.delivered = self.committed_position
        if not self._frames:
            self._pending_bytes = 0
            unsubscribe, self._unsubscribe = self._unsubscribe, None
            if unsubscribe is not None:
                unsubscribe()
        if self._waiters:
            self._wake_waiters()
        drained = self._drained
        if drained is not None and not self._over():
            self._drained = None
            drained.set()

    def _wake_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():  # a cancelled waiter's task is gone already
                waiter.set_result(None)

    def lost(self, error: BaseException) -> None:
        """The run is no longer this host's to write (a replica sharing the store took
        it over): as when the store fails, for this run only — nothing more is stored
        or sent (frames not yet committed never reach the wire), ``on_store_error`` is
        called — but the attached connection's one error is ``error``'s own (a
        :class:`~a2e_host.exceptions.RemoteProtocolError` says what happened and how to
        go on). Nothing when the sink had failed already (its one error was sent)."""
        if self._failed:
            return
        outbox, self._outbox = self._outbox, None
        self._store_failed(error, taken_over=True)
        self._outbox = outbox
        if outbox is not None:
            outbox.send_frame_nowait(encode_message(error_message_of(
                error, req_id=self.req_id, log=self._log, capability_name=self.capability)))

    def _store_failed(self, error: BaseException, *, taken_over: bool = False) -> None:
        if self._failed:
            return
        self._failed = True
        if taken_over:
            self._log.warning("the run was taken over by another replica: its frames are "
                              "no longer stored or sent here", lost=len(self._frames))
        else:
            self._log.error("the run store failed: the run's frames are no longer stored "
                            "or sent", error=str(error), lost=len(self._frames))
        self._tickets.clear()
        self._ends.clear()
        self._group = []
        self._group_bytes = 0
        self._frames.clear()
        self._pending_bytes = 0
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()
        outbox = self._outbox
        if outbox is not None:  # one sentence: what failed, what becomes of the run
            outbox.send_frame_nowait(encode_message(error_message_of(StoreUnavailable(
                f"the run store failed ({error}) while durable run {self.run_id!r} ran: "
                "nothing more of it is stored or sent here; it resumes when a host (or "
                "another replica) takes the store over; attach to it then with the last "
                "seq you have"), req_id=self.req_id, log=self._log,
                capability_name=self.capability)))
        if self._drained is not None:
            self._drained.set()
        self._drained = None
        self._wake_waiters()
        if self._on_store_error is not None:
            try:
                self._on_store_error(error)
            except Exception as exc:
                self._log.error("on_store_error failed", exc_info=exc)

    # ── connections ─────────────────────────────────────────────────────────

    def attach(self, outbox: FrameOutbox, *, after: int | None = None) -> None:
        """Send the frames after position ``after`` to ``outbox``: frames committed
        already are replayed from the store (in a task of ``start_soon``), then live.

        Args:
            outbox: the attaching connection's outbox.
            after: the last position the attaching side has; None: only frames emitted
                from now on.

        Raises:
            RuntimeError: another outbox is attached.
            ValueError: ``after`` is negative or beyond :attr:`position`, or a replay is
                needed and the sink has no ``start_soon`` (use :meth:`catch_up`).
        """
        self._attach(outbox, after)
        if not self.live:
            start_soon = self._start_soon
            if start_soon is None:
                self.detach()
                raise ValueError(
                    f"frames after position {after} must be replayed from the store; "
                    "give the sink a start_soon, or attach with catch_up()")
            gen = self._gen
            start_soon(lambda: self._replay(outbox, gen))

    async def catch_up(self, outbox: FrameOutbox, *, after: int | None = None) -> None:
        """Attach ``outbox`` like :meth:`attach`, replaying in the calling task; returns
        once live (or detached meanwhile). Cancelled mid-replay, it detaches.

        Raises:
            RuntimeError / ValueError: as :meth:`attach`.
            StoreError: the store failed while replaying (then detached).
        """
        self._attach(outbox, after)
        if not self.live:
            await self._replay(outbox, self._gen, raise_errors=True)

    def _attach(self, outbox: FrameOutbox, after: int | None) -> None:
        if self._outbox is not None:
            raise RuntimeError("the run is attached to another connection; detach it first")
        if after is None:
            after = self.position
        if not 0 <= after <= self.position:
            raise ValueError(f"position {after} is beyond the run's frames (it is at "
                             f"{self.position}); attach with after <= {self.position}")
        self._outbox = outbox
        self._gen += 1
        self.delivered = after
        self.live = after >= self.committed_position
        if self.live and self._failed:
            outbox.send_frame_nowait(encode_message(internal_error_message(
                req_id=self.req_id, capability_name=self.capability)))

    def detach(self) -> None:
        """Stop sending frames anywhere (they are still stored); a replay under way stops."""
        self._outbox = None
        self.live = False
        self._gen += 1

    async def _replay(self, outbox: FrameOutbox, gen: int, *, raise_errors: bool = False
                      ) -> None:
        """Send committed frames after :attr:`delivered` from the store until caught up,
        then go live; stops when the attach it serves is gone."""
        done = False
        try:
            while self._gen == gen:
                if self.delivered >= self.committed_position:
                    self.live = True  # no await since the check: nothing falls between
                    done = True
                    return
                if self.delivered + 1 == self._final:
                    record = await self.store.get(self.run_id)
                    if self._gen != gen:
                        return
                    if record is None or record.response is None:
                        raise StoreError(f"the response of run {self.run_id!r} is not stored")
                    outbox.send_frame_nowait(record.response)
                    self.delivered = self._final
                    continue
                limit = min(self.page_size, self.committed_position - self.delivered)
                page = await self.store.frames(self.run_id, after=self.delivered, limit=limit)
                if self._gen != gen:
                    return
                if not page:
                    raise StoreError(f"the stored log of run {self.run_id!r} ends at seq "
                                     f"{self.delivered}, before the committed "
                                     f"{self.committed_position}")
                self.delivered = send_page(page, self.delivered, outbox, self.run_id)
                await outbox.wait_writable()
        except StoreError as exc:
            self._log.error("replaying the run's frames failed", error=str(exc))
            if self._gen == gen:
                outbox.send_frame_nowait(encode_message(internal_error_message(
                    req_id=self.req_id, capability_name=self.capability)))
            if raise_errors:
                raise
        finally:
            if not done and self._gen == gen:
                self.detach()
