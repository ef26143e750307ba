"""The ``proc`` node executor: run an allowlisted executable, never through a shell, and
end its whole process tree.

Layer: runtime (anyio processes). Source: PROTOCOL.md §5 (kind ``proc``) and §8.

Theory of operation:

* **Policy.** Denied by default. :class:`ProcPolicy` resolves each ``HostConfig.allow_proc``
  entry once, at start, to an :class:`Executable`: the name as allowlisted, its absolute
  path, the real file behind it and that file's ``(st_dev, st_ino)``. A node's ``argv[0]``
  must be an allowlisted name exactly, or the absolute path an entry resolved to; nothing
  is looked up on ``PATH`` per request. The host executes the real file it resolved at
  start (refusing if the file at that path is no longer the same inode) and passes the
  *allowlisted name* as the child's ``argv[0]``, so a multi-call binary (``xzcat`` → ``xz``,
  ``rbash`` → ``bash``) behaves as the name that was allowed, whatever the node asked for.
* **Environment.** Minimal (``PATH``, ``LANG``, ``HOME``) plus the host variables named in
  ``HostConfig.proc_env_allow``, plus the node's ``env``, whose keys must be listed in
  ``HostConfig.proc_env_keys`` (none by default); dynamic-loader variables (``LD_*``,
  ``DYLD_*``) are refused even when listed.
* **Host-wide slots.** At most ``HostConfig.max_procs`` proc nodes run at once on the
  host, all sessions together; a further one *waits* for a slot (after its checks, so a
  refusal is immediate), bounded by its chain's timeout and cancellable like any node.
  A slot is held from spawn until the node's whole tree is reaped.
* **Spawn.** Each node runs under a small supervisor (``python -I -S``, about 15 ms on an
  idle 2-core machine): it makes itself a child subreaper (``PR_SET_CHILD_SUBREAPER``), so
  every process the node's tree orphans, ``setsid`` or not, is re-parented to it; it
  ``fchdir``-s to the ``cwd`` the host opened by handle below the root; it forks the
  child into a new session and execs it; it reports the child's pid, exec failure and exit
  status to the host on a socket pair. stdin is ``/dev/null`` unless ``stdin`` is given.
* **Output.** stdout and stderr are read concurrently (no pipe deadlock), each kept up to
  its byte cap and the rest drained and dropped (``truncated: true``); decoded as UTF-8
  with U+FFFD for invalid bytes.
* **Ending.** When the child has exited and the pipes are closed, or on the proc's own
  ``timeout``, or when the calling task is cancelled (node/chain timeout, cancel,
  disconnect), the host closes its end of the socket pair. The supervisor then signals
  every process below it (found through ``/proc`` parent links; its subreaper role keeps
  them all below it): SIGTERM, a grace period, SIGKILL until none is left; it reaps them
  and exits. The host also closing the socket by dying has the same effect. This
  cleanup runs in a shielded cancel scope bounded in time, then cancellation is re-raised.
  Should the supervisor itself be killed (by the tree it supervises), the host falls back
  to killing the child's process group and reaping what was re-parented to it (the host
  is a child subreaper too).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import anyio
import msgspec
import structlog
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

from ..config import HostConfig
from ..exceptions import NodeError, NodeTimeout
from ..tools.confine import PathRefused, RootDir
from .messages import ChainNode

__all__ = [
    "ProcPolicy",
    "ProcInput",
    "Executable",
    "run_proc",
    "DEFAULT_MAX_STREAM_BYTES",
    "DEFAULT_MAX_PROCS",
]

DEFAULT_MAX_STREAM_BYTES = 1024 * 1024
DEFAULT_MAX_PROCS = 32
"""Proc nodes running at once on a host by default (``HostConfig.max_procs``)."""
"""Bytes of stdout (and, separately, of stderr) kept per process, by default."""

_log = structlog.get_logger("a2e_host.chains.proc")
_BASE_ENV = ("PATH", "LANG", "HOME")
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_REAP_TIMEOUT = 5.0
_STDERR_TAIL = 400
_subreaper_done = False


_LOADER_PREFIXES = ("LD_", "DYLD_")
"""Environment variable prefixes of the dynamic loaders (glibc/musl, macOS) a node's
``env`` may not set."""

_SUPERVISOR = r"""
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

def reap():
    while True:
        try:
            p, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if p == 0:
            return
        if p == pid:
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
while True:
    reap()
    ready = select.select([ctl, wake_r], [], [])[0]
    if wake_r in ready:
        os.read(wake_r, 512)
    if ctl in ready:
        try:
            if os.read(ctl, 64):
                continue
        except OSError:
            pass
        break
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
end = time.monotonic() + 2
while time.monotonic() < end:
    try:
        if os.waitpid(-1, os.WNOHANG)[0] == 0:
            time.sleep(0.005)
    except ChildProcessError:
        break
os._exit(0)
"""
"""The supervisor each proc node runs under (see the module docstring): ``argv`` is
``ctl_fd cwd_fd exe st_dev st_ino grace argv0 args…``. Reports on ``ctl``: ``F <pid>``
(forked), then ``R`` (running) or ``E <errno>`` / ``E changed`` (not started), then
``X <exit code>`` (the child exited; negative for a signal). Closing ``ctl`` tells it to
end the tree and exit."""


@dataclass(frozen=True, slots=True)
class Executable:
    """One allowlisted executable, resolved once at start.

    Attributes:
        name: the allowlist entry as configured (a name such as ``xzcat`` or an absolute
            path); it is the ``argv[0]`` the child receives.
        path: the absolute path the entry resolved to on ``PATH`` (may be a symlink).
        real: the file behind ``path`` (symlinks resolved): what is executed.
        dev / ino: ``real``'s ``st_dev`` / ``st_ino`` at start; a different file there
            later is refused.
    """

    name: str
    path: str
    real: str
    dev: int
    ino: int

    @classmethod
    def resolve(cls, name: str, path: str) -> Executable:
        """The executable of entry ``name`` found at ``path``.

        Raises:
            ValueError: ``path`` cannot be examined.
        """
        real = os.path.realpath(path)
        try:
            st = os.stat(real)
        except OSError as exc:
            raise ValueError(
                f"allow_proc entry {name!r} ({path}) cannot be examined: {exc.strerror or exc}"
            ) from None
        return cls(name, os.path.abspath(path), real, st.st_dev, st.st_ino)


class ProcInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A proc node's resolved input (PROTOCOL.md §5).

    Attributes:
        argv: the command and its arguments; ``argv[0]`` must be an allowlisted name (or
            the absolute path it resolved to); no element may contain a NUL byte.
        stdin: text written to the child's stdin (UTF-8), None for ``/dev/null``.
        cwd: working directory relative to (and confined to) the root; None = the root.
        env: extra environment variables for the child; each key must be listed in
            ``HostConfig.proc_env_keys``.
        timeout: float seconds before the process tree is killed; None = no own limit.
        check: a non-zero exit fails the node when true.
    """

    argv: Annotated[list[str], msgspec.Meta(min_length=1)]
    stdin: str | None = None
    cwd: str | None = None
    env: dict[str, str] = {}
    timeout: Annotated[float, msgspec.Meta(gt=0)] | None = None
    check: bool = True


class ProcPolicy:
    """What proc nodes may run, where and with what (denied by default).

    Args:
        allowed: allowlisted name → absolute path (as given by ``shutil.which``); each is
            resolved to an :class:`Executable` now.
        root: the directory ``cwd`` is confined to (opened by handle on first use).
        env_allow: names of host environment variables passed through to children.
        env_keys: names a node's ``env`` may set (``LD_*`` / ``DYLD_*`` never).
        max_stdout_bytes / max_stderr_bytes: bytes kept of each stream.
        kill_grace: float seconds between SIGTERM and SIGKILL.
        max_procs: proc nodes running at once under this policy (the host's
            ``max_procs``); further ones wait for a slot.

    Raises:
        ValueError: an ``allowed`` path that cannot be examined, or ``max_procs`` < 1.
    """

    def __init__(
        self,
        allowed: dict[str, str] | None = None,
        *,
        root: Path | None = None,
        env_allow: tuple[str, ...] = (),
        env_keys: tuple[str, ...] = (),
        max_stdout_bytes: int = DEFAULT_MAX_STREAM_BYTES,
        max_stderr_bytes: int = DEFAULT_MAX_STREAM_BYTES,
        kill_grace: float = 0.5,
        max_procs: int = DEFAULT_MAX_PROCS,
    ) -> None:
        if max_procs < 1:
            raise ValueError(f"max_procs must be a positive integer, got {max_procs}")
        self.allowed: dict[str, str] = dict(allowed or {})
        self.executables = [Executable.resolve(n, p) for n, p in self.allowed.items()]
        self._by_argv0: dict[str, Executable] = {e.name: e for e in self.executables}
        for e in self.executables:
            self._by_argv0.setdefault(e.path, e)
        self.root = (root or Path(".")).resolve()
        self._rootdir: RootDir | None = None
        self.env_allow = env_allow
        self.env_keys = env_keys
        self.max_stdout_bytes = max_stdout_bytes
        self.max_stderr_bytes = max_stderr_bytes
        self.kill_grace = kill_grace
        self.max_procs = max_procs
        self._slots: anyio.Semaphore | None = None

    @property
    def slots(self) -> anyio.Semaphore:
        """The host-wide semaphore of ``max_procs`` proc slots (made on first use, in the
        running event loop)."""
        if self._slots is None:
            self._slots = anyio.Semaphore(self.max_procs)
        return self._slots

    @property
    def procs_running(self) -> int:
        """Proc nodes holding a slot now (spawning, running or being reaped)."""
        return 0 if self._slots is None else self.max_procs - self._slots.value

    @classmethod
    def from_config(cls, config: HostConfig, **options: Any) -> ProcPolicy:
        """The policy of ``config``: ``allow_proc``, ``root_path``, ``proc_env_allow``,
        ``proc_env_keys``, ``max_procs``.

        Args:
            options: :class:`ProcPolicy` keyword options (caps, grace).

        Raises:
            ValueError: an ``allow_proc`` entry that is not an executable on ``PATH``.
        """
        allowed: dict[str, str] = {}
        for name in config.allow_proc:
            path = shutil.which(name)
            if path is None:
                raise ValueError(
                    f"allow_proc entry {name!r} is not an executable on PATH; "
                    f"give its absolute path or install it"
                )
            allowed[name] = os.path.abspath(path)
        return cls(
            allowed,
            root=config.root_path,
            env_allow=config.proc_env_allow,
            env_keys=config.proc_env_keys,
            **{"max_procs": config.max_procs, **options},
        )

    def resolve(self, name: str) -> tuple[Executable | None, str | None]:
        """``(executable, None)`` when ``argv[0] == name`` may run, else ``(None, refusal)``.

        Only exact allowlisted names and the absolute paths they resolved to at start
        match; another path to the same file (``/usr/bin/bash`` for ``rbash``) does not.
        """
        if not self.allowed:
            return None, (
                f"proc nodes are disabled on this host (no executable is allowed); "
                f"start it with --allow-proc {name or '<name>'}"
            )
        if not name:
            return None, "argv[0] is empty; give the executable to run"
        found = self._by_argv0.get(name)
        if found is None:
            allowed = ", ".join(sorted(self.allowed))
            return None, (
                f"executable {name!r} is not allowed for proc nodes (allowed: {allowed}); "
                f"give one of those names as argv[0], or add it with --allow-proc"
            )
        return found, None

    def check_argv0(self, name: str) -> str | None:
        """A refusal message for running ``name``, or None when it is allowed."""
        return self.resolve(name)[1]

    def static_check(self, node: ChainNode) -> str | None:
        """Validation-time check of a proc node's static ``argv`` (or ``cmd``) and ``env``.

        Returns:
            A refusal naming the node and field, or None (allowed, or decided at run time
            because the field comes from ``input_map``).
        """
        env = node.input.get("env")
        if env is not None and "env" not in node.input_map:
            problem = self.env_problem(env)
            if problem:
                return f"proc node {node.node_id!r}: {problem}"
        if "argv" in node.input_map or "cmd" in node.input_map:
            return None
        key = "argv" if "argv" in node.input else "cmd"
        argv = node.input.get(key)
        if argv is None:
            return f"proc node {node.node_id!r} has no input 'argv'; give the command as a list"
        problem = _argv_problem(argv)
        if problem:
            return f"proc node {node.node_id!r}: input {key!r} {problem}"
        refusal = self.check_argv0(argv[0])
        return f"proc node {node.node_id!r}: {refusal}" if refusal else None

    def env_problem(self, env: Any) -> str | None:
        """Why a node's ``env`` is refused, or None.

        Refused: not an object of strings; a dynamic-loader variable (``LD_*``,
        ``DYLD_*``: it would run other code inside any allowed executable, so the allowlist
        would no longer bound what runs), even when listed; a key not in
        ``proc_env_keys``; a NUL byte in a value.
        """
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            return "input 'env' must be an object of string values"
        loader = sorted(k for k in env if k.upper().startswith(_LOADER_PREFIXES))
        if loader:
            return (
                f"env may not set {', '.join(loader)}: dynamic-loader variables would run "
                "other code inside the allowed executable; remove them"
            )
        unknown = sorted(k for k in env if k not in self.env_keys)
        if unknown:
            allowed = ", ".join(self.env_keys) if self.env_keys else "none"
            return (
                f"env key {unknown[0]!r} is not allowed (keys a node may set: {allowed}); "
                f"remove it, or have the operator list it in proc_env_keys "
                f"(A2E_PROC_ENV_KEYS or proc_env_keys in the configuration file)"
            )
        nul = sorted(k for k, v in env.items() if "\x00" in v)
        if nul:
            return f"env value of {nul[0]!r} contains a NUL byte; remove it"
        return None

    def child_path(self) -> str:
        return os.environ.get("PATH", _DEFAULT_PATH)

    def child_env(self, extra: dict[str, str]) -> dict[str, str]:
        """The child's environment: PATH, LANG, HOME, the allowed names, then ``extra``.

        Raises:
            NodeError: ``extra`` is refused (see :meth:`env_problem`).
        """
        problem = self.env_problem(extra)
        if problem:
            raise NodeError(f"proc: {problem}")
        env = {"PATH": self.child_path(), "LANG": os.environ.get("LANG", "C.UTF-8")}
        for name in (*_BASE_ENV[2:], *self.env_allow):
            if name in os.environ:
                env[name] = os.environ[name]
        env.update(extra)
        return env

    @contextlib.contextmanager
    def open_cwd(self, cwd: str | None) -> Iterator[int]:
        """A directory handle for ``cwd`` (relative to the root), opened by handle below
        it; closed on exit.

        Raises:
            NodeError: ``cwd`` leaves the root or is not a directory.
        """
        shown = "." if cwd is None else cwd
        try:
            if self._rootdir is None:
                self._rootdir = RootDir(self.root)
            fd = self._rootdir.open_dir(shown).fd
        except PathRefused as exc:
            raise NodeError(f"proc: cwd {shown!r} is refused: {exc.reason}") from None
        except OSError:
            raise NodeError(f"proc: cwd {shown!r} is not a directory under the root") from None
        try:
            yield fd
        finally:
            os.close(fd)


def _argv_problem(argv: Any) -> str | None:
    if isinstance(argv, str):
        return 'must be a list of strings, not a shell command line; split it, e.g. ["ls", "-l"]'
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return "must be a non-empty list of strings"
    for i, arg in enumerate(argv):
        if "\x00" in arg:
            return f"element {i} contains a NUL byte, which no program can receive; remove it"
    return None


def _parse(args: dict[str, Any]) -> ProcInput:
    if "argv" not in args and "cmd" in args:
        args = {("argv" if k == "cmd" else k): v for k, v in args.items()}
    problem = _argv_problem(args.get("argv")) if "argv" in args else None
    if problem:
        raise NodeError(f"proc: input 'argv' {problem}")
    try:
        return msgspec.convert(args, ProcInput)
    except msgspec.ValidationError as exc:
        text = str(exc).replace(" - at `$.", " at input '").replace("`", "'")
        if text.startswith("Object missing required field"):
            text = "input 'argv' is required: the command as a list of strings"
        raise NodeError(f"proc: {text}") from None


class _Capture:
    """Keeps the first ``cap`` bytes of a stream, drains the rest."""

    __slots__ = ("cap", "data", "truncated")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.truncated = False

    async def drain(self, stream: ByteReceiveStream) -> None:
        async for chunk in stream:
            room = self.cap - len(self.data)
            if room >= len(chunk):
                self.data += chunk
            else:
                if room > 0:
                    self.data += chunk[:room]
                self.truncated = True

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


async def _feed(stream: ByteSendStream, data: bytes) -> None:
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.send(data)
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        await stream.aclose()


async def run_proc(
    args: dict[str, Any], policy: ProcPolicy, *, node_id: str = ""
) -> dict[str, Any]:
    """Run one proc node (PROTOCOL.md §5) and return its output.

    Args:
        args: the resolved input, see :class:`ProcInput` (``cmd`` accepted for ``argv``).
        policy: what may run, where, and the stream caps.
        node_id: for log lines.

    Returns:
        ``{"exit_code": int, "stdout": str, "stderr": str, "duration_ms": int,
        "truncated": bool}``; ``exit_code`` is negative (``-signal``) when killed.

    Raises:
        NodeError: invalid input (a NUL byte in ``argv``, a refused ``env`` key), a refused
            executable or ``cwd``, an executable replaced since start, a start failure,
            or a non-zero exit while ``check`` is true (message has the code and stderr
            tail).
        NodeTimeout: the proc's own ``timeout`` passed ("process timed out after 1 s");
            the tree was killed.

    Waits for one of the policy's ``max_procs`` slots first (cancellable: the chain's
    timeout bounds the wait). Cancellation of the caller kills the tree (SIGTERM, grace,
    SIGKILL), reaps it, and propagates.
    """
    spec = _parse(args)
    exe, refusal = policy.resolve(spec.argv[0])
    if exe is None:
        raise NodeError(f"proc: {refusal}")
    env = policy.child_env(spec.env)
    if not sys.executable:
        raise NodeError(
            "proc: this host has no Python executable to supervise processes with "
            "(sys.executable is empty); run the host with a regular Python interpreter"
        )
    stdin_data = None if spec.stdin is None else spec.stdin.encode("utf-8")
    _become_subreaper()
    async with policy.slots:
        return await _run(spec, exe, env, stdin_data, policy, node_id)


async def _run(
    spec: ProcInput,
    exe: Executable,
    env: dict[str, str],
    stdin_data: bytes | None,
    policy: ProcPolicy,
    node_id: str,
) -> dict[str, Any]:
    """Spawn, supervise and end one checked proc node (see :func:`run_proc`)."""
    started = time.monotonic()
    with policy.open_cwd(spec.cwd) as cwd_fd:
        ours, theirs = socket.socketpair()
        try:
            # Shielded: a cancel landing while the pipes are being connected would
            # otherwise leave a running supervisor with no handle to stop it by.
            with anyio.CancelScope(shield=True):
                process = await anyio.open_process(
                    [
                        sys.executable, "-I", "-S", "-c", _SUPERVISOR,
                        str(theirs.fileno()), str(cwd_fd), exe.real, str(exe.dev),
                        str(exe.ino), repr(policy.kill_grace), exe.name, *spec.argv[1:],
                    ],
                    stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,
                    pass_fds=(theirs.fileno(), cwd_fd),
                )
        except OSError as exc:
            ours.close()
            raise NodeError(
                f"proc: could not start {spec.argv[0]!r}: {exc.strerror or exc}"
            ) from None
        except BaseException:
            ours.close()  # no supervisor will own it
            raise
        finally:
            theirs.close()
    supervisor = _Supervisor(process, ours)
    out, err = _Capture(policy.max_stdout_bytes), _Capture(policy.max_stderr_bytes)
    code: int | None = None
    try:
        await supervisor.started(spec.argv[0], exe)
        _log.debug("proc started", node_id=node_id, pid=supervisor.child_pid, exe=exe.real)
        with anyio.move_on_after(spec.timeout) as scope:
            async with anyio.create_task_group() as tg:
                assert process.stdout is not None and process.stderr is not None
                tg.start_soon(out.drain, process.stdout)
                tg.start_soon(err.drain, process.stderr)
                if stdin_data is not None and process.stdin is not None:
                    tg.start_soon(_feed, process.stdin, stdin_data)
                code = await supervisor.exit_code()
                if code is None:  # nobody is left to end the tree: do not wait for pipes
                    tg.cancel_scope.cancel()
    finally:
        await supervisor.end(policy.kill_grace)
    duration_ms = int((time.monotonic() - started) * 1000)
    if scope.cancelled_caught:
        raise NodeTimeout(
            f"process {spec.argv[0]!r} timed out after {spec.timeout:g} s and was killed",
            node_id=node_id,
            details={"timeout": spec.timeout},
        )
    if code is None:
        raise NodeError(
            f"process {spec.argv[0]!r} lost its supervisor (was it killed by the process "
            f"itself?); its process group was killed",
            node_id=node_id,
        )
    result = {
        "exit_code": code,
        "stdout": out.text(),
        "stderr": err.text(),
        "duration_ms": duration_ms,
        "truncated": out.truncated or err.truncated,
    }
    if code != 0 and spec.check:
        tail = err.text().strip()[-_STDERR_TAIL:]
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        raise NodeError(
            f"process {spec.argv[0]!r} {how}"
            + (f"; stderr ends: {tail}" if tail else "; stderr was empty")
            + " (set check: false to accept non-zero exits)",
            node_id=node_id,
            details={"exit_code": code},
        )
    return result


class _Supervisor:
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


def _become_subreaper() -> None:
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
