"""stdio transport: NDJSON on stdin/stdout, logs on stderr (PROTOCOL.md §1).

Layer: transports. **stdout carries protocol lines only.** :func:`protect_stdout` must
run first thing in the process: it moves the real stdout to a private descriptor for the
protocol writer and points fd 1 (and ``sys.stdout``) at stderr, so a tool's ``print()``
or a child process inheriting fd 1 can only ever reach stderr.

Reading and writing use two daemon threads with blocking ``os.read`` / ``os.write``, which
work on every kind of descriptor (pipe, file, TTY, socket) and can never keep the process
alive at exit. Lines are split by :class:`~a2e_host.framing.LineSplitter`: no line-length
trap (a 200 KB line is fine); a line over the cap yields one refusal and the next line
is read normally.

Ends: EOF on stdin → :class:`anyio.EndOfStream` (work finishes, frames are flushed);
a closed stdout (EPIPE, or the reader end of a pipe closing — noticed even while
nothing is being written) → :class:`anyio.BrokenResourceError` (everything is cancelled).
"""

from __future__ import annotations

import os
import queue
import select
import stat
import sys
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel

from ..framing import LineSplitter, LineTooLong
from . import CloseCode, ConnectionHandler, Incoming

__all__ = ["protect_stdout", "open_stdio_transport", "serve_stdio", "StdioTransport"]

READ_CHUNK_BYTES = 64 * 1024


def protect_stdout() -> int:
    """Keep stdout for the protocol only; call before anything may print.

    Duplicates fd 1 to a private descriptor, points fd 1 at fd 2, and sets ``sys.stdout``
    to ``sys.stderr``.

    Returns:
        The private descriptor the protocol writer must use.
    """
    sys.stdout.flush()
    private_fd = os.dup(1)
    os.set_inheritable(private_fd, False)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return private_fd


class _DaemonWorker:
    """Runs blocking calls one at a time in a daemon thread, awaited from the loop.

    A call whose awaiter was cancelled keeps running in the thread (it cannot be
    interrupted); as a daemon thread it never delays process exit.
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Callable[[Any, Any], None]]]
        self._jobs = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            fn, done = self._jobs.get()
            try:
                result, error = fn(), None
            except BaseException as exc:  # delivered to the awaiting task
                result, error = None, exc
            try:
                done(result, error)
            except Exception:  # the event loop is gone: nobody waits any more
                return

    async def run(self, fn: Callable[[], Any]) -> Any:
        token = anyio.lowlevel.current_token()
        finished = anyio.Event()
        box: list[Any] = []

        def done(result: Any, error: Any) -> None:
            box[:] = [result, error]
            anyio.from_thread.run_sync(finished.set, token=token)

        self._jobs.put((fn, done))
        await finished.wait()
        result, error = box
        if error is not None:
            raise error
        return result


class StdioTransport:
    """Frames over a pair of file descriptors (implements
    :class:`~a2e_host.transports.Transport`).

    Use :func:`open_stdio_transport`, which runs the stdout watcher.
    """

    kind = "stdio"
    bearer_token = ""
    peer = "stdio"

    def __init__(self, in_fd: int, out_fd: int, max_line_bytes: int) -> None:
        self.in_fd = in_fd
        self.out_fd = out_fd
        self._splitter = LineSplitter(max_line_bytes)
        self._pending: deque[bytes | LineTooLong] = deque()
        self._eof = False
        self._broken = False
        self._gone = anyio.Event()
        self._reader = _DaemonWorker("a2e-host stdin")
        self._writer = _DaemonWorker("a2e-host stdout")

    async def receive(self) -> Incoming:
        while not self._pending:
            if self._eof:
                raise anyio.EndOfStream
            try:
                chunk = await self._reader.run(lambda: os.read(self.in_fd, READ_CHUNK_BYTES))
            except OSError:
                chunk = b""
            if chunk:
                self._pending.extend(self._splitter.receive_data(chunk))
            else:
                self._pending.extend(self._splitter.close())
                self._eof = True
        return self._pending.popleft()

    async def send_frames(self, frames: Sequence[bytes]) -> None:
        if self._broken:
            raise anyio.BrokenResourceError
        data = b"".join(frame + b"\n" for frame in frames)
        try:
            await self._writer.run(lambda: _write_all(self.out_fd, data))
        except OSError:  # EPIPE (SIGPIPE is ignored by Python), EBADF …
            self._broken = True
            self._gone.set()
            raise anyio.BrokenResourceError from None

    async def wait_peer_gone(self) -> None:
        await self._gone.wait()

    async def watch_stdout(self) -> None:
        """Set the peer-gone flag when stdout's pipe loses its reader (FIFOs only; for a
        file or TTY a failed write is the only sign, and this returns at once)."""
        try:
            if not stat.S_ISFIFO(os.fstat(self.out_fd).st_mode):
                return
        except OSError:
            return
        while not _pipe_reader_gone(self.out_fd):
            # A pipe's write end is never readable: epoll reports it only on error/hangup.
            try:
                await anyio.wait_readable(self.out_fd)
            except (OSError, ValueError, NotImplementedError):
                return
            if not _pipe_reader_gone(self.out_fd):
                await anyio.sleep(0.05)  # a spurious wakeup; do not spin
        self._broken = True
        self._gone.set()

    async def aclose(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Nothing to close: the descriptors belong to the process."""
        return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _pipe_reader_gone(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    events = poller.poll(0)
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in events)


@asynccontextmanager
async def open_stdio_transport(
    max_line_bytes: int, *, in_fd: int = 0, out_fd: int | None = None
) -> AsyncIterator[StdioTransport]:
    """A :class:`StdioTransport` over the process's stdin and protected stdout.

    Args:
        max_line_bytes: the per-line cap (the host's ``max_message_bytes``).
        in_fd: the descriptor to read NDJSON from (stdin).
        out_fd: the descriptor for protocol lines; None calls :func:`protect_stdout`.

    Yields:
        The transport; the stdout watcher runs until the block exits.
    """
    if out_fd is None:
        out_fd = protect_stdout()
    transport = StdioTransport(in_fd, out_fd, max_line_bytes)
    async with anyio.create_task_group() as tg:
        tg.start_soon(transport.watch_stdout)
        try:
            yield transport
        finally:
            tg.cancel_scope.cancel()



async def serve_stdio(
    handler: ConnectionHandler,
    *,
    max_line_bytes: int,
    in_fd: int = 0,
    out_fd: int | None = None,
) -> None:
    """Serve the process's one stdio connection with ``handler``; return when it returns.

    There is nothing to stop accepting on stdio: the connection ends on stdin EOF, a
    closed stdout, or when the handler closes it (``shutdown``, a signal).

    Args:
        handler: serves the connection (e.g. ``host.serve_connection``).
        max_line_bytes: the per-line cap (the host's ``max_message_bytes``).
        in_fd: the descriptor to read NDJSON from (stdin).
        out_fd: the descriptor for protocol lines; None calls :func:`protect_stdout`.
    """
    async with open_stdio_transport(max_line_bytes, in_fd=in_fd, out_fd=out_fd) as transport:
        await handler(transport)
