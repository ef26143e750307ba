"""The ``proc`` node executor: run an allowlisted executable, never through a shell, and
end its whole process tree.

Layer: runtime (anyio processes). Source: PROTOCOL.md §5 (kind ``proc``) and §8. The
policy is :mod:`a2e_host.chains.proc_policy`; the supervisor program and the host's side
of it are :mod:`a2e_host.chains.proc_supervisor`.

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
import sys
import time
from typing import Annotated, Any

import anyio
import msgspec
import structlog
from anyio.abc import ByteReceiveStream, ByteSendStream

from .. import secrets as _secrets
from ..exceptions import NodeError, NodeTimeout
from ..telemetry import tracing
from ..tools.model import INVALID_INPUT
from .proc_policy import (
    DEFAULT_MAX_PROCS,
    DEFAULT_MAX_STREAM_BYTES,
    Executable,
    ProcPolicy,
    argv_problem,
)
from .proc_supervisor import Supervisor, become_subreaper, spawn_supervisor

__all__ = [
    "ProcPolicy",
    "ProcInput",
    "Executable",
    "run_proc",
    "start_process",
    "Supervisor",
    "DEFAULT_MAX_STREAM_BYTES",
    "DEFAULT_MAX_PROCS",
]

_log = structlog.get_logger("a2e_host.chains.proc")
_STDERR_TAIL = 400


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



def _parse(args: dict[str, Any]) -> ProcInput:
    if "argv" not in args and "cmd" in args:
        args = {("argv" if k == "cmd" else k): v for k, v in args.items()}
    problem = argv_problem(args.get("argv")) if "argv" in args else None
    if problem:
        raise NodeError(f"proc: input 'argv' {problem}", code=INVALID_INPUT)
    try:
        return msgspec.convert(args, ProcInput)
    except msgspec.ValidationError as exc:
        text = str(exc).replace(" - at `$.", " at input '").replace("`", "'")
        if text.startswith("Object missing required field"):
            text = "input 'argv' is required: the command as a list of strings"
        raise NodeError(f"proc: {text}", code=INVALID_INPUT) from None


class _Capture:
    """Keeps the first ``cap`` bytes of a stream, drains the rest.

    The text kept never ends in part of a secret value the process knows (README
    "Secrets"): a few more bytes than ``cap`` are kept (the longest written form of a
    registered value); the raw text is cut at ``cap`` or, where a value straddles that
    point, after the value, then redacted, and only then cut to ``cap`` bytes (inside a
    placeholder at worst). Redacting before the cut would let a value's head slide
    inside the cap (a placeholder shorter than the value) with no whole value to redact.
    """

    __slots__ = ("cap", "keep", "data", "truncated")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        current = _secrets.active_redactor
        self.keep = cap + (current.longest if current is not None else 0)
        self.data = bytearray()
        self.truncated = False

    async def drain(self, stream: ByteReceiveStream) -> None:
        async for chunk in stream:
            room = self.keep - len(self.data)
            if room >= len(chunk):
                self.data += chunk
            else:
                if room > 0:
                    self.data += chunk[:room]
                self.truncated = True
        if len(self.data) > self.cap:
            self.truncated = True

    def text(self) -> str:
        """What was kept, as text (invalid UTF-8 replaced), secret values redacted."""
        text = self.data.decode("utf-8", errors="replace")
        if len(self.data) <= self.cap:
            return _secrets.redact(text)
        head = self.data[:self.cap].decode("utf-8", errors="replace")
        at = len(head)
        while at and not text.startswith(head[:at]):
            at -= 1  # a character the cap splits is not kept
        current = _secrets.active_redactor
        if current is not None:  # the raw text is cut where no value straddles the cut
            text = current.redact(text[:current.cut(text, at)])
        else:
            text = text[:at]
        return text.encode("utf-8")[:self.cap].decode("utf-8", errors="ignore")


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
        raise NodeError(f"proc: {refusal}", code=INVALID_INPUT)
    env = policy.child_env(spec.env)
    if tracing.ENABLED:  # the node's span, for a child that traces (W3C TRACEPARENT)
        env.update(tracing.trace_env())
    if not sys.executable:
        raise NodeError(
            "proc: this host has no Python executable to supervise processes with "
            "(sys.executable is empty); run the host with a regular Python interpreter"
        )
    stdin_data = None if spec.stdin is None else spec.stdin.encode("utf-8")
    become_subreaper()
    async with policy.slots:
        return await _run(spec, exe, env, stdin_data, policy, node_id)


async def start_process(
    policy: ProcPolicy,
    exe: Executable,
    argv: list[str],
    cwd: str | None,
    env: dict[str, str],
    *,
    stdin_piped: bool,
) -> Supervisor:
    """Start one checked process under its supervisor and wait until it runs: what a
    proc node and a ``proc/spawn/req`` (PROTOCOL.md §10) share.

    Args:
        policy: gives the ``cwd`` confinement and the kill grace.
        exe: the executable ``policy.resolve`` allowed for ``argv[0]``.
        argv: the command; the child gets ``exe.name`` as its ``argv[0]``.
        cwd: relative to (and confined to) the root; None = the root.
        env: the child's whole environment (``policy.child_env``).
        stdin_piped: give the child a stdin pipe (``supervisor.process.stdin``), else
            ``/dev/null``.

    Returns:
        The running process's :class:`Supervisor`; its caller must
        :meth:`~Supervisor.end` it (whatever happens).

    Raises:
        NodeError: ``cwd`` is refused, or the process could not be started (the
            supervisor is ended then).
    """
    become_subreaper()
    with policy.open_cwd(cwd) as cwd_fd:
        supervisor = await spawn_supervisor(
            exe, argv, cwd_fd, env=env, stdin_piped=stdin_piped,
            kill_grace=policy.kill_grace,
        )
    try:
        await supervisor.started(argv[0], exe)
    except BaseException:
        await supervisor.end(policy.kill_grace)
        raise
    return supervisor


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
    supervisor = await start_process(
        policy, exe, spec.argv, spec.cwd, env, stdin_piped=stdin_data is not None
    )
    process = supervisor.process
    out, err = _Capture(policy.max_stdout_bytes), _Capture(policy.max_stderr_bytes)
    code: int | None = None
    try:
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
