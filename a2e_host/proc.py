"""The ``proc`` node executor: run an allowlisted executable, never through a shell.

Layer: runtime (anyio processes). Source: PROTOCOL.md §5 (kind ``proc``) and §8.

Theory of operation:

* **Policy.** Denied by default. :class:`ProcPolicy` resolves ``HostConfig.allow_proc`` to
  absolute paths once; a node's ``argv[0]`` is resolved the same way (on the child's
  ``PATH``) and must be one of them. The resolved absolute path is what is executed.
* **Spawn.** ``anyio.open_process`` with ``start_new_session=True``: the child leads its
  own process group, so the whole tree can be signalled at once. The environment is
  minimal (``PATH``, ``LANG``, ``HOME``) plus ``HostConfig.proc_env_allow`` plus the node's
  ``env``; stdin is ``/dev/null`` unless ``stdin`` is given; ``cwd`` is confined to the root.
* **Output.** stdout and stderr are read concurrently (no pipe deadlock), each kept up to
  its byte cap and the rest drained and dropped (``truncated: true``); decoded as UTF-8
  with U+FFFD for invalid bytes.
* **Ending.** When the process and its pipes are done, or on the proc's own ``timeout``,
  or when the calling task is cancelled (node/chain timeout, cancel, disconnect), the
  group gets SIGTERM, a grace period, then SIGKILL; the child is reaped. This cleanup
  runs in a shielded cancel scope bounded in time, then cancellation is re-raised.
  Orphaned grandchildren are reaped too: on Linux the host makes itself a child
  subreaper (``PR_SET_CHILD_SUBREAPER``) the first time it spawns, so they are
  re-parented to it rather than left as zombies under an init that does not reap.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import anyio
import msgspec
import structlog
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

from .config import HostConfig
from .exceptions import NodeError, NodeTimeout
from .messages import ChainNode

__all__ = ["ProcPolicy", "ProcInput", "run_proc", "DEFAULT_MAX_STREAM_BYTES"]

DEFAULT_MAX_STREAM_BYTES = 1024 * 1024
"""Bytes of stdout (and, separately, of stderr) kept per process, by default."""

_log = structlog.get_logger("a2e_host.proc")
_BASE_ENV = ("PATH", "LANG", "HOME")
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_REAP_TIMEOUT = 5.0
_STDERR_TAIL = 400
_subreaper_done = False


_LOADER_PREFIXES = ("LD_", "DYLD_")
"""Environment variable prefixes of the dynamic loaders (glibc/musl, macOS) a node's
``env`` may not set."""

class ProcInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A proc node's resolved input (PROTOCOL.md §5).

    Attributes:
        argv: the command and its arguments; ``argv[0]`` must be allowlisted.
        stdin: text written to the child's stdin (UTF-8), None for ``/dev/null``.
        cwd: working directory relative to (and confined to) the root; None = the root.
        env: extra environment variables for the child.
        timeout: float seconds before the process group is killed; None = no own limit.
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
        allowed: allowlisted name → absolute path (as given by ``shutil.which``).
        root: the directory ``cwd`` is confined to.
        env_allow: names of host environment variables passed through to children.
        max_stdout_bytes / max_stderr_bytes: bytes kept of each stream.
        kill_grace: float seconds between SIGTERM and SIGKILL.
    """

    def __init__(
        self,
        allowed: dict[str, str] | None = None,
        *,
        root: Path | None = None,
        env_allow: tuple[str, ...] = (),
        max_stdout_bytes: int = DEFAULT_MAX_STREAM_BYTES,
        max_stderr_bytes: int = DEFAULT_MAX_STREAM_BYTES,
        kill_grace: float = 0.5,
    ) -> None:
        self.allowed: dict[str, str] = dict(allowed or {})
        self._real = {os.path.realpath(p) for p in self.allowed.values()}
        self.root = (root or Path(".")).resolve()
        self.env_allow = env_allow
        self.max_stdout_bytes = max_stdout_bytes
        self.max_stderr_bytes = max_stderr_bytes
        self.kill_grace = kill_grace

    @classmethod
    def from_config(cls, config: HostConfig, **options: Any) -> ProcPolicy:
        """The policy of ``config``: ``allow_proc``, ``root_path``, ``proc_env_allow``.

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
        return cls(allowed, root=config.root_path, env_allow=config.proc_env_allow, **options)

    def resolve(self, name: str) -> tuple[str | None, str | None]:
        """``(absolute path, None)`` when ``name`` may run, else ``(None, refusal)``."""
        if not self.allowed:
            return None, (
                f"proc nodes are disabled on this host (no executable is allowed); "
                f"start it with --allow-proc {name or '<name>'}"
            )
        if not name:
            return None, "argv[0] is empty; give the executable to run"
        path = shutil.which(name, path=self.child_path()) if "/" not in name else name
        if path is None or os.path.realpath(path) not in self._real:
            allowed = ", ".join(sorted(self.allowed))
            return None, (
                f"executable {name!r} is not allowed for proc nodes (allowed: {allowed}); "
                f"add it with --allow-proc"
            )
        return os.path.abspath(path), None

    def check_argv0(self, name: str) -> str | None:
        """A refusal message for running ``name``, or None when it is allowed."""
        return self.resolve(name)[1]

    def static_check(self, node: ChainNode) -> str | None:
        """Validation-time check of a proc node whose ``argv`` (or ``cmd``) is static.

        Returns:
            A refusal naming the node and field, or None (allowed, or decided at run time
            because ``argv`` comes from ``input_map``).
        """
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

    def child_path(self) -> str:
        return os.environ.get("PATH", _DEFAULT_PATH)

    def child_env(self, extra: dict[str, str]) -> dict[str, str]:
        """The child's environment: PATH, LANG, HOME, the allowed names, then ``extra``.

        Raises:
            NodeError: ``extra`` sets a dynamic-loader variable (``LD_*``, ``DYLD_*``):
                it would run the agent's code inside any allowed executable, so the
                allowlist would no longer bound what runs.
        """
        loader = sorted(k for k in extra if k.upper().startswith(_LOADER_PREFIXES))
        if loader:
            raise NodeError(
                f"proc: env may not set {', '.join(loader)}: dynamic-loader variables would "
                "run other code inside the allowed executable; remove them"
            )
        env = {"PATH": self.child_path(), "LANG": os.environ.get("LANG", "C.UTF-8")}
        for name in (*_BASE_ENV[2:], *self.env_allow):
            if name in os.environ:
                env[name] = os.environ[name]
        env.update(extra)
        return env

    def child_cwd(self, cwd: str | None) -> str:
        """The absolute working directory for ``cwd`` (relative to the root).

        Raises:
            NodeError: ``cwd`` leaves the root or is not a directory.
        """
        if cwd is None:
            return str(self.root)
        if ".." in Path(cwd).parts:
            raise NodeError(f"proc: cwd {cwd!r} is refused: '..' components are not allowed")
        real = (self.root / cwd).resolve()
        if not (real == self.root or real.is_relative_to(self.root)):
            raise NodeError(
                f"proc: cwd {cwd!r} is refused: it must be inside the root {str(self.root)!r}"
            )
        if not real.is_dir():
            raise NodeError(f"proc: cwd {cwd!r} is not a directory under the root")
        return str(real)


def _argv_problem(argv: Any) -> str | None:
    if isinstance(argv, str):
        return 'must be a list of strings, not a shell command line; split it, e.g. ["ls", "-l"]'
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return "must be a non-empty list of strings"
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
        NodeError: invalid input, a refused executable, ``cwd`` or loader variable in
            ``env``, a start failure, or a
            non-zero exit while ``check`` is true (message has the code and stderr tail).
        NodeTimeout: the proc's own ``timeout`` passed ("process timed out after 1 s");
            the group was killed.

    Cancellation of the caller kills the group (SIGTERM, grace, SIGKILL), reaps it, and
    propagates.
    """
    spec = _parse(args)
    exe, refusal = policy.resolve(spec.argv[0])
    if exe is None:
        raise NodeError(f"proc: {refusal}")
    cwd = policy.child_cwd(spec.cwd)
    stdin_data = None if spec.stdin is None else spec.stdin.encode("utf-8")
    _become_subreaper()
    started = time.monotonic()
    try:
        # Shielded: a cancel landing while the pipes are being connected would otherwise
        # leave a running child with no handle to kill it by.
        with anyio.CancelScope(shield=True):
            process = await anyio.open_process(
                [exe, *spec.argv[1:]],
                stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
                cwd=cwd,
                env=policy.child_env(spec.env),
                start_new_session=True,
            )
    except OSError as exc:
        raise NodeError(f"proc: could not start {spec.argv[0]!r}: {exc.strerror or exc}") from None
    out, err = _Capture(policy.max_stdout_bytes), _Capture(policy.max_stderr_bytes)
    _log.debug("proc started", node_id=node_id, pid=process.pid, argv0=exe)
    try:
        with anyio.move_on_after(spec.timeout) as scope:
            async with anyio.create_task_group() as tg:
                assert process.stdout is not None and process.stderr is not None
                tg.start_soon(out.drain, process.stdout)
                tg.start_soon(err.drain, process.stderr)
                if stdin_data is not None and process.stdin is not None:
                    tg.start_soon(_feed, process.stdin, stdin_data)
                await process.wait()
    finally:
        await _end_group(process, policy.kill_grace)
    duration_ms = int((time.monotonic() - started) * 1000)
    if scope.cancelled_caught:
        raise NodeTimeout(
            f"process {spec.argv[0]!r} timed out after {spec.timeout:g} s and was killed",
            node_id=node_id,
            details={"timeout": spec.timeout},
        )
    code = process.returncode if process.returncode is not None else -1
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


async def _end_group(process: Process, grace: float) -> None:
    """Terminate what is left of the process's group and reap it; shielded and bounded."""
    pgid = process.pid
    with anyio.CancelScope(shield=True), anyio.move_on_after(grace + _REAP_TIMEOUT):
        if process.returncode is None or _group_alive(pgid):
            _signal_group(pgid, signal.SIGTERM)
            with anyio.move_on_after(grace):
                await process.wait()
                while _group_alive(pgid) and not _reap_orphans(pgid):  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            _signal_group(pgid, signal.SIGKILL)
        await process.wait()
        # Members re-parented to us (subreaper) are ours to reap; the leader is reaped
        # already, so waitpid(-pgid) cannot steal its status from the event loop.
        while not _reap_orphans(pgid):  # noqa: ASYNC110 - no event for an exit
            await anyio.sleep(0.01)
        await process.aclose()


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
