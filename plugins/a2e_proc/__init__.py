"""The ``proc`` capability: long-lived processes owned by the session (PROTOCOL.md §10).

A first-party plugin on the public plugin API, found through the entry-point group
``a2e_host.plugins``. It serves the public A2E SDK's nine ``proc/*`` messages
(:mod:`a2e_host.chains.proc_messages`) with every guarantee a ``proc`` node has, through
the same machinery (:mod:`a2e_host.chains.proc`): denied by default (not served at all
when the configuration allows no executable), ``cmd[0]`` one of the allowlisted names
exactly, run by the real file resolved at start (checked by inode), never through a
shell, a minimal environment plus allowed keys, ``cwd`` opened by handle below the root,
the whole process tree under a supervisor that ends it.

Each process is a run of the host (:meth:`PluginContext.start_run`), listed under its
``proc/spawn/req`` id and attached to the connection: a dropped connection cancels it,
which ends its tree. A session keeps at most ``proc_limit`` live processes (PROTOCOL.md
§6); past it ``proc/spawn/req`` gets error ``proc_limit``. The host-wide ``max_procs``
bounds this capability's live processes of all sessions together (its own pool, beside
the proc nodes'); past it ``busy``. Ended processes stay visible to ``proc/status`` (the
last :data:`KEPT_ENDED` of a session) until the session closes.
"""

from __future__ import annotations

import os
import sys
from typing import Any, ClassVar

import anyio

from a2e_host.chains.expressions import clip
from a2e_host.chains.proc import start_process
from a2e_host.chains.proc_messages import (
    PROC_MESSAGE_TYPES,
    ProcKillRequest,
    ProcSpawnRequest,
    ProcSpawnResponse,
    ProcStatusRequest,
    ProcStatusResponse,
    ProcWriteRequest,
    ProcWriteResponse,
)
from a2e_host.chains.proc_policy import SHOWN, ProcPolicy, argv_problem
from a2e_host.config import HostConfig
from a2e_host.exceptions import (
    Busy,
    InvalidMessage,
    NodeError,
    ProcDead,
    ProcLimit,
    SchemaViolation,
    UnknownProc,
)
from a2e_host.messages import Message
from a2e_host.plugin import Outbox, Plugin, PluginContext, RunHandle, SessionInfo

from .kills import begin_kill, run_kill
from .process import CLOSE_GRACE, READ_CHUNK, SIGNALS, LiveProcess
from .session_procs import KEPT_ENDED, MAX_WAITING_FOR_START, SETTLE_WAIT, START_WAIT, SessionProcs

__all__ = ["ProcPlugin", "KEPT_ENDED", "MAX_LISTED_EXECUTABLES", "MAX_PENDING_WRITES",
           "MAX_WAITING_FOR_START", "START_WAIT"]

MAX_LISTED_EXECUTABLES = 64
"""Allowed executables the handshake metadata lists at most (``executables_total``
counts them all)."""

MAX_PENDING_WRITES = 4
"""``proc/write/req`` waiting for one process's stdin at once; past it ``busy``."""



class ProcPlugin(Plugin):
    """Serves ``proc/*`` (PROTOCOL.md §10).

    Args:
        config: the host configuration (``allow_proc``, ``proc_env_allow``,
            ``proc_env_keys``, ``root``, ``max_procs``).
        policy: what may run; built from ``config`` when None.

    Raises:
        ValueError: an ``allow_proc`` entry that is not an executable on PATH.
    """

    capability: ClassVar[str] = "proc"
    namespace: ClassVar[str] = "proc/*"
    priority: ClassVar[int] = 40
    message_types: ClassVar[tuple[type[Message], ...]] = PROC_MESSAGE_TYPES
    features: ClassVar[tuple[str, ...]] = (
        "proc/spawn/resp.error_code",
        "proc/write/resp.written",
        "proc/kill/resp.exit_code",
        "proc/status/resp.procs",
        "proc/read/event.kinds",
    )
    how_to_serve: ClassVar[str] = (
        "start the host with --allow-proc NAME for each executable it may run, or allow_proc "
        "in its config")

    def __init__(self, config: HostConfig, policy: ProcPolicy | None = None) -> None:
        super().__init__(config)
        self.policy = policy if policy is not None else ProcPolicy.from_config(config)
        self._sessions: dict[str, SessionProcs] = {}

    def serves(self) -> bool:
        """Only when the configuration allows at least one executable."""
        return bool(self.policy.allowed)

    def metadata(self, session: SessionInfo) -> dict[str, Any]:
        """Namespace, priority, features, the allowed executables (sorted, at most
        :data:`MAX_LISTED_EXECUTABLES`, with ``executables_total``), the session's
        ``proc_limit`` and the stream caps (int bytes)."""
        meta = super().metadata(session)
        names = sorted(self.policy.allowed)
        meta["executables"] = names[:MAX_LISTED_EXECUTABLES]
        meta["executables_total"] = len(names)
        meta["proc_limit"] = session.limits.effective.proc_limit
        meta["max_stdout_bytes"] = self.policy.max_stdout_bytes
        meta["max_stderr_bytes"] = self.policy.max_stderr_bytes
        meta["read_chunk_bytes"] = READ_CHUNK
        return meta

    async def handle(self, message: Message, ctx: PluginContext) -> None:
        """Answer one ``proc/*`` request.

        Raises:
            ProcLimit: a spawn past the session's ``proc_limit``.
            Busy: the host is shutting down, every host-wide process slot is taken,
                :data:`MAX_PENDING_WRITES` writes wait for that process already, the
                session's waiting writes would hold more than ``max_message_bytes``, or
                :data:`MAX_WAITING_FOR_START` requests wait for starts already.
            UnknownProc: no process of this session has that ``proc_id``.
            ProcDead: a write to, or a kill of, a process that has ended.
            SchemaViolation: an unknown ``signal``.
            InvalidMessage: a message type only hosts send.
        """
        if isinstance(message, ProcSpawnRequest):
            self._spawn(message, ctx)
        elif isinstance(message, ProcWriteRequest):
            self._write(message, ctx)
        elif isinstance(message, ProcKillRequest):
            self._kill(message, ctx)
        elif isinstance(message, ProcStatusRequest):
            if not (message.proc_id and self._waits_for_start(message.proc_id, message, ctx)):
                ctx.outbox.send_nowait(self._status(message, ctx.session))
        else:
            raise InvalidMessage(
                f"{message.TYPE!r} is sent by hosts, not agents; send proc/spawn/req, "
                "proc/write/req, proc/kill/req or proc/status/req"
            )

    # ── spawn ───────────────────────────────────────────────────────────────

    def _spawn(self, request: ProcSpawnRequest, ctx: PluginContext) -> None:
        if ctx.closing:
            raise Busy("the host is shutting down and starts no new processes",
                       retryable=True)
        procs = self._sessions.setdefault(ctx.session.session_id, SessionProcs())
        live = procs.live
        refusal = ctx.session.limits.refusal("proc_limit", live + 1)
        if refusal is not None:
            details = refusal.details
            raise ProcLimit(
                f"this session has {live} live processes and proc_limit is "
                f"{details['limit']} at {details['scope']} scope; end one (proc/kill/req) "
                "or wait for its exit event before spawning another",
                detail=details,
            )
        if ctx.runs.get(request.id) is not None:
            raise InvalidMessage(
                f"a process started by request id {request.id!r} is running; use a fresh id"
            )
        problem, code = self._spawn_problem(request)
        if problem:
            ctx.outbox.send_nowait(ProcSpawnResponse(req_id=request.id, ok=False,
                                                     error=problem, error_code=code))
            return
        slots = self.policy.slots
        try:
            slots.acquire_nowait()
        except anyio.WouldBlock:
            raise Busy(
                f"all {self.policy.max_procs} process slots of this host are in use "
                "(max_procs); try again when a process has ended"
            ) from None
        procs.counter += 1
        proc_id = f"p{procs.counter}"
        procs.procs[proc_id] = None
        procs.starting[proc_id] = anyio.Event()
        try:
            ctx.start_run(self._run, request, proc_id, procs, ctx.session,
                          name=f"proc {proc_id}")
        except BaseException:
            del procs.procs[proc_id]
            procs.resolved(proc_id, "the host could not start its run")
            slots.release()
            raise

    def _spawn_problem(self, request: ProcSpawnRequest) -> tuple[str, str]:
        """Why ``request`` cannot start, as ``(sentence, error_code)``; ``("", "")`` when
        it may."""
        problem = argv_problem(request.cmd)
        if problem:
            return f"cmd {problem}", "invalid_input"
        name = request.cmd[0]
        exe, _ = self.policy.resolve(name)
        if exe is None:
            allowed = ", ".join(sorted(self.policy.allowed))
            return (f"executable {clip(name, SHOWN)} is not allowed (allowed: {allowed}); "
                    "give one of those names as cmd[0], or have the operator allow it with "
                    "--allow-proc"), "proc_denied"
        if not _same_file(exe.real, exe.dev, exe.ino):  # the supervisor checks it again
            return (f"executable {name!r} was replaced since the host started ({exe.real} is "
                    "no longer the file that was allowed); the operator must restart the "
                    "host to allow the new file"), "proc_denied"
        env_problem = self.policy.env_problem(request.env)
        if env_problem:
            return env_problem.replace("a node", "a process"), "invalid_input"
        if request.stdin_mode not in ("pipe", "null"):
            return (f"stdin_mode {request.stdin_mode!r} is not one of 'pipe', 'null'",
                    "invalid_input")
        if request.timeout < 0:
            return (f"timeout {request.timeout} is negative; give seconds > 0, or 0 for "
                    "the session's max_timeout"), "invalid_input"
        if "\x00" in request.cwd:
            return "cwd contains a NUL byte; remove it", "invalid_input"
        if not sys.executable:
            return ("this host has no Python executable to supervise processes with "
                    "(sys.executable is empty)"), "spawn_failed"
        return "", ""

    async def _run(
        self,
        run: RunHandle,
        request: ProcSpawnRequest,
        proc_id: str,
        procs: SessionProcs,
        session: SessionInfo,
    ) -> None:
        """The process's run: start it, answer the spawn, serve it until it ends."""
        sink = run.sink
        try:
            exe, _ = self.policy.resolve(request.cmd[0])
            assert exe is not None  # checked in _spawn; the allowlist never changes
            max_timeout = session.limits.effective.max_timeout
            timeout = min(request.timeout or max_timeout, max_timeout)
            try:
                supervisor = await start_process(
                    self.policy, exe, list(request.cmd), request.cwd or None,
                    self.policy.child_env({str(k): str(v) for k, v in request.env.items()}),
                    stdin_piped=request.stdin_mode == "pipe",
                )
            except NodeError as exc:
                del procs.procs[proc_id]
                code = "invalid_input" if exc.code == "invalid_input" else "spawn_failed"
                error = exc.message.removeprefix("proc: ")
                run.release()
                sink.send_nowait(ProcSpawnResponse(
                    req_id=request.id, ok=False, error=error, error_code=code,
                ))
                procs.resolved(proc_id, f"{error} ({code})")
                return
            process = LiveProcess(
                proc_id, request.id, list(request.cmd), supervisor, timeout=float(timeout),
                caps=(self.policy.max_stdout_bytes, self.policy.max_stderr_bytes),
                kill_grace=self.policy.kill_grace,
            )
            procs.procs[proc_id] = process
            sink.send_nowait(ProcSpawnResponse(req_id=request.id, proc_id=proc_id, ok=True,
                                               pid=process.pid))
            procs.resolved(proc_id)
            try:
                async with anyio.create_task_group() as tg:
                    if procs.closing:  # the session stopped while it was starting
                        tg.start_soon(process.close)
                    await process.serve(sink)
            finally:
                procs.forget_ended()
        finally:
            self.policy.slots.release()
            if procs.procs.get(proc_id, 0) is None:  # cancelled while it was starting
                del procs.procs[proc_id]
            if proc_id in procs.starting:
                procs.resolved(proc_id, "its start was cancelled (the session or the host "
                                        "stopped)")

    # ── write, kill, status ─────────────────────────────────────────────────

    def _find(self, session: SessionInfo, proc_id: str) -> LiveProcess:
        procs = self._sessions.get(session.session_id)
        process = procs.procs.get(proc_id) if procs is not None else None
        if process is None:
            failure = procs.spawn_failures.get(proc_id) if procs is not None else None
            if failure is not None:
                raise UnknownProc(
                    f"process {proc_id!r} did not start: {failure}; its proc/spawn/resp "
                    "(ok false) says so, and nothing was sent to it",
                    detail={"proc_id": proc_id, "spawn_error": failure},
                )
            known = procs is not None and proc_id in procs.procs  # still starting
            raise UnknownProc(
                f"process {proc_id!r} did not start within {START_WAIT:g} s; wait for its "
                "proc/spawn/resp and send again"
                if known else
                f"this session has no process {clip(proc_id, SHOWN)}; use the proc_id of a "
                "proc/spawn/resp (proc/status/req with proc_id \"\" lists them)",
                detail={"proc_id": proc_id if len(proc_id) <= SHOWN else
                        proc_id[:SHOWN] + "…"},
            )
        return process

    def _waits_for_start(self, proc_id: str, request: Message, ctx: PluginContext) -> bool:
        """When ``proc_id`` is still starting, answer ``request`` in the background once
        its start is over (at most :data:`START_WAIT` seconds): a piped script may send
        ``proc/write/req`` right after ``proc/spawn/req``. Returns whether it waits."""
        procs = self._sessions.get(ctx.session.session_id)
        if procs is None or proc_id not in procs.starting:
            return False
        if procs.waiting >= MAX_WAITING_FOR_START:
            raise Busy(
                f"{procs.waiting} requests wait for processes of this session to start "
                "already; wait for a proc/spawn/resp before sending more"
            )
        held = 0
        if isinstance(request, ProcWriteRequest):  # its data is held while it waits
            held = len(request.data.encode("utf-8", errors="surrogatepass"))
            procs.check_bytes(held, ctx.session.limits.effective.max_message_bytes)
        ctx.start_soon(self._after_start, proc_id, request, procs, ctx, held,
                       name=f"proc {proc_id} waits for its start")
        procs.waiting += 1  # only once started: its task takes them back
        procs.pending_bytes += held
        return True

    async def _after_start(self, proc_id: str, request: Message, procs: SessionProcs,
                           ctx: PluginContext, held: int) -> None:
        try:
            event = procs.starting.get(proc_id)
            if event is not None:
                with anyio.move_on_after(START_WAIT):
                    await event.wait()
            if isinstance(request, ProcWriteRequest):
                procs.pending_bytes -= held  # counted again by _writable
                held = 0
                process, data = self._writable(request, ctx)
                await self._write_now(request.id, data, request.eof, process, procs,
                                      ctx.outbox)
            elif isinstance(request, ProcKillRequest):
                process, signum = self._killable(request, ctx)
                if begin_kill(request, process, signum, procs.kills):
                    await run_kill(request, process, signum, procs.kills, ctx.outbox)
            else:
                assert isinstance(request, ProcStatusRequest)
                ctx.outbox.send_nowait(self._status(request, ctx.session))
        finally:
            procs.pending_bytes -= held
            procs.waiting -= 1
            procs.notify()

    @staticmethod
    def _dead(process: LiveProcess, action: str) -> ProcDead:
        return ProcDead(
            f"process {process.proc_id!r} has already ended ({process.state}, exit code "
            f"{process.exit_code}); there is nothing to {action}",
            detail={"proc_id": process.proc_id, "state": process.state,
                    "exit_code": process.exit_code},
        )

    def _write(self, request: ProcWriteRequest, ctx: PluginContext) -> None:
        if self._waits_for_start(request.proc_id, request, ctx):
            return
        process, data = self._writable(request, ctx)
        ctx.start_soon(self._write_now, request.id, data, request.eof, process,
                       self._sessions[ctx.session.session_id], ctx.outbox,
                       name=f"proc write {process.proc_id}")

    def _writable(self, request: ProcWriteRequest, ctx: PluginContext
                  ) -> tuple[LiveProcess, bytes]:
        """The process ``request`` writes to and the bytes, counted as a pending write."""
        process = self._find(ctx.session, request.proc_id)
        if not process.running:
            raise self._dead(process, "write to")
        procs = self._sessions[ctx.session.session_id]
        pending = procs.pending_writes.get(process.proc_id, 0)
        if pending >= MAX_PENDING_WRITES:
            raise Busy(
                f"{pending} writes to process {process.proc_id!r} are waiting for its stdin "
                "already; wait for a proc/write/resp before sending more"
            )
        data = request.data.encode("utf-8", errors="surrogatepass")
        procs.check_bytes(len(data), ctx.session.limits.effective.max_message_bytes)
        procs.pending_writes[process.proc_id] = pending + 1
        procs.pending_bytes += len(data)
        return process, data

    @staticmethod
    async def _write_now(
        req_id: str, data: bytes, eof: bool, process: LiveProcess, procs: SessionProcs,
        outbox: Outbox,
    ) -> None:
        size = len(data)
        try:
            error = await process.write(data, eof)
        finally:
            del data  # the request's copy of it is gone already; do not hold this one
            procs.pending_bytes -= size
            left = procs.pending_writes.get(process.proc_id, 1) - 1
            if left:
                procs.pending_writes[process.proc_id] = left
            else:
                procs.pending_writes.pop(process.proc_id, None)
            procs.notify()
        outbox.send_nowait(ProcWriteResponse(
            req_id=req_id, proc_id=process.proc_id, ok=error is None, pid=process.pid,
            error=error or "", written=0 if error else size,
        ))

    def _kill(self, request: ProcKillRequest, ctx: PluginContext) -> None:
        if self._waits_for_start(request.proc_id, request, ctx):
            return
        process, signum = self._killable(request, ctx)
        kills = self._sessions[ctx.session.session_id].kills
        if not begin_kill(request, process, signum, kills):
            return  # answered when the kill under way ends
        try:
            ctx.start_soon(run_kill, request, process, signum, kills, ctx.outbox,
                           name=f"proc kill {process.proc_id}")
        except BaseException:
            kills.pop(process.proc_id, None)
            raise

    def _killable(self, request: ProcKillRequest, ctx: PluginContext
                  ) -> tuple[LiveProcess, int]:
        signum = SIGNALS.get(request.signal.upper())
        if signum is None:
            raise SchemaViolation(
                f"proc/kill/req: signal {clip(request.signal, SHOWN)} is not one of "
                f"{', '.join(SIGNALS)}",
                detail={"path": "$.signal", "type": "proc/kill/req"},
            )
        process = self._find(ctx.session, request.proc_id)
        if not process.running:
            raise self._dead(process, "kill")
        return process, signum

    def _status(self, request: ProcStatusRequest, session: SessionInfo) -> ProcStatusResponse:
        if request.proc_id:
            process = self._find(session, request.proc_id)
            error = process.message if process.state in ("crashed", "timedout") else ""
            return ProcStatusResponse(req_id=request.id, proc_id=process.proc_id,
                                      status=process.state, error=error,
                                      procs=[process.status()])
        procs = self._sessions.get(session.session_id)
        listed = [p.status() for p in (procs.procs.values() if procs else ()) if p is not None]
        return ProcStatusResponse(req_id=request.id, proc_id="", status="", error="",
                                  procs=listed)

    # ── the session and the host ending ─────────────────────────────────────

    async def session_closing(self, session: SessionInfo) -> None:
        """Let the processes still starting start and the requests already received for
        them be answered (at most :data:`SETTLE_WAIT` seconds), then close every live
        process's stdin; end the tree of each still running
        :data:`~a2e_proc.process.CLOSE_GRACE` seconds later (PROTOCOL.md §10)."""
        procs = self._sessions.get(session.session_id)
        if procs is None:
            return
        with anyio.move_on_after(SETTLE_WAIT):  # what was sent before the close goes first
            while not procs.settled:
                await procs.changed.wait()
        procs.closing = True
        with anyio.move_on_after(CLOSE_GRACE + 1.0):
            async with anyio.create_task_group() as tg:
                for process in list(procs.procs.values()):
                    if process is not None and process.running:
                        tg.start_soon(process.close)

    async def session_closed(self, session: SessionInfo) -> None:
        """End what is left (its runs were cancelled already) and forget the session."""
        procs = self._sessions.pop(session.session_id, None)
        if procs is not None:
            await procs.end_all()

    async def aclose(self) -> None:
        """The host is stopping: end every process of every session."""
        sessions, self._sessions = list(self._sessions.values()), {}
        for procs in sessions:
            await procs.end_all()


def _same_file(path: str, dev: int, ino: int) -> bool:
    """Whether ``path`` is still the file ``(dev, ino)`` resolved at start."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)
