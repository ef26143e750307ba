"""The supervisor a ``proc`` node runs under, and the host's side of it.

Layer: runtime (anyio processes). Used by :mod:`a2e_host.chains.proc` only.

What it does (the *Spawn* and *Ending* parts of :mod:`a2e_host.chains.proc`'s theory of
operation): :data:`SUPERVISOR`, run as ``python -I -S``, becomes a child subreaper, forks
the child into a new session in the ``cwd`` the host opened by handle and execs the real
file resolved at start (refusing another inode there), then reports on a socket pair.
Closing the host's end, or the host dying, has it end the whole tree below it (SIGTERM, a
grace period, SIGKILL) and exit. :func:`spawn_supervisor` starts it; :class:`Supervisor`
is the host's end, whose :meth:`~Supervisor.end` is shielded and bounded in time and falls
back to killing the child's process group when the supervisor itself was killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys

import anyio
import structlog
from anyio.abc import Process

from ..exceptions import NodeError
from .proc_policy import Executable

__all__ = ["SUPERVISOR", "Supervisor", "become_subreaper", "spawn_supervisor"]

_log = structlog.get_logger("a2e_host.chains.proc")
_REAP_TIMEOUT = 5.0
_subreaper_done = False

SUPERVISOR = r"""
import os, select, sys, time, _signal as S
ctl, cwd, exe, dev, ino, grace = sys.argv[1:7]
ctl, cwd, dev, ino, grace, argv = int(ctl), int(cwd), int(dev), int(ino), float(grace), sys.argv[7:]
try:
    import ctypes
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
except Exception:
    pass
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        os.setsid()
        os.fchdir(cwd)
        st = os.stat(exe)
        if (st.st_dev, st.st_ino) != (dev, ino):
            os.write(w, b"changed")
            os._exit(127)
        os.close(ctl)
        os.close(cwd)
        S.signal(S.SIGPIPE, S.SIG_DFL)
        S.signal(S.SIGXFSZ, S.SIG_DFL)
        os.execv(exe, argv)
    except OSError as e:
        os.write(w, b"%d" % (e.errno or 0))
    except BaseException:
        os.write(w, b"0")
    os._exit(127)
os.close(w)
os.close(cwd)
os.write(ctl, b"F %d\n" % pid)
failed = os.read(r, 64)
os.close(r)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
os.close(null)

def tell(line):
    try:
        os.write(ctl, line)
    except OSError:
        pass

child_reaped = []

def reap():
    while True:
        try:
            p, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if p == 0:
            return
        if p == pid:
            child_reaped.append(p)
            tell(b"X %d\n" % os.waitstatus_to_exitcode(status))

def tree():
    # every live process below this one, through /proc parent links
    kids = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if name.isdigit():
            try:
                with open("/proc/" + name + "/stat", "rb") as f:
                    data = f.read()
            except OSError:
                continue
            fields = data[data.rfind(b")") + 2:].split()
            if fields and fields[0] != b"Z":
                kids.setdefault(int(fields[1]), []).append(int(name))
    out, todo = [], [os.getpid()]
    while todo:
        for kid in kids.get(todo.pop(), ()):
            out.append(kid)
            todo.append(kid)
    return out

def signal_all(sig):
    try:
        os.killpg(pid, sig)
    except OSError:
        pass
    pids = tree()
    for p in pids:
        try:
            os.kill(p, sig)
        except OSError:
            pass
    return pids

tell(b"E %s\n" % failed if failed else b"R\n")
wake_r, wake_w = os.pipe()
os.set_blocking(wake_w, False)
S.set_wakeup_fd(wake_w)
S.signal(S.SIGCHLD, lambda *a: None)
pending = b""
while True:
    reap()
    ready = select.select([ctl, wake_r], [], [])[0]
    if wake_r in ready:
        os.read(wake_r, 512)
    if ctl in ready:
        try:
            data = os.read(ctl, 64)
        except OSError:
            data = b""
        if not data:
            break
        pending += data
        while b"\n" in pending:
            line, _, pending = pending.partition(b"\n")
            # "K <signal>": signal the child's process group; only while the child is
            # unreaped, so its pid (the group id) cannot belong to anyone else
            if line[:2] == b"K " and line[2:].isdigit() and not child_reaped:
                try:
                    os.killpg(pid, int(line[2:]))
                except OSError:
                    pass
if signal_all(S.SIGTERM):  # nothing left below us (the usual case): nothing to wait for
    end = time.monotonic() + grace
    while time.monotonic() < end:
        reap()
        if not tree():
            break
        time.sleep(0.01)
    for _ in range(500):
        reap()
        if not signal_all(S.SIGKILL):
            break
        time.sleep(0.002)
# reap the last zombies: the host (a subreaper) would inherit them and never wait for them
# (the child too, when the first signal ended it before tree() looked: it is reported)
end = time.monotonic() + 2
while time.monotonic() < end:
    try:
        p, status = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        break
    if p == 0:
        time.sleep(0.005)
    elif p == pid:
        tell(b"X %d\n" % os.waitstatus_to_exitcode(status))
os._exit(0)
"""
"""The supervisor each proc node runs under (see the module docstring): ``argv`` is
``ctl_fd cwd_fd exe st_dev st_ino grace argv0 args…``. Reports on ``ctl``: ``F <pid>``
(forked), then ``R`` (running) or ``E <errno>`` / ``E changed`` (not started), then
``X <exit code>`` (the child exited; negative for a signal). The host may write
``K <signal number>`` lines on ``ctl``: the child's process group gets that signal (while
the child is unreaped). Closing ``ctl`` tells it to end the tree and exit."""


async def spawn_supervisor(
    exe: Executable,
    argv: list[str],
    cwd_fd: int,
    *,
    env: dict[str, str],
    stdin_piped: bool,
    kill_grace: float,
) -> Supervisor:
    """Start :data:`SUPERVISOR` for one proc node; the child is ``exe`` run as ``argv``.

    Args:
        exe: the allowlisted executable; its ``name`` is the child's ``argv[0]``.
        argv: the node's ``argv`` (``argv[0]`` only names it in errors).
        cwd_fd: a directory handle for the child's working directory (left open).
        env: the child's whole environment.
        stdin_piped: give the child a stdin pipe (else ``/dev/null``).
        kill_grace: float seconds between SIGTERM and SIGKILL when the tree is ended.

    Raises:
        NodeError: the supervisor could not be started.
    """
    ours, theirs = socket.socketpair()
    try:
        # Shielded: a cancel landing while the pipes are being connected would
        # otherwise leave a running supervisor with no handle to stop it by.
        with anyio.CancelScope(shield=True):
            process = await anyio.open_process(
                [
                    sys.executable, "-I", "-S", "-c", SUPERVISOR,
                    str(theirs.fileno()), str(cwd_fd), exe.real, str(exe.dev),
                    str(exe.ino), repr(kill_grace), exe.name, *argv[1:],
                ],
                stdin=subprocess.PIPE if stdin_piped else subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                pass_fds=(theirs.fileno(), cwd_fd),
            )
    except OSError as exc:
        ours.close()
        raise NodeError(
            f"proc: could not start {argv[0]!r}: {exc.strerror or exc}"
        ) from None
    except BaseException:
        ours.close()  # no supervisor will own it
        raise
    finally:
        theirs.close()
    return Supervisor(process, ours)


class Supervisor:
    """The host's side of one supervisor: its process and the socket it reports on."""

    def __init__(self, process: Process, ctl: socket.socket) -> None:
        self.process = process
        self.ctl = ctl
        ctl.setblocking(False)
        self.child_pid: int | None = None
        self._buf = b""
        self._lost = False

    async def _line(self) -> str | None:
        """The next report line, or None once the supervisor is gone."""
        while b"\n" not in self._buf:
            if self._lost:
                return None
            await anyio.wait_readable(self.ctl)
            try:
                data = self.ctl.recv(256)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                self._lost = True
                return None
            self._buf += data
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode("ascii", "replace")

    async def started(self, shown: str, exe: Executable) -> None:
        """Wait for ``F <pid>`` then ``R``; return early if the supervisor vanished
        (then :meth:`exit_code` answers None).

        Raises:
            NodeError: the executable could not be started or was replaced.
        """
        line = await self._line()
        if line is not None and line.startswith("F "):
            self.child_pid = int(line[2:])
            line = await self._line()
            if line == "R" or line is None:
                return
        if line == "E changed":
            raise NodeError(
                f"proc: executable {shown!r} was replaced since the host started "
                f"({exe.real} is no longer the file that was allowed); restart the host "
                f"to allow the new file"
            )
        reason = "its supervisor did not start"
        if line is not None and line.startswith("E "):
            code = int(line[2:]) if line[2:].isdigit() else 0
            reason = os.strerror(code) if code else "exec failed"
        raise NodeError(f"proc: could not start {shown!r}: {reason}")

    async def exit_code(self) -> int | None:
        """The child's exit code (``-signal`` when killed), or None if the supervisor
        vanished first."""
        while True:
            line = await self._line()
            if line is None:
                return None
            if line.startswith("X "):
                return int(line[2:])

    def signal(self, signum: int) -> None:
        """Have the supervisor send ``signum`` to the child's process group (``K`` line);
        nothing once the child was reaped or the supervisor is gone. Never blocks."""
        with contextlib.suppress(OSError):
            self.ctl.send(b"K %d\n" % signum)

    def request_end(self) -> None:
        """Tell the supervisor to end the tree and exit (shuts ``ctl`` for writing)
        without waiting and without closing the pipes, so output still in them can be
        read, and so can its last report (:meth:`exit_code`); :meth:`end` must follow."""
        with contextlib.suppress(OSError):
            self.ctl.shutdown(socket.SHUT_WR)

    async def end(self, grace: float) -> None:
        """Have the supervisor end the tree, then reap it; shielded and bounded. When the
        supervisor is gone or does not answer, kill the child's process group ourselves."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(grace + _REAP_TIMEOUT):
            self.ctl.close()
            with anyio.move_on_after(grace + 2.0):
                await self.process.wait()
            if self.process.returncode is None:
                self._lost = True
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
            if self._lost and self.child_pid is not None:
                await _end_group(self.child_pid, grace)
            await self.process.wait()
            await self.process.aclose()



def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _reap_orphans(pgid: int) -> bool:
    """Reap exited members of group ``pgid`` re-parented to us; True when none is left."""
    while True:
        try:
            pid, _ = os.waitpid(-pgid, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return False


async def _end_group(pgid: int, grace: float) -> None:
    """The fallback when a supervisor is gone: terminate the child's process group and
    reap its members re-parented to the host (a subreaper)."""
    if _group_alive(pgid):
        _signal_group(pgid, signal.SIGTERM)
        with anyio.move_on_after(grace):
            while _group_alive(pgid) and not _reap_orphans(pgid):  # noqa: ASYNC110
                await anyio.sleep(0.01)
        _signal_group(pgid, signal.SIGKILL)
    while not _reap_orphans(pgid):  # noqa: ASYNC110 - no event for an exit
        await anyio.sleep(0.01)


def become_subreaper() -> None:
    """On Linux, adopt orphaned descendants (PR_SET_CHILD_SUBREAPER) so they are reaped."""
    global _subreaper_done
    if _subreaper_done:
        return
    _subreaper_done = True
    if sys.platform != "linux":
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):  # pragma: no cover - not Linux libc
        _log.debug("could not become a child subreaper")
