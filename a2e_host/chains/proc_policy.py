"""What ``proc`` nodes may run, where and with what: :class:`ProcPolicy` (denied by default).

Layer: runtime (anyio for the host-wide slot semaphore only). Source: PROTOCOL.md §5
(kind ``proc``) and §8. The executor that applies it is :mod:`a2e_host.chains.proc`.

The rules (denied by default; executables resolved once, at start, and run by the real
file they resolved to; a minimal environment, no dynamic-loader variables; ``cwd`` opened
by handle below the root; host-wide slots) are explained in that module's theory of
operation.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ..config import HostConfig
from ..exceptions import NodeError
from ..tools.confine import PathRefused, RootDir
from ..tools.model import INVALID_INPUT
from .expressions import clip
from .messages import ChainNode

__all__ = [
    "DEFAULT_MAX_PROCS",
    "DEFAULT_MAX_STREAM_BYTES",
    "Executable",
    "ProcPolicy",
    "SHOWN",
    "argv_problem",
]

DEFAULT_MAX_STREAM_BYTES = 1024 * 1024
"""Bytes of stdout (and, separately, of stderr) kept per process, by default."""
DEFAULT_MAX_PROCS = 32
"""Proc nodes running at once on a host by default (``HostConfig.max_procs``)."""

_BASE_ENV = ("PATH", "LANG", "HOME")
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

_LOADER_PREFIXES = ("LD_", "DYLD_")
"""Environment variable prefixes of the dynamic loaders (glibc/musl, macOS) a node's
``env`` may not set."""

SHOWN = 256
"""Characters of an agent's field (a path, a name) a refusal repeats at most: enough for
any real path, not the megabytes a request may hold."""


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
                f"executable {clip(name, SHOWN)} is not allowed for proc nodes "
                f"(allowed: {allowed}); "
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
        problem = argv_problem(argv)
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
            isinstance(k, str) and (isinstance(v, str) or _is_secret_ref(v))
            for k, v in env.items()
        ):
            return "input 'env' must be an object of string values"
        loader = sorted(k for k in env if k.upper().startswith(_LOADER_PREFIXES))
        if loader:
            return (
                f"env may not set {_listed(loader)}: dynamic-loader variables would run "
                "other code inside the allowed executable; remove them"
            )
        unknown = sorted(k for k in env if k not in self.env_keys)
        if unknown:
            allowed = ", ".join(self.env_keys) if self.env_keys else "none"
            return (
                f"env key {clip(unknown[0], SHOWN)} is not allowed "
                f"(keys a node may set: {allowed}); "
                f"remove it, or have the operator list it in proc_env_keys "
                f"(A2E_PROC_ENV_KEYS or proc_env_keys in the configuration file)"
            )
        nul = sorted(k for k, v in env.items() if isinstance(v, str) and "\x00" in v)
        if nul:
            return f"env value of {clip(nul[0], SHOWN)} contains a NUL byte; remove it"
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
            raise NodeError(f"proc: {problem}", code=INVALID_INPUT)
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
            raise NodeError(f"proc: cwd {clip(shown, SHOWN)} is refused: {exc.reason}",
                            code=INVALID_INPUT) from None
        except OSError:
            raise NodeError(f"proc: cwd {clip(shown, SHOWN)} is not a directory under the "
                            "root",
                            code=INVALID_INPUT) from None
        try:
            yield fd
        finally:
            os.close(fd)



def _is_secret_ref(value: Any) -> bool:
    """``{"$secret": NAME}``: resolved to a string when the process starts (§5 Secrets)."""
    return type(value) is dict and len(value) == 1 and isinstance(value.get("$secret"), str)


def argv_problem(argv: Any) -> str | None:
    """Why ``argv`` (a node's ``argv`` or ``cmd`` input) cannot be run, or None: it must be
    a non-empty list of strings without NUL bytes (PROTOCOL.md §5, kind ``proc``)."""
    if isinstance(argv, str):
        return 'must be a list of strings, not a shell command line; split it, e.g. ["ls", "-l"]'
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return "must be a non-empty list of strings"
    for i, arg in enumerate(argv):
        if "\x00" in arg:
            return f"element {i} contains a NUL byte, which no program can receive; remove it"
    return None


def _listed(names: list[str], most: int = 3) -> str:
    """The first ``most`` of ``names``, each clipped, and how many more (an agent's
    ``env`` may hold thousands: a refusal names a few)."""
    shown = ", ".join(n if len(n) <= SHOWN else n[:SHOWN] + "…" for n in names[:most])
    more = len(names) - most
    return shown + (f" and {more} more" if more > 0 else "")
