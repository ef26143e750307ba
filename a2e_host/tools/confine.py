"""Root confinement by handle: open paths below one directory without ever leaving it.

Layer: core (``os`` calls only; no anyio). Public: tool packs that touch files use
:class:`RootDir` so that no request, and no process racing a request, can make them read or
write outside the directory the operator configured (``HostConfig.root``). Source: issue
"fs tools can be raced out of ``--root``"; PROTOCOL.md §5 (kind ``tool``).

Theory of operation:

* The root is opened **once**, as a directory handle, when the :class:`RootDir` is made.
  Every later path is walked from that handle one component at a time with
  ``openat(dir_fd, name, O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC)``: no call ever passes a
  path with a ``/`` to the kernel, so no symlink is followed by the kernel, and renaming or
  swapping an entry between our check and our use changes only *what* we find below the
  root, never *where* we look.
* A **symlink** met on the way (or as the last component) is read with ``readlinkat`` and
  resolved by this module, inside the root: its target's components are walked from the
  link's directory (a relative target) or from the root handle (an absolute target that
  names a path inside the root). A target that climbs above the root with ``..`` or names
  an absolute path outside it is refused; so is a chain of more than
  :data:`MAX_SYMLINKS` links (a loop). Symlinks that stay inside the root therefore work
  as they would in a shell.
* The path a request gives must be relative to the root or absolute inside it, and may not
  contain ``..`` at all (even when it would stay inside): the rule is easy to state and
  to check. Symlink targets may use ``..`` as long as they stay below the root.
* Files are opened with ``O_NONBLOCK`` and checked by ``fstat`` on the handle: opening a
  FIFO or a device below the root neither blocks a worker thread nor reads it.

Not covered: a hard link inside the root to a file outside it *is* an entry of the root
(the kernel cannot tell the two names apart); mount points below the root are entered.

Linux, macOS and the BSDs have every call used here; Windows is not supported.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import IO, Any, NamedTuple, TypeVar

from ..exceptions import NodeError

__all__ = ["RootDir", "PathRefused", "Opened", "MAX_SYMLINKS"]

MAX_SYMLINKS = 40
"""Symlinks followed while resolving one path before it is refused as a loop (Linux's
own limit)."""

_O_DIRECTORY: int = getattr(os, "O_DIRECTORY", 0)  # POSIX only; RootDir refuses elsewhere
_O_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC: int = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK: int = getattr(os, "O_NONBLOCK", 0)
_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
_NOFOLLOW_FLAGS = _O_NOFOLLOW | _O_CLOEXEC | _O_NONBLOCK
_T = TypeVar("_T")


class PathRefused(NodeError):
    """A path would leave the root, or is not a path a request may give.

    A :class:`~a2e_host.exceptions.NodeError` (wire code ``chain_node_error``): a tool that
    lets it propagate fails its node with the message, which names the path and the rule
    (``"path '../x' is refused: '..' components are not allowed; …"``).

    Attributes:
        path: the path as the request gave it.
        reason: the rule, without the path (for messages that name their own field).
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"path {path!r} is refused: {reason}")
        self.path = path
        self.reason = reason


class Opened(NamedTuple):
    """A handle opened below the root and the path it was found at.

    Attributes:
        fd: the file descriptor; the caller closes it.
        path: the resolved path relative to the root, ``/``-separated (``"."`` for the
            root itself); symlinks on the way are replaced by their targets.
    """

    fd: int
    path: str


class _Link(Exception):
    """Internal: the component just tried is a symlink."""


class RootDir:
    """A directory tree every path of which is opened by handle, never leaving it.

    Args:
        path: the root directory. It is resolved and opened now; later renames of the
            directory itself do not move the root.

    Attributes:
        path: the root as an absolute, resolved path (for messages and to accept absolute
            paths inside the root).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        NotADirectoryError: ``path`` is not a directory.
        PermissionError: ``path`` cannot be opened for reading.
        OSError: the platform cannot open files relative to a directory handle without
            following symlinks (Windows).

    Every method is thread-safe (they share only the root handle) and raises
    :class:`PathRefused` for a path that leaves the root, plus the usual :class:`OSError`
    subclasses (``FileNotFoundError``, ``NotADirectoryError``, …) for what the kernel says.

    Example:
        >>> root = RootDir("/srv/data")  # doctest: +SKIP
        >>> with root.open("notes/today.txt", "w", make_dirs=True) as f:  # doctest: +SKIP
        ...     f.write("hello")
    """

    __slots__ = ("path", "_fd", "_parts")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._fd = -1
        if not (_O_NOFOLLOW and _O_DIRECTORY and os.open in os.supports_dir_fd):
            raise OSError(errno.ENOTSUP, "RootDir needs openat() with O_NOFOLLOW (POSIX)")
        self.path = Path(path).resolve(strict=True)
        self._fd = os.open(self.path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        self._parts = self.path.parts

    def close(self) -> None:
        """Close the root handle (idempotent). Later calls fail with ``OSError``."""
        fd = getattr(self, "_fd", -1)
        self._fd = -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> RootDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:  # pragma: no cover - already closed by the interpreter
            pass

    def __repr__(self) -> str:
        return f"RootDir({str(self.path)!r})"

    # ── public operations ──

    def open_fd(
        self, path: str, flags: int = os.O_RDONLY, mode: int = 0o666, *, make_dirs: bool = False
    ) -> Opened:
        """Open ``path`` below the root with ``os.open`` ``flags``.

        ``O_NOFOLLOW``, ``O_CLOEXEC`` and ``O_NONBLOCK`` are added (symlinks are resolved
        here, inside the root; ``O_NONBLOCK`` keeps a FIFO from blocking the open); the
        caller checks the file type with ``os.fstat`` if it matters.

        Args:
            path: relative to the root, or absolute inside it; no ``..`` components.
            flags: ``os.O_*`` flags, e.g. ``os.O_WRONLY | os.O_CREAT``.
            mode: permission bits for a created file (masked by the umask).
            make_dirs: create missing parent directories (``0o777`` masked by the umask).

        Returns:
            :class:`Opened` ``(fd, path)``; the caller closes ``fd``.
        """
        flags |= _NOFOLLOW_FLAGS
        return self._resolve(
            path, lambda d, n: os.open(n, flags, mode, dir_fd=d), make_dirs=make_dirs
        )

    def open(
        self,
        path: str,
        mode: str = "r",
        *,
        encoding: str | None = None,
        make_dirs: bool = False,
    ) -> IO[Any]:
        """Open a **regular file** below the root as a Python file object.

        Args:
            path: relative to the root, or absolute inside it; no ``..`` components.
            mode: ``"r"``, ``"w"``, ``"a"``, ``"x"``, each optionally with ``"b"`` and/or
                ``"+"``, as :func:`open` takes them. ``"w"`` truncates only after the
                handle is known to be a regular file.
            encoding: for text modes; default UTF-8 (not the locale's).
            make_dirs: create missing parent directories (writing modes).

        Returns:
            A file object as :func:`open` returns (its ``name`` is the descriptor).

        Raises:
            PathRefused: the path leaves the root or is not a regular file (a directory, a
                FIFO, a device, a socket).
            ValueError: an unknown ``mode``.
        """
        base = mode.replace("b", "").replace("+", "")
        if len(base) != 1 or base not in "rwax" or len(set(mode)) != len(mode):
            raise ValueError(f"RootDir.open: unsupported mode {mode!r}")
        plus = "+" in mode
        access = os.O_RDWR if plus else (os.O_RDONLY if base == "r" else os.O_WRONLY)
        create = {"r": 0, "w": os.O_CREAT, "a": os.O_CREAT | os.O_APPEND,
                  "x": os.O_CREAT | os.O_EXCL}[base]
        fd, rel = self.open_fd(path, access | create, make_dirs=make_dirs)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise PathRefused(path, f"it is a {_kind_name(st.st_mode)}, not a regular file")
            if base == "w":
                os.ftruncate(fd, 0)
            os.set_blocking(fd, True)
            if "b" in mode:
                return os.fdopen(fd, mode)
            return os.fdopen(fd, mode, encoding=encoding or "utf-8")
        except BaseException:
            os.close(fd)
            raise

    def open_dir(self, path: str = ".", *, make_dirs: bool = False) -> Opened:
        """Open the directory ``path`` (``"."`` for the root) below the root.

        The returned descriptor serves as ``dir_fd`` for ``os`` calls, for
        ``os.scandir(fd)`` and for :meth:`open_fd` relatives via ``os.open(…, dir_fd=fd)``
        (pass ``O_NOFOLLOW`` yourself then).

        Raises:
            NotADirectoryError: ``path`` is not a directory.
        """
        return self._resolve(path, lambda d, n: os.open(n, _DIR_FLAGS, dir_fd=d),
                             make_dirs=make_dirs)

    def stat(self, path: str) -> tuple[os.stat_result, str]:
        """``(stat, resolved relative path)`` of ``path``, symlinks resolved in the root.

        Raises:
            FileNotFoundError: nothing exists there (a dangling symlink included).
        """

        def final(dir_fd: int, name: str) -> os.stat_result:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise _Link
            return st

        return self._resolve_any(path, final)

    def relative(self, path: str) -> str:
        """The resolved path of an existing ``path`` relative to the root (``"."`` for it).

        Raises:
            FileNotFoundError: nothing exists there.
        """
        return self.stat(path)[1]

    # ── the walk ──

    def _resolve(
        self,
        path: str,
        opener: Callable[[int, str], int],
        *,
        make_dirs: bool = False,
    ) -> Opened:
        def final(dir_fd: int, name: str) -> int:
            try:
                return opener(dir_fd, name)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK, errno.ENXIO) and \
                        _is_link(dir_fd, name):
                    raise _Link from None
                raise

        return Opened(*self._resolve_any(path, final, make_dirs=make_dirs))

    def _resolve_any(
        self,
        path: str,
        final: Callable[[int, str], _T],
        *,
        make_dirs: bool = False,
    ) -> tuple[_T, str]:
        """Walk ``path`` from the root handle and apply ``final(dir_fd, name)`` to its last
        component; ``final`` raises :class:`_Link` when that component is a symlink."""
        pending = self._parts_of(path)
        if not pending:
            pending = ["."]
        stack: list[tuple[str, int]] = []  # directories walked below the root: (name, fd)
        links = 0  # symlinks followed and entries looked at again: bounded

        def cwd() -> int:
            return stack[-1][1] if stack else self._fd

        def follow(name: str) -> None:
            nonlocal links, pending
            links += 1
            if links > MAX_SYMLINKS:
                raise PathRefused(
                    path, f"more than {MAX_SYMLINKS} symlinks on the way (a symlink loop?)"
                )
            try:
                target = os.readlink(name, dir_fd=cwd())
            except OSError as exc:
                if exc.errno == errno.EINVAL:  # replaced by a non-link meanwhile: look again
                    pending.insert(0, name)
                    return
                raise
            target_path = PurePosixPath(target)
            if target_path.is_absolute():
                inner = self._inside_parts(target_path.parts)
                if inner is None:
                    raise self._outside(path)
                while stack:
                    os.close(stack.pop()[1])
                pending = [*inner, *pending]
            else:
                pending = [*target_path.parts, *pending]

        try:
            while pending:
                name = pending.pop(0)
                if name in ("", "."):
                    if pending:
                        continue
                    # the path names a directory already walked: apply ``final`` to it
                    if not stack:
                        return final(self._fd, "."), "."
                    dname, dfd = stack.pop()
                    os.close(dfd)
                    pending = [dname]
                    continue
                if name == "..":
                    if not stack:
                        raise self._outside(path)
                    os.close(stack.pop()[1])
                    if not pending:
                        pending = ["."]
                    continue
                if not pending:
                    try:
                        result = final(cwd(), name)
                    except _Link:
                        follow(name)
                        if not pending:
                            pending = ["."]
                        continue
                    return result, "/".join([*(n for n, _ in stack), name])
                try:
                    fd = os.open(name, _DIR_FLAGS, dir_fd=cwd())
                except FileNotFoundError:
                    if not make_dirs:
                        raise
                    links += 1
                    if links > MAX_SYMLINKS:
                        raise
                    try:
                        os.mkdir(name, dir_fd=cwd())
                    except FileExistsError:
                        pass
                    pending.insert(0, name)
                    continue
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK) and \
                            _is_link(cwd(), name):
                        follow(name)
                        continue
                    raise
                stack.append((name, fd))
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            for _, fd in stack:
                os.close(fd)

    def _parts_of(self, path: str) -> list[str]:
        """The components of a request's ``path`` relative to the root, or a refusal."""
        if "\x00" in path:
            raise PathRefused(path, "it contains a NUL byte")
        pure = PurePosixPath(path)
        if ".." in pure.parts:
            raise PathRefused(
                path, "'..' components are not allowed; give a path relative to the root"
            )
        if pure.is_absolute():
            inner = self._inside_parts(pure.parts)
            if inner is None:
                raise PathRefused(
                    path, f"absolute paths must be inside the root {str(self.path)!r}"
                )
            return inner
        return list(pure.parts)

    def _inside_parts(self, parts: tuple[str, ...]) -> list[str] | None:
        n = len(self._parts)
        if parts[:n] != self._parts:
            return None
        return list(parts[n:])

    def _outside(self, path: str) -> PathRefused:
        return PathRefused(
            path, f"it resolves outside the root (symlinks may not leave {str(self.path)!r})"
        )


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _kind_name(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"
