"""Runs owned by the host, not by a connection: the :class:`RunRegistry`.

Layer: runtime (anyio). A *run* is work a plugin started for one request (a chain), or
any background work (``ctx.start_soon``). Its task lives in the registry's task group,
which the host keeps open for as long as it serves (:meth:`RunRegistry.open`), and
its frames leave through its :class:`RunSink`. A connection *attaches* the sink to its
outbox when it starts the run, and *detaches* it when it closes or drops; what detaching
does to the run is its :class:`DetachPolicy`: :attr:`DetachPolicy.CANCEL` as PROTOCOL.md §4
says a chain ends with its connection, or :attr:`DetachPolicy.KEEP` for a durable run
(§5 Durable runs), which another connection may attach to later.

Listed runs are keyed by ``(session_id, req_id)`` within their capability: a plugin
finds one to cancel it and counts its session's against ``max_parallel``
(:meth:`RunRegistry.view`), and sees only its own capability's, so two capabilities of
one session may each have a request ``x`` in flight. A run leaves
that table when it :meth:`~Run.release`\\ s (a chain does so just before its
``chain/resp``, so the next request is never told ``busy``), or at the latest when its
task ends; the registry forgets it then.

A run's failure stays the run's: what its body raises becomes one wire ``error``
through its sink, and when even that cannot be sent (the ``append`` hook failing) it is
logged; nothing but cancellation leaves a run's task, since the task group is the host's.

The seams for runs that outlive their connection:

- re-attaching: :meth:`Run.attach` takes another connection's outbox, with ``after``
  the position its frames resume from;
- a store: :class:`RunSink` calls ``append(position, frame)`` for every frame *before*
  it is emitted, so a store can keep what a later ``attach(after=…)`` replays.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc

from ..errors import error_message_of, internal_error_message
from ..messages import ErrorMessage
from .cancels import being_cancelled
from .sinks import Append, FrameOutbox, RunSink

__all__ = [
    "Append",
    "DetachPolicy",
    "FrameOutbox",
    "Run",
    "RunKey",
    "RunRegistry",
    "RunSink",
    "SessionRuns",
]

RunKey = tuple[str, str]
"""``(session_id, req_id)``: how a listed run is found, with its capability."""


class DetachPolicy(enum.Enum):
    """What detaching a run's last connection does to it."""

    CANCEL = "cancel"
    """Cancel its task (PROTOCOL.md §4: a chain ends with its connection). The default."""

    KEEP = "keep"
    """Let it run on detached: its frames are counted (and given to ``append``) but go
    nowhere until a connection attaches again."""


class Run:
    """One run: its task, sink and state. Made by :meth:`RunRegistry.start`.

    Attributes:
        key: ``(session_id, req_id)`` when listed, else None.
        req_id: the request it serves (the ``req_id`` of its errors).
        capability: the plugin capability that started it (named in its errors).
        sink: where its frames go (:class:`RunSink`).
        policy: what detaching does to it.
        log: its structlog logger.
        done: set once its task has ended.
        host_stopping: the host is stopping: every run is being cancelled, none asked
            by an agent (a durable run then stores nothing more, to be resumed by the
            next host). An attribute, not a property: durable runs ask it per event.
    """

    __slots__ = ("key", "req_id", "capability", "name", "sink", "policy", "log", "done",
                 "cancel_requested", "host_stopping", "_scope", "_on_cancel", "_on_end",
                 "_registry")

    def __init__(
        self,
        registry: RunRegistry,
        key: RunKey | None,
        *,
        req_id: str,
        capability: str,
        name: str,
        policy: DetachPolicy,
        log: Any,
        append: Append | None,
        sink: RunSink | None = None,
    ) -> None:
        self._registry = registry
        self.key = key
        self.req_id = req_id
        self.capability = capability
        self.name = name
        self.sink = sink if sink is not None else RunSink(append)
        self.policy = policy
        self.log = log
        self.done = anyio.Event()
        self.cancel_requested = False
        self.host_stopping = False
        self._scope = anyio.CancelScope()
        self._on_cancel: Callable[[], None] | None = None
        self._on_end: Callable[[Run], None] | None = None

    # ── asked by the plugin or the agent ────────────────────────────────────

    def cancel(self) -> None:
        """Ask the run to end early (``chain/cancel``): calls the function given to
        :meth:`on_cancel`, now or as soon as one is given. Idempotent."""
        if self.cancel_requested:
            return
        self.cancel_requested = True
        if self._on_cancel is not None:
            self._on_cancel()

    def on_cancel(self, fn: Callable[[], None]) -> None:
        """What :meth:`cancel` does for this run (e.g. ``runner.cancel``); called at
        once when a cancel was asked already."""
        self._on_cancel = fn
        if self.cancel_requested:
            fn()

    def release(self) -> None:
        """Leave the registry's table now (the run no longer counts and can no longer be
        found), before the run's last frame; its task is still tracked. Idempotent."""
        self._registry._unlist(self)

    def abort(self) -> None:
        """Cancel the run's task (its shielded cleanup still runs)."""
        self._scope.cancel()

    # ── connections ─────────────────────────────────────────────────────────

    def attach(
        self,
        outbox: FrameOutbox,
        *,
        after: int | None = None,
        on_end: Callable[[Run], None] | None = None,
        take_over: bool = False,
    ) -> None:
        """Send the run's frames to ``outbox`` (see :meth:`RunSink.attach`); ``on_end``
        is called with the run when its task ends while attached, or when ``take_over``
        moves a :attr:`DetachPolicy.KEEP` run attached elsewhere here (PROTOCOL.md §5
        Durable runs: the newest ``chain/attach`` wins).

        Raises:
            RuntimeError: another connection is attached (and not ``take_over``).
            ValueError: ``after`` asks for frames that are not kept.
        """
        if take_over and self.sink.attached and self.policy is DetachPolicy.KEEP:
            taken, self._on_end = self._on_end, None
            self.sink.detach()
            if taken is not None:
                taken(self)
        self.sink.attach(outbox, after=after)
        self._on_end = on_end

    def detach(self, outbox: FrameOutbox | None = None) -> bool:
        """The attached connection is gone. Under :attr:`DetachPolicy.CANCEL` the run is
        cancelled; under :attr:`DetachPolicy.KEEP` it runs on, detached.

        Args:
            outbox: the connection that is gone; nothing changes when another one took
                the run over.

        Returns:
            True when the run was cancelled.
        """
        if outbox is not None and self.sink.attached and not self.sink.attached_to(outbox):
            return False
        self.sink.detach()
        self._on_end = None
        if self.policy is DetachPolicy.CANCEL and not self.done.is_set():
            self.abort()
            return True
        return False

    def _ended(self) -> None:
        self.done.set()
        on_end, self._on_end = self._on_end, None
        if on_end is not None:
            on_end(self)


class SessionRuns:
    """One session's listed runs of one capability: what a plugin sees as ``ctx.runs``
    (implements :class:`~a2e_host.plugin.RunsView`)."""

    __slots__ = ("_registry", "_session_id", "_capability")

    def __init__(self, registry: RunRegistry, session_id: str, capability: str) -> None:
        self._registry = registry
        self._session_id = session_id
        self._capability = capability

    def get(self, req_id: str) -> Run | None:
        """The listed run for ``req_id`` in this session and capability, else None."""
        return self._registry.get((self._session_id, req_id), self._capability)

    def __len__(self) -> int:
        """Listed runs of this session and capability (e.g. chains in flight)."""
        return self._registry.count(self._session_id, self._capability)


class RunRegistry:
    """Every run of a host: their tasks, in one task group the host keeps open while it
    serves, and the table of listed runs.

    Args:
        log: the host's structlog logger.
        error_message: the exception → wire ``error`` mapping a failed run's exception
            goes through (:func:`~a2e_host.errors.error_message_of`).
    """

    def __init__(
        self, log: Any, error_message: Callable[..., ErrorMessage] = error_message_of
    ) -> None:
        self.log = log
        self._error_message = error_message
        self._tg: anyio.abc.TaskGroup | None = None
        self._guests = 0
        self._guests_left: anyio.Event | None = None
        self._listed: dict[tuple[str, str, str], Run] = {}  # (session, capability, req_id)
        self._per_session: dict[tuple[str, str], int] = {}  # (session, capability) → listed
        self._alive: set[Run] = set()

    # ── lifetime ────────────────────────────────────────────────────────────

    @property
    def is_open(self) -> bool:
        """Whether runs can be started (inside :meth:`open`)."""
        return self._tg is not None

    @asynccontextmanager
    async def open(self) -> AsyncIterator[RunRegistry]:
        """Keep the registry's task group open inside the block.

        Re-entrant: while it is open, another ``open()`` (nested, or from another task
        such as a second in-memory connection) joins it; the block that opened it waits
        for those that joined to leave before it closes. On close, runs still alive
        (detached :attr:`DetachPolicy.KEEP` runs, or work ignoring a cancel) are
        cancelled and awaited. An exception from the block leaves it unchanged (not
        wrapped in an exception group: the runs themselves never raise).
        """
        if self._tg is not None:
            self._guests += 1
            try:
                yield self
            finally:
                self._guests -= 1
                if self._guests == 0 and self._guests_left is not None:
                    self._guests_left.set()
            return
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                try:
                    yield self
                    while self._guests:
                        self._guests_left = anyio.Event()
                        await self._guests_left.wait()
                finally:
                    self._tg = None
                    for run in self._alive:
                        run.host_stopping = True
                    tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # runs never raise (their exceptions become wire errors): what is here came
            # from the block, and leaves it as the block raised it
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from group.exceptions[0].__cause__
            raise

    # ── runs ────────────────────────────────────────────────────────────────

    def start(
        self,
        fn: Callable[..., Awaitable[Any]],
        *args: Any,
        key: RunKey | None = None,
        req_id: str = "",
        capability: str = "",
        name: str = "",
        log: Any = None,
        policy: DetachPolicy = DetachPolicy.CANCEL,
        outbox: FrameOutbox | None = None,
        on_end: Callable[[Run], None] | None = None,
        append: Append | None = None,
        sink: RunSink | None = None,
    ) -> Run:
        """Start ``fn(run, *args)`` as a run of the host.

        An exception it raises becomes one wire ``error`` (``req_id``, ``capability``)
        through its sink; cancellation is its own business (a cancelled run sends what
        its shielded cleanup sends).

        Args:
            fn: the run's body; gets the :class:`Run` first.
            args: more arguments for ``fn``.
            key: ``(session_id, req_id)`` to list it under (within ``capability``), None
                to leave it unlisted.
            req_id: the request it serves; ``key[1]`` when empty.
            capability: the capability that starts it.
            name: its task's name (logs, debugging).
            log: its logger; the registry's when None.
            policy: what detaching does to it.
            outbox: attach its sink to this outbox before it starts.
            on_end: with ``outbox``: called with the run when it ends attached.
            append: the sink's store hook (see :class:`RunSink`).
            sink: its sink (a durable run's); a :class:`RunSink` with ``append`` if None.

        Returns:
            The run (its task starts at the next checkpoint).

        Raises:
            RuntimeError: the registry is not open (the host is not running).
            ValueError: ``key`` is listed already for ``capability``.
        """
        tg = self._tg
        if tg is None:
            raise RuntimeError(
                "the host is not running: enter 'async with host.running()' before "
                "serving connections"
            )
        if key is not None and _listed_key(key, capability) in self._listed:
            raise ValueError(f"a run is already listed for request {key[1]!r}")
        run = Run(self, key, req_id=req_id or (key[1] if key else ""), capability=capability,
                  name=name, policy=policy, log=log if log is not None else self.log,
                  append=append, sink=sink)
        if outbox is not None:
            run.attach(outbox, on_end=on_end)
        if key is not None:
            self._listed[_listed_key(key, capability)] = run
            count_key = (key[0], capability)
            self._per_session[count_key] = self._per_session.get(count_key, 0) + 1
        self._alive.add(run)
        tg.start_soon(self._run, run, fn, args, name=name or None)
        return run

    async def _run(self, run: Run, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...]
                   ) -> None:
        """One run's task: nothing but cancellation leaves it, since its task group is
        the host's (an escaping exception would end every run of every connection)."""
        try:
            try:
                with run._scope:
                    await fn(run, *args)
            except (Exception, anyio.get_cancelled_exc_class()) as exc:
                if not isinstance(exc, Exception) and being_cancelled():
                    raise
                self._send_failure(run, exc)  # a stray cancellation is a failure too
        finally:
            self._unlist(run)
            self._alive.discard(run)
            run._ended()

    def _send_failure(self, run: Run, exc: BaseException) -> None:
        """Send the wire ``error`` for what ``run`` raised; when that fails too (an
        ``append`` hook failing, a mapping bug), a bare ``runtime_error``; when even that
        fails, only the log has it."""
        try:
            run.sink.send_nowait(self._error_message(
                exc, req_id=run.req_id, log=run.log, capability_name=run.capability))
            return
        except Exception as failure:  # its context is the run's own exception
            run.log.error("the run's error could not be sent", exc_info=failure)
        try:
            run.sink.send_nowait(internal_error_message(
                req_id=run.req_id, capability_name=run.capability))
        except Exception as failure:
            run.log.error("the run ended with no answer sent", exc_info=failure)

    def _unlist(self, run: Run) -> None:
        key = run.key
        if key is None:
            return
        listed = _listed_key(key, run.capability)
        if self._listed.get(listed) is not run:
            return
        del self._listed[listed]
        count_key = (key[0], run.capability)
        left = self._per_session[count_key] - 1
        if left:
            self._per_session[count_key] = left
        else:
            del self._per_session[count_key]

    # ── lookups ─────────────────────────────────────────────────────────────

    def get(self, key: RunKey, capability: str = "") -> Run | None:
        """The listed run of ``capability`` for ``(session_id, req_id)``, else None."""
        return self._listed.get(_listed_key(key, capability))

    def count(self, session_id: str, capability: str) -> int:
        """Listed runs of one session and capability."""
        return self._per_session.get((session_id, capability), 0)

    def view(self, session_id: str, capability: str) -> SessionRuns:
        """One session's listed runs of one capability (a plugin's ``ctx.runs``)."""
        return SessionRuns(self, session_id, capability)

    def __len__(self) -> int:
        """Runs whose task has not ended, listed or not."""
        return len(self._alive)

    def __iter__(self) -> Iterator[Run]:
        """The runs whose task has not ended."""
        return iter(list(self._alive))

    @property
    def listed(self) -> int:
        """Runs in the table (keyed by ``(session_id, req_id)`` and capability)."""
        return len(self._listed)


def _listed_key(key: RunKey, capability: str) -> tuple[str, str, str]:
    """Where a run listed under ``key`` for ``capability`` is in the table."""
    return (key[0], capability, key[1])
