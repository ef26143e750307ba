"""The ``fs`` tool pack: ``read_file``, ``write_file``, ``list_dir``, ``glob``, ``stat``,
confined to ``HostConfig.root_path``.

Confinement (:class:`a2e_host.tools.RootDir`; each refusal names its rule):

* paths are relative to the root; an absolute path is accepted only inside the root;
* ``..`` components are refused outright (even when they would stay inside);
* every path is opened once, by handle, one component at a time from the root's handle,
  never letting the kernel follow a symlink: a symlink is resolved by the pack inside the
  root and refused when it leads outside (or loops), so swapping entries for symlinks
  while a tool runs cannot make it read or write outside the root;
* only regular files are read or written (a FIFO, device or socket below the root is
  refused without blocking).

``glob`` walks directories by handle too: ``**`` descends into real directories only
(never through a symlink, so a symlink loop cannot make it recurse), and a symlink matched
by a pattern is listed when it resolves to an existing entry inside the root. It looks at
most ``MAX_GLOB_VISITS`` entries and ``MAX_GLOB_DEPTH`` directories deep (``truncated``
is true when it stopped there); a pattern is at most ``MAX_PATTERN_CHARS`` characters.

Sizes: ``read_file`` reads at most ``MAX_READ_BYTES`` (1 MiB unless ``max_bytes`` asks for
less); ``write_file`` writes at most ``MAX_WRITE_BYTES``; ``list_dir`` and ``glob`` return
at most ``MAX_ENTRIES`` entries. Text is UTF-8; a file that is not valid UTF-8 is refused
as binary. Every output is a JSON object; paths in outputs are relative to the root,
``/``-separated.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat as st_
from collections.abc import Iterator
from fnmatch import translate
from pathlib import PurePosixPath
from typing import Annotated, Literal, TypedDict

import msgspec

from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError
from a2e_host.tools import PathRefused, RootDir, Tool, ToolPack, tool

__all__ = [
    "PACK",
    "make_tools",
    "MAX_READ_BYTES",
    "MAX_WRITE_BYTES",
    "MAX_ENTRIES",
    "MAX_GLOB_VISITS",
    "MAX_GLOB_DEPTH",
    "MAX_PATTERN_CHARS",
]

MAX_READ_BYTES = 1024 * 1024
MAX_WRITE_BYTES = 8 * 1024 * 1024
MAX_ENTRIES = 10_000
MAX_GLOB_VISITS = 200_000
"""Directory entries one ``glob`` call looks at before it stops (``truncated: true``)."""
MAX_GLOB_DEPTH = 64
"""Directories below the starting one that ``**`` descends into."""
MAX_PATTERN_CHARS = 4096
"""Longest ``glob`` pattern (a path is at most 4096 bytes on Linux)."""

PositiveInt = Annotated[int, msgspec.Meta(gt=0)]


class ReadOut(TypedDict):
    path: str
    text: str
    bytes: int


class WriteOut(TypedDict):
    path: str
    bytes: int


class Entry(TypedDict):
    name: str
    type: Literal["file", "dir", "symlink", "other"]
    size: int


class ListOut(TypedDict):
    path: str
    entries: list[Entry]
    truncated: bool


class GlobOut(TypedDict):
    paths: list[str]
    count: int
    truncated: bool


class StatOut(TypedDict):
    path: str
    exists: bool
    type: Literal["file", "dir", "symlink", "other", "missing"]
    size: int
    mtime: float


Kind = Literal["file", "dir", "symlink", "other"]
_DIR_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_DIRECTORY", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def _entry_kind(entry: os.DirEntry[str]) -> Kind:
    if entry.is_symlink():
        return "symlink"
    if entry.is_file(follow_symlinks=False):
        return "file"
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    return "other"


def _mode_kind(mode: int) -> Kind:
    if st_.S_ISREG(mode):
        return "file"
    if st_.S_ISDIR(mode):
        return "dir"
    if st_.S_ISLNK(mode):  # pragma: no cover - stat follows links
        return "symlink"
    return "other"


@contextlib.contextmanager
def _errors(tool_name: str, path: str) -> Iterator[None]:
    """Turn a refusal or an ``OSError`` into one ``NodeError`` sentence naming the tool."""
    try:
        yield
    except PathRefused as exc:
        raise NodeError(f"{tool_name}: {exc.message}") from None
    except FileNotFoundError:
        raise NodeError(f"{tool_name}: {path!r} does not exist under the root") from None
    except NotADirectoryError:
        raise NodeError(
            f"{tool_name}: {path!r} is not a directory (or a part of it is not)"
        ) from None
    except IsADirectoryError:
        raise NodeError(f"{tool_name}: {path!r} is a directory") from None
    except PermissionError:
        raise NodeError(f"{tool_name}: {path!r}: permission denied") from None
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise NodeError(f"{tool_name}: {path!r} is not a regular file") from None
        raise NodeError(f"{tool_name}: {path!r}: {exc.strerror or exc}") from None


class _Glob:
    """A glob pattern as a small automaton over path components.

    State ``i`` means "``parts[i:]`` is left to match below this directory"; ``n`` (the
    number of parts) means "matched". ``**`` stays in its state while it consumes a real
    directory and also moves on without consuming one. Each directory is visited once with
    the set of its states, so ``**/a/**/b/**`` costs one walk, not one per way to split.
    """

    def __init__(self, pattern: str, hidden: bool) -> None:
        raw = PurePosixPath(pattern).parts
        parts: list[str] = []
        for part in raw:
            if not (part == "**" and parts and parts[-1] == "**"):
                parts.append(part)
        self.parts = parts
        self.n = len(parts)
        self.match = [None if p == "**" else re.compile(translate(p)).match for p in parts]
        self.skip_dot = not hidden and not any(p.startswith(".") for p in raw)

    def closure(self, states: set[int]) -> frozenset[int]:
        out = set(states)
        for i in sorted(states):
            while i < self.n and self.parts[i] == "**":
                i += 1
                out.add(i)
        return frozenset(out)

    def step(self, states: frozenset[int], name: str, real_dir: bool) -> frozenset[int]:
        nxt: set[int] = set()
        for i in states:
            if i == self.n:
                continue
            matcher = self.match[i]
            if matcher is None:
                if real_dir:
                    nxt.add(i)
            elif matcher(name):
                nxt.add(i + 1)
        return self.closure(nxt)


def _join(prefix: str, name: str) -> str:
    return name if prefix == "." else f"{prefix}/{name}"


def _run_glob(root: RootDir, glob: _Glob, base: str) -> tuple[list[str], bool]:
    """Walk below ``base`` by handle; return (matched paths relative to the root,
    stopped early)."""
    fd, base_rel = root.open_dir(base)
    found: list[str] = []
    start = glob.closure({0})
    if glob.n in start:
        found.append(base_rel)
    visits = 0
    truncated = False
    # one frame per open directory on the current path: (fd, its path, child dirs to enter)
    frames: list[tuple[int, str, list[tuple[str, frozenset[int], bool]]]] = []

    def enter(dir_fd: int, prefix: str, states: frozenset[int]) -> None:
        nonlocal visits, truncated
        children: list[tuple[str, frozenset[int], bool]] = []
        with os.scandir(dir_fd) as it:
            for entry in it:
                visits += 1
                if visits > MAX_GLOB_VISITS:
                    truncated = True
                    break
                name = entry.name
                if glob.skip_dot and name.startswith("."):
                    continue
                link = entry.is_symlink()
                real_dir = not link and entry.is_dir(follow_symlinks=False)
                nxt = glob.step(states, name, real_dir)
                if not nxt:
                    continue
                path = _join(prefix, name)
                if glob.n in nxt and (not link or _resolves(root, path)):
                    found.append(path)
                if (real_dir or link) and any(i < glob.n for i in nxt):
                    children.append((name, nxt, link))
        frames.append((dir_fd, prefix, children))

    try:
        enter(fd, base_rel, start)
        while frames and not truncated:
            dir_fd, prefix, children = frames[-1]
            if not children:
                os.close(frames.pop()[0])
                continue
            name, states, link = children.pop()
            if len(frames) > MAX_GLOB_DEPTH:
                truncated = True
                break
            child = _open_child(root, dir_fd, _join(prefix, name), name, link)
            if child is not None:
                enter(child, _join(prefix, name), states)
    finally:
        for frame in frames:
            os.close(frame[0])
    return found, truncated


def _resolves(root: RootDir, path: str) -> bool:
    """True when the symlink at ``path`` leads to an existing entry inside the root."""
    try:
        root.stat(path)
    except (OSError, PathRefused):
        return False
    return True


def _open_child(root: RootDir, dir_fd: int, path: str, name: str, link: bool) -> int | None:
    """A handle on the directory ``name`` (``path`` from the root), or None when it is gone,
    was swapped for something else, or is a symlink leading outside the root."""
    try:
        if link:
            return root.open_dir(path).fd
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except (OSError, PathRefused):
        return None

def make_tools(config: HostConfig) -> list[Tool]:
    """The fs tools, confined to ``config.root_path``.

    Raises:
        ValueError: the root does not exist or is not a directory.
    """
    try:
        root = RootDir(config.root_path)
    except OSError as exc:
        raise ValueError(
            f"root {str(config.root_path)!r} cannot be used: {exc.strerror or exc}; "
            f"pass an existing directory with --root"
        ) from None

    @tool(side_effects="read")
    def read_file(path: str, max_bytes: PositiveInt = MAX_READ_BYTES) -> ReadOut:
        """Read a UTF-8 text file: {"path", "max_bytes"?} → {"path", "text", "bytes"}."""
        cap = min(max_bytes, MAX_READ_BYTES)
        with _errors("read_file", path):
            fd, rel = root.open_fd(path, os.O_RDONLY)
            try:
                st = os.fstat(fd)
                if not st_.S_ISREG(st.st_mode):
                    raise NodeError(f"read_file: {path!r} is not a file under the root")
                if st.st_size > cap:
                    raise NodeError(
                        f"read_file: {path!r} is {st.st_size} bytes, over the {cap}-byte read "
                        f"cap; read a smaller file"
                    )
                chunks: list[bytes] = []
                left = cap + 1
                while left > 0:
                    chunk = os.read(fd, min(left, 1 << 20))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    left -= len(chunk)
            finally:
                os.close(fd)
        data = b"".join(chunks)
        if len(data) > cap:
            raise NodeError(f"read_file: {path!r} grew past the {cap}-byte read cap")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise NodeError(
                f"read_file: {path!r} is not UTF-8 text (invalid byte at offset {exc.start}); "
                f"binary files cannot be read"
            ) from None
        return {"path": rel, "text": text, "bytes": len(data)}

    @tool(side_effects="write")
    def write_file(path: str, text: str, append: bool = False, make_dirs: bool = False) -> WriteOut:
        """Write UTF-8 text: {"path", "text", "append"?, "make_dirs"?} → {"path", "bytes"}."""
        data = text.encode("utf-8")
        if len(data) > MAX_WRITE_BYTES:
            raise NodeError(
                f"write_file: {len(data)} bytes is over the {MAX_WRITE_BYTES}-byte write cap"
            )
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else 0)
        with _errors("write_file", path):
            try:
                fd, rel = root.open_fd(path, flags, make_dirs=make_dirs)
            except FileNotFoundError:
                if make_dirs:
                    raise
                raise NodeError(
                    f"write_file: the directory of {path!r} does not exist; "
                    f"pass make_dirs: true"
                ) from None
        with _errors("write_file", path):
            try:
                if not st_.S_ISREG(os.fstat(fd).st_mode):
                    raise NodeError(f"write_file: {path!r} is not a regular file")
                if not append:
                    os.ftruncate(fd, 0)
                os.set_blocking(fd, True)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
        return {"path": rel, "bytes": len(data)}

    @tool(side_effects="read")
    def list_dir(path: str = ".") -> ListOut:
        """List a directory: {"path"?} → {"path", "entries": [{"name", "type", "size"}],
        "truncated"} (sorted by name)."""
        with _errors("list_dir", path):
            fd, rel = root.open_dir(path)
            try:
                with os.scandir(fd) as it:
                    found = sorted(it, key=lambda e: e.name)
                entries: list[Entry] = []
                for entry in found[:MAX_ENTRIES]:
                    kind = _entry_kind(entry)
                    size = 0
                    if kind == "file":
                        with contextlib.suppress(OSError):
                            size = entry.stat(follow_symlinks=False).st_size
                    entries.append({"name": entry.name, "type": kind, "size": size})
            finally:
                os.close(fd)
        return {"path": rel, "entries": entries, "truncated": len(found) > MAX_ENTRIES}

    @tool(side_effects="read")
    def glob(pattern: str, path: str = ".", hidden: bool = False) -> GlobOut:
        """Match files: {"pattern", "path"?, "hidden"?} → {"paths": [sorted, relative to
        the root], "count", "truncated"}. ``**`` recurses into real directories (not through
        symlinks); a matched symlink is listed when it leads inside the root. As in a shell,
        names starting with ``.`` (``.git``, ``.venv``) are not matched by wildcards unless
        ``hidden`` is true or the pattern spells the dot."""
        pure = PurePosixPath(pattern)
        if ".." in pure.parts or pure.is_absolute():
            raise NodeError(
                f"glob: pattern {pattern!r} is refused: it must be relative, without '..'"
            )
        if not pure.parts:
            raise NodeError("glob: pattern is empty; give one such as '**/*.txt'")
        if len(pattern) > MAX_PATTERN_CHARS:
            raise NodeError(
                f"glob: pattern is {len(pattern)} characters, over the {MAX_PATTERN_CHARS} "
                f"a path can have; shorten it"
            )
        with _errors("glob", path):
            found, stopped = _run_glob(root, _Glob(pattern, hidden), path)
        found.sort()
        return {
            "paths": found[:MAX_ENTRIES],
            "count": min(len(found), MAX_ENTRIES),
            "truncated": stopped or len(found) > MAX_ENTRIES,
        }

    @tool(side_effects="read")
    def stat(path: str) -> StatOut:
        """Describe a path: {"path"} → {"path", "exists", "type", "size", "mtime"}
        (``mtime`` float seconds since the epoch; 0 when missing). Symlinks are followed
        inside the root; one leading outside is refused."""
        with _errors("stat", path):
            try:
                st, rel = root.stat(path)
            except (FileNotFoundError, NotADirectoryError):
                return {"path": path, "exists": False, "type": "missing", "size": 0,
                        "mtime": 0.0}
        return {
            "path": rel,
            "exists": True,
            "type": _mode_kind(st.st_mode),
            "size": st.st_size,
            "mtime": st.st_mtime,
        }

    return [read_file, write_file, list_dir, glob, stat]

PACK = ToolPack(
    name="fs",
    description="Files under the configured root: read_file, write_file, list_dir, glob, stat.",
    factory=make_tools,
)
