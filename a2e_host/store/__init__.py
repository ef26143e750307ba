"""The run store: durable records of runs and their event log (docs/DURABILITY, PROTOCOL.md §4).

Layer: the interface is plain code (no anyio, no SQL); backends live in submodules
(:mod:`a2e_host.store.sqlite`, the embedded default). Nothing here knows chains: a run
is a request's encoded bytes, a status, and an ordered log of encoded wire frames.

**The event log is the checkpoint.** Every frame a durable run emits is one
:class:`StoredFrame`, keyed by ``(run_id, seq)``; a terminal node's output is kept with
its frame (:attr:`StoredFrame.output`) even when the wire frame carries none, so a
restarted host folds the log back into the run's state instead of snapshotting it.

**Writes never block and are never awaited per event.** :meth:`RunStore.create`,
:meth:`~RunStore.append`, :meth:`~RunStore.finish` and :meth:`~RunStore.request_cancel`
queue the write and return a *ticket*: an int, strictly increasing per store, in the
order the writes were made. One writer commits everything queued as one transaction
(group commit), in ticket order. A write is durable once its ticket is *committed*:
:attr:`RunStore.committed` is the highest committed ticket (every lower ticket is
committed too), and callbacks registered with :meth:`RunStore.on_commit` are called
with it **on the event loop thread the store was opened on**, once per committed batch
(coalesced: one loop hop per batch, never per write). That is how the loop learns, without
awaiting anything per event, that a frame may go on the wire
(:class:`a2e_host.runtime.durable.DurableSink`).

**Backpressure.** The queue of uncommitted writes has a ceiling
(``max_pending`` writes, ``max_pending_bytes`` bytes): :attr:`RunStore.full` is true above
it and
:meth:`RunStore.wait_writable` waits until it drains below. Writes made while full are
still accepted (a write never blocks and never drops); producers that can produce
without bound wait at safe points, exactly like an outbox.

**Failure.** When a batch cannot be committed (disk full, I/O error, the file removed
under us) the store is *broken*: :attr:`RunStore.error` holds the cause, commit
callbacks are called once more (so waiters can look at ``error``), every later write
and :meth:`~RunStore.flush` raise :class:`StoreError`. Nothing is silently dropped.

Reads are async: they run on a separate connection in a worker thread, so the loop
never blocks on the disk. They see committed writes only.

Open a store with :func:`open_store`; close it with :meth:`RunStore.aclose`, which
commits what is queued first. This module imports no backend (the core and plugins
import it); :func:`open_store` loads the backend it opens.
"""

from __future__ import annotations

import builtins
import enum
import importlib
from collections.abc import Callable, Sequence
from typing import Literal, Protocol, runtime_checkable

import msgspec

from ..exceptions import A2EError

__all__ = [
    "Durability",
    "FrameItem",
    "RunRecord",
    "RunStatus",
    "RunStore",
    "StoreError",
    "StoreVersionError",
    "StoredFrame",
    "TERMINAL_STATUSES",
    "open_store",
]

Durability = Literal["normal", "full"]
"""How hard a commit is: ``normal`` survives a crash of the process (SQLite
``synchronous=NORMAL`` in WAL mode: an OS crash or power loss may drop the last commits,
never corrupt the file); ``full`` also survives an OS crash (``synchronous=FULL``: an
fsync per commit)."""


class RunStatus(enum.StrEnum):
    """Where a run is (DURABILITY.md §3.1). ``running`` until it ends; then exactly one
    of the outcomes; ``expired`` once retention pruned its events."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    BUDGET_EXHAUSTED = "budget_exhausted"
    EXPIRED = "expired"


TERMINAL_STATUSES = frozenset(RunStatus) - {RunStatus.RUNNING, RunStatus.EXPIRED}
"""The outcomes :meth:`RunStore.finish` accepts."""


class RunRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One run, as stored (a row of ``runs``).

    Attributes:
        run_id: the run's id, unique in the store (the host makes it; opaque text).
        principal: who owns it (the authenticated principal of the session that started
            it); attach, list and cancel are decided by it.
        req_id: the ``req_id`` of the request it serves (its frames keep it).
        chain_id: the request's ``chain_id`` ("" when it has none).
        status: where it is (:class:`RunStatus`).
        request: the encoded, validated request (e.g. the ``chain/req`` frame), as sent
            to the engine; ``b""`` once expired.
        plan_hash: hex digest over the request and the schemas it was validated against;
            a restart refuses to resume when it drifted.
        last_seq: the highest ``seq`` stored for it (0: none yet). In a record read from
            the store this counts committed frames even while it runs.
        owner: the host instance that runs it ("" when none).
        epoch: bumped each time another owner takes it over (fencing).
        cancel_requested: a cancel was asked (by any connection of its principal).
        deadline: unix seconds by which it must end (``created + timeout``), None: none.
        created: unix seconds when it was accepted.
        updated: unix seconds of its last status, owner or cancel change.
        response: the encoded final frame (e.g. ``chain/resp``) once finished, else None.
        idempotency_key: the request's key, unique per principal, None: none.
        retention_until: unix seconds after which a finished run may be pruned
            (events and response deleted, status ``expired``); None keeps it. Create
            the run with ``created + retention``: :meth:`RunStore.finish` moves it to
            ``end + retention``, so the window counts from the run's end.
    """

    run_id: str
    principal: str
    req_id: str
    chain_id: str = ""
    status: RunStatus = RunStatus.RUNNING
    request: bytes = b""
    plan_hash: str = ""
    last_seq: int = 0
    owner: str = ""
    epoch: int = 0
    cancel_requested: bool = False
    deadline: float | None = None
    created: float = 0.0
    updated: float = 0.0
    response: bytes | None = None
    idempotency_key: str | None = None
    retention_until: float | None = None


class StoredFrame(msgspec.Struct, frozen=True):
    """One emitted frame of a run (SQLite keeps consecutive frames of a run committed
    together in one ``segments`` row, PostgreSQL one ``events`` row per frame; reads
    return one :class:`StoredFrame` per ``seq`` either way).

    Attributes:
        seq: its position in the run: 1, 2, 3 … gapless (PROTOCOL.md §5).
        node_id: the node it is about ("" for a frame about no node).
        phase: the event's phase (``start``, ``done``, ``skip``, ``error``; "" for
            other frames).
        frame: the encoded wire frame, exactly as sent (or to be sent) to the client.
        output: the encoded output of a terminal node, kept even when the wire frame
            carries none (``streaming: false``, a trimmed event); None when the frame is
            not a node's terminal event or the node has no output.
    """

    seq: int
    node_id: str
    phase: str
    frame: bytes
    output: bytes | None = None


FrameItem = tuple[str, str, bytes, "bytes | None"]
"""One frame of :meth:`RunStore.append_many`: ``(node_id, phase, frame, output)``, the
fields of a :class:`StoredFrame` but its ``seq`` (a plain tuple: one is made per event)."""


class StoreError(A2EError):
    """The run store cannot do what was asked: it is closed, broken by an I/O error
    (see :attr:`RunStore.error`), or a write was refused (the message says which run
    and why). On the wire this is a ``runtime_error`` (our failure, not the peer's)."""


class StoreVersionError(StoreError):
    """The store file was written by a newer a2e-host (its schema version is higher than
    this one knows); open it with that version, or point ``--store`` at another file."""


CommitCallback = Callable[[int], None]
"""``callback(committed)``: the highest committed ticket; called on the loop thread."""


@runtime_checkable
class RunStore(Protocol):
    """A durable store of runs and their frames (DURABILITY.md §3.1).

    Writes return a ticket and never block; see the module docstring for tickets,
    commits, backpressure and failure.

    Attributes:
        owner: this store instance's owner id (written into the runs it creates or claims).
        committed: the highest committed ticket (0: nothing yet).
        pending: writes queued and not yet committed.
        full: ``pending`` is over the ceiling (:meth:`wait_writable` would wait).
        error: why the store is broken, else None.
    """

    @property
    def owner(self) -> str: ...

    @property
    def committed(self) -> int: ...

    @property
    def pending(self) -> int: ...

    @property
    def full(self) -> bool: ...

    @property
    def error(self) -> BaseException | None: ...

    # ── writes: queued, never awaited per event ─────────────────────────────

    def create(self, record: RunRecord) -> int:
        """Queue a new run. Its ``owner`` is replaced by :attr:`owner` when empty.

        A record whose ``run_id``, or ``(principal, idempotency_key)``, is stored already
        is not written (the conflict is logged); use :meth:`create_or_get` when the key may
        be taken.

        Returns:
            The write's ticket.

        Raises:
            StoreError: the store is closed or broken.
        """
        ...

    def append(self, run_id: str, frame: StoredFrame) -> int:
        """Queue one frame of a run. Frames of one run are appended in ``seq`` order; a
        ``seq`` stored already is kept as it was (logged, never duplicated); a frame of a
        run that was never created is dropped (logged). Outputs and frames over the
        store's size cap are stored once by sha256 (``blobs``).

        Returns:
            The write's ticket.

        Raises:
            StoreError: the store is closed or broken.
        """
        ...

    def append_many(self, run_id: str, first_seq: int, items: list[FrameItem],
                    nbytes: int = -1, *, now: bool = False) -> int:
        """Queue consecutive frames of a run as one write: ``items[i]`` is frame
        ``first_seq + i`` (``(node_id, phase, frame, output)``), stored as
        :meth:`append` stores each. The store keeps ``items`` (do not change it after).

        Args:
            nbytes: the frames' and outputs' bytes when the caller counted them (-1:
                counted here).
            now: start writing at once, not at the end of the loop tick (a big group
                made by a producer that does not yield).

        Returns:
            The write's ticket (one for all of them).

        Raises:
            StoreError: the store is closed or broken.
        """
        ...

    def defer(self, flush: Callable[[], object]) -> None:
        """Call ``flush()`` on the loop soon, once: at the end of this loop tick
        (SQLite), or when the writer task next takes its queue (PostgreSQL), and at the
        latest at :meth:`flush` and close. How a producer of many
        small writes (a durable run's events) makes one write per tick of them: it keeps
        its frames, defers once, and appends them all with :meth:`append_many` when
        called. Never raises; an exception of ``flush`` is logged."""
        ...

    def finish(self, run_id: str, status: RunStatus, response: bytes, last_seq: int) -> int:
        """Queue a run's end: its outcome, its encoded final frame (``chain/resp``) and the
        ``seq`` of its last event.

        Raises:
            StoreError: the store is closed or broken.
            ValueError: ``status`` is not a terminal status (:data:`TERMINAL_STATUSES`).
        """
        ...

    def request_cancel(self, run_id: str) -> int:
        """Queue ``cancel_requested = true`` for a run (no effect on a finished one).

        Returns:
            The write's ticket.
        """
        ...

    # ── commits ─────────────────────────────────────────────────────────────

    def on_commit(self, callback: CommitCallback) -> Callable[[], None]:
        """Call ``callback(committed)`` on the loop thread after every committed batch
        (and once when the store breaks or closes).

        Returns:
            A function that unregisters it (idempotent).
        """
        ...

    async def wait_committed(self, ticket: int) -> None:
        """Wait until ``ticket`` is committed.

        Raises:
            StoreError: the store broke or closed before it was committed.
        """
        ...

    async def wait_writable(self) -> None:
        """Wait while more than the ceiling of writes are queued (at once otherwise).

        Raises:
            StoreError: the store is broken or closed.
        """
        ...

    async def flush(self) -> None:
        """Wait until every write queued so far is committed.

        Raises:
            StoreError: the store is closed or broken.
        """
        ...

    # ── awaited writes (one per run, not per event) ─────────────────────────

    async def create_or_get(self, record: RunRecord) -> tuple[RunRecord, bool]:
        """Create the run unless ``(principal, idempotency_key)`` is stored already;
        committed before it returns.

        Returns:
            ``(record, created)``: the stored record (the new one, or the existing run with
            that key) and whether it was created now.

        Raises:
            StoreError: the store is closed or broken, or ``run_id`` is taken by a run
                with another key.
        """
        ...

    async def claim(self, run_id: str) -> RunRecord | None:
        """Take over an unfinished run (after a restart): ``owner`` := :attr:`owner`,
        ``epoch`` + 1; committed before it returns.

        Returns:
            The updated record, or None when the run is unknown or not ``running``.
        """
        ...

    async def prune(self, now: float, *, limit: int = 100) -> int:
        """Expire finished runs whose ``retention_until`` <= ``now`` (unix seconds): delete
        their events, the blobs nothing else refers to and their response; status becomes
        ``expired``. Bounded work: at most ``limit`` runs per call (call again while it
        returns ``limit``).

        Returns:
            How many runs it expired.
        """
        ...

    # ── reads: async, committed data only ───────────────────────────────────

    async def get(self, run_id: str) -> RunRecord | None:
        """The run, or None when unknown."""
        ...

    async def by_idempotency_key(self, principal: str, key: str) -> RunRecord | None:
        """The run ``principal`` started with ``idempotency_key == key``, or None."""
        ...

    async def list(
        self,
        *,
        principal: str | None = None,
        status: RunStatus | Sequence[RunStatus] | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> tuple[builtins.list[RunRecord], str | None]:
        """Runs newest first, keyset-paginated.

        Args:
            principal: only this principal's runs; None: everyone's (operators).
            status: only runs in this status (or any of these); None: all.
            cursor: the ``next_cursor`` of the previous page; None: the first page.
            limit: at most this many records (1–1000).

        Returns:
            ``(records, next_cursor)``; ``next_cursor`` is None on the last page. A page
            never repeats or skips a run that existed when the first page was read.
            Records are listed without their bodies (``request`` ``b""``, ``response``
            None), so a page costs no more than its rows: :meth:`get` has them.

        Raises:
            ValueError: ``cursor`` is not one this store made, or ``limit`` is out of range.
        """
        ...

    async def frames(self, run_id: str, *, after: int = 0, limit: int = 1000
                     ) -> builtins.list[StoredFrame]:
        """A run's stored frames with ``seq > after``, in ``seq`` order, at most ``limit``
        (page through a long log: ``after`` = the last ``seq`` returned)."""
        ...

    async def unfinished(self) -> builtins.list[RunRecord]:
        """Every run whose status is ``running`` (what a restart resumes), oldest first."""
        ...

    async def aclose(self) -> None:
        """Commit what is queued, stop the writer, close the files. Idempotent; later
        writes raise :class:`StoreError`."""
        ...


def backend_of(path: str) -> str:
    """The backend a ``--store`` value names: ``postgresql`` for a ``postgresql://`` or
    ``postgres://`` URL, else ``sqlite`` (a file path)."""
    scheme = path.split("://", 1)[0].lower() if "://" in path else ""
    return "postgresql" if scheme in ("postgresql", "postgres") else "sqlite"


async def open_store(
    path: str,
    *,
    durability: Durability = "normal",
    readonly: bool = False,
    owner: str = "",
    max_pending: int = 65_536,
    max_pending_bytes: int = 64 * 1024 * 1024,
    commit_delay: float = 0.0,
    blob_threshold: int = 4096,
    lease: float = 10.0,
) -> RunStore:
    """Open (creating when absent) the run store at ``path`` on the running event loop.

    Args:
        path: a file path (SQLite; the file and its WAL are created owner-only, 0600),
            or a ``postgresql://`` URL (a :class:`~a2e_host.store.shared.SharedRunStore`,
            migrated at open;
            needs the ``postgres`` extra).
        durability: see :data:`Durability`.
        readonly: open for reading only (e.g. the ``runs`` CLI beside a serving host):
            no writer, no lock, no migration; writes raise :class:`StoreError`.
        owner: this host instance's id; a fresh ``host:pid:random`` when empty.
        max_pending: the ceiling of queued, uncommitted writes (:attr:`RunStore.full`).
        max_pending_bytes: the ceiling of their frame, output and response bytes.
        commit_delay: seconds the writer waits after the first write of a batch so more
            join it (bigger batches, later commits); 0 commits as soon as it can. A
            flush or an awaited write does not wait it out.
        blob_threshold: frames and outputs of more bytes are stored once by sha256.
        lease: PostgreSQL only: seconds a replica may be silent before another takes its
            runs over.

    Returns:
        The open store.

    Raises:
        StoreVersionError: the file was written by a newer a2e-host.
        StoreError: the file cannot be opened, is not a run store, or is locked by
            another host process.
    """
    kind = backend_of(path)
    backend = importlib.import_module(_BACKENDS[kind])
    extra = {"lease": lease} if kind == "postgresql" else {}
    store: RunStore = await backend.open_store(
        path, durability=durability, readonly=readonly, owner=owner,
        max_pending=max_pending, max_pending_bytes=max_pending_bytes,
        commit_delay=commit_delay, blob_threshold=blob_threshold, **extra,
    )
    return store


_BACKENDS = {"sqlite": "a2e_host.store.sqlite", "postgresql": "a2e_host.store.postgres"}
"""Backend name → module with an ``open_store`` coroutine. Imported only when a store is
opened: this interface module stays plain code (plugins and the core import it), and a
backend's dependencies (anyio's threads, a database driver) load with the backend. A
``path`` is SQLite; a ``postgresql://`` URL picks PostgreSQL (:func:`backend_of`)."""
