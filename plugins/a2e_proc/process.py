"""One long-lived process of a session: :class:`LiveProcess` (PROTOCOL.md §10).

Layer: plugin (anyio). Started by :mod:`a2e_proc` through the proc nodes' own machinery
(:func:`a2e_host.chains.proc.start_process`: the allowlisted executable checked by handle,
the supervisor that owns the whole tree), it lives in a run of the host and ends with it.

Theory of operation:

* **Output.** stdout and stderr are each read by their own task, at most
  :data:`READ_CHUNK` bytes at a time, each chunk becoming one ``proc/read/event`` of kind
  ``output``. Before every read the task waits for the connection's outbox to be
  writable, so a slow reader stops the reads, the pipe fills, and the process blocks on
  its next write: memory never grows with the output. A stream keeps sending until it
  has sent its byte cap (the policy's ``max_stdout_bytes`` / ``max_stderr_bytes``); then
  one ``dropped`` event says so and the rest is read and dropped (counted), so the
  process never blocks on a stream nobody will see.
* **Ending.** The process ends when its child exits, when its ``timeout`` passes, on
  ``proc/kill`` (the asked signal to its process group, then, after the kill grace,
  what is left of the tree is ended), when the session stops taking work (stdin is
  closed, and what still runs :data:`CLOSE_GRACE` seconds later is ended), or when its
  run is cancelled (the connection dropped, the host stopped). Whichever comes first,
  the supervisor then ends the whole tree (SIGTERM, the grace, SIGKILL) and reaps it, the
  remaining output is read, and one ``exit`` event is the process's last.
"""

from __future__ import annotations

import codecs
import contextlib
import shlex
import signal as signals
import time
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from a2e_host.chains.proc import Supervisor
from a2e_host.chains.proc_messages import ProcReadEvent, ProcStatus
from a2e_host.plugin import Outbox

__all__ = ["LiveProcess", "READ_CHUNK", "CLOSE_GRACE", "SIGNALS"]

READ_CHUNK = 65_536
"""Bytes of output one ``proc/read/event`` carries at most."""

CLOSE_GRACE = 2.0
"""Seconds a process gets to end by itself after the session stopped taking work and
its stdin was closed; then its tree is ended."""

SIGNALS: dict[str, int] = {
    "SIGTERM": int(signals.SIGTERM),
    "SIGINT": int(signals.SIGINT),
    "SIGHUP": int(signals.SIGHUP),
    "SIGKILL": int(signals.SIGKILL),
}
"""The signals ``proc/kill/req.signal`` may name."""

_DRAIN_TIMEOUT = 5.0  # seconds to read what is left in the pipes once the tree is gone


class LiveProcess:
    """A started process of a session, its output pumps and its end.

    Args:
        proc_id: its id in the session.
        req_id: the ``proc/spawn/req`` id (the ``req_id`` of its events).
        argv: the command as asked.
        supervisor: from :func:`~a2e_host.chains.proc.start_process`.
        timeout: float seconds before its tree is killed.
        caps: ``(stdout, stderr)`` bytes sent at most per stream.
        kill_grace: float seconds between a kill's signal and ending what is left.

    Attributes:
        state: ``running``, then ``stopped``, ``crashed`` or ``timedout``.
        sent / dropped: bytes of each stream sent in events / read and dropped past its cap.
        exit_code: None while running (and when its supervisor vanished).
        ended: set once the tree is gone and the ``exit`` event was sent.
    """

    def __init__(
        self,
        proc_id: str,
        req_id: str,
        argv: list[str],
        supervisor: Supervisor,
        *,
        timeout: float,
        caps: tuple[int, int],
        kill_grace: float,
    ) -> None:
        self.proc_id = proc_id
        self.req_id = req_id
        self.argv = argv
        self.supervisor = supervisor
        self.pid = supervisor.child_pid or 0
        self.timeout = timeout
        self.caps = {"stdout": caps[0], "stderr": caps[1]}
        self.kill_grace = kill_grace
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.state = "running"
        self.exit_code: int | None = None
        self.message = ""
        self.ended = anyio.Event()
        self.stdin: ByteSendStream | None = supervisor.process.stdin
        self.dropped = {"stdout": 0, "stderr": 0}
        self.sent = {"stdout": 0, "stderr": 0}  # bytes of output sent in events
        self._seq = 0
        self._ending = ""  # why we end it: "kill", "close"; "" = it ends by itself
        self._wait = anyio.CancelScope()
        self._exited = anyio.Event()
        self._stdin_lock = anyio.Lock()
        self._pumped = {"stdout": anyio.Event(), "stderr": anyio.Event()}

    # ── asked by the agent ──────────────────────────────────────────────────

    @property
    def running(self) -> bool:
        return self.state == "running"

    async def write(self, data: bytes, eof: bool) -> str | None:
        """Write ``data`` to stdin (then close it when ``eof``), waiting while the pipe is
        full. Returns None when written, else why not (one sentence)."""
        async with self._stdin_lock:
            stdin = self.stdin
            if stdin is None:
                return (f"the stdin of process {self.proc_id!r} is closed (spawned with "
                        "stdin_mode null, or closed by an earlier eof); nothing was written")
            try:
                if data:
                    await stdin.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                self.stdin = None
                return (f"process {self.proc_id!r} closed its stdin (or ended) before "
                        "taking the data")
            if eof:
                await self._close_stdin()
            return None

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the process group now (a kill under way goes on)."""
        self.supervisor.signal(signum)

    async def kill(self, signum: int) -> None:
        """Send ``signum`` to the process group; after the kill grace end whatever is left
        of the tree. Returns once the tree is gone (bounded: the supervisor's own end is)."""
        if self.running and not self._ending and not self._exited.is_set():
            self._ending = "kill"
        self.supervisor.signal(signum)
        with anyio.move_on_after(self.kill_grace):
            await self._exited.wait()
        self._wait.cancel()
        await self.ended.wait()

    async def close(self) -> None:
        """The session stopped taking work: close stdin; end the tree if it still runs
        :data:`CLOSE_GRACE` seconds later."""
        if self.running and not self._ending and not self._exited.is_set():
            self._ending = "close"
        with anyio.move_on_after(CLOSE_GRACE):  # a write may hold stdin: not past the grace
            async with self._stdin_lock:
                await self._close_stdin()
            await self._exited.wait()
        self._wait.cancel()

    def abort(self) -> None:
        """End the tree now (without waiting)."""
        if self.running and not self._ending:
            self._ending = "close"
        self._wait.cancel()

    def status(self) -> ProcStatus:
        """Its ``ProcStatus`` (PROTOCOL.md §10)."""
        return ProcStatus(
            proc_id=self.proc_id, cmd=shlex.join(self.argv), state=self.state, pid=self.pid,
            exit_code=self.exit_code, started_at=self.started_at, ended_at=self.ended_at,
        )

    # ── its run ──────────────────────────────────────────────────────────────

    async def serve(self, sink: Outbox) -> None:
        """Pump its output into ``sink`` until it ends; end its tree whatever happens
        (cancellation included), then send the ``exit`` event."""
        process = self.supervisor.process
        code: int | None = None
        timed_out = False
        try:
            async with anyio.create_task_group() as tg:
                assert process.stdout is not None and process.stderr is not None
                tg.start_soon(self._pump, process.stdout, "stdout", sink)
                tg.start_soon(self._pump, process.stderr, "stderr", sink)
                self._wait.deadline = anyio.current_time() + self.timeout
                with self._wait:
                    code = await self.supervisor.exit_code()
                    self.exit_code = code
                    self._exited.set()
                timed_out = self._wait.cancelled_caught and not self._ending
                self.supervisor.request_end()  # the rest of the tree ends: pipes close
                with anyio.move_on_after(self.kill_grace + _DRAIN_TIMEOUT):
                    for done in self._pumped.values():
                        await done.wait()
                if code is None:  # ended before its exit was read: the supervisor's report
                    with anyio.move_on_after(self.kill_grace + _DRAIN_TIMEOUT):
                        code = await self.supervisor.exit_code()
                tg.cancel_scope.cancel()
        except BaseException:
            if not self._ending:  # cancelled: the connection dropped, the host stops
                self._ending = "close"
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await self.supervisor.end(self.kill_grace)
                await self._close_stdin()
            self._finish(code, timed_out, sink)

    async def _pump(self, stream: ByteReceiveStream, name: str, sink: Outbox) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        cap = self.caps[name]
        sent = 0
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError,
                                 anyio.ClosedResourceError):
            while True:
                if sent < cap:
                    await sink.wait_writable()  # backpressure: a slow reader stops reads
                chunk = await stream.receive(READ_CHUNK)
                room = cap - sent
                if room <= 0:
                    self.dropped[name] += len(chunk)
                    continue
                kept = chunk[:room]
                sent += len(kept)
                self.sent[name] = sent
                text = decoder.decode(kept, final=sent >= cap)
                if text:
                    self._send(sink, "output", name, {"text": text})
                if len(chunk) > room:
                    self.dropped[name] += len(chunk) - room
                if sent >= cap:
                    self._send(sink, "dropped", name, {
                        "limit": cap,
                        "message": f"{name} passed its cap of {cap} bytes; the rest of it "
                                   "is read and dropped",
                    })
        tail = decoder.decode(b"", final=True)
        if tail:
            self._send(sink, "output", name, {"text": tail})
        self._pumped[name].set()

    def _send(self, sink: Outbox, kind: str, stream: str, data: dict[str, Any]) -> None:
        self._seq += 1
        sink.send_nowait(ProcReadEvent(kind=kind, req_id=self.req_id, data=data,
                                       seq=self._seq, proc_id=self.proc_id,
                                       stream_type=stream))

    async def _close_stdin(self) -> None:
        stdin, self.stdin = self.stdin, None
        if stdin is not None:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError,
                                     OSError):
                await stdin.aclose()

    def _finish(self, code: int | None, timed_out: bool, sink: Outbox) -> None:
        if self.ended.is_set():
            return
        self.exit_code = code
        self.ended_at = time.time()
        shown = self.argv[0]
        if timed_out:
            self.state = "timedout"
            self.message = (f"process {shown!r} ran past its timeout of {self.timeout:g} s "
                            "and was killed")
        elif self._ending or (code == 0):
            self.state = "stopped"
            self.message = ("ended on request" if self._ending == "kill" else
                            "ended as the session stopped" if self._ending else
                            "exited with code 0")
        elif code is None:
            self.state = "crashed"
            self.message = (f"process {shown!r} lost its supervisor (was it killed by the "
                            "process itself?); its process group was killed")
        else:
            self.state = "crashed"
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            self.message = f"process {shown!r} {how}"
        self._send(sink, "exit", "", {
            "state": self.state, "exit_code": code, "dropped": dict(self.dropped),
            "message": self.message,
        })
        self.ended.set()


