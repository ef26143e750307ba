"""The ``fs`` tool pack: ``read_file``, ``write_file``, ``list_dir``, ``glob``, ``stat``,
confined to ``HostConfig.root_path``.

Confinement rules (each refusal names its rule):

* paths are relative to the root; an absolute path is accepted only inside the root;
* ``..`` components are refused outright (even when they would stay inside);
* the path is resolved with symlinks followed and must stay inside the root, so a
  symlink pointing outside is refused.

Sizes: ``read_file`` reads at most ``MAX_READ_BYTES`` (1 MiB unless ``max_bytes`` asks for
less); ``write_file`` writes at most ``MAX_WRITE_BYTES``; ``list_dir`` and ``glob`` return
at most ``MAX_ENTRIES`` entries. Text is UTF-8; a file that is not valid UTF-8 is refused
as binary. Every output is a JSON object; paths in outputs are relative to the root,
``/``-separated.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal, TypedDict

import msgspec

from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError
from a2e_host.tools import Tool, ToolPack, tool

__all__ = ["PACK", "make_tools", "MAX_READ_BYTES", "MAX_WRITE_BYTES", "MAX_ENTRIES"]

MAX_READ_BYTES = 1024 * 1024
MAX_WRITE_BYTES = 8 * 1024 * 1024
MAX_ENTRIES = 10_000

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


class Jail:
    """Maps user paths to real paths inside ``root`` (resolved), or refuses them."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def resolve(self, tool_name: str, path: str) -> Path:
        """The real path for ``path``.

        Raises:
            NodeError: the path uses ``..``, is absolute outside the root, or resolves
                (through symlinks) outside the root.
        """
        if "\x00" in path:
            raise NodeError(f"{tool_name}: path {path!r} contains a NUL byte")
        pure = PurePosixPath(path)
        if ".." in pure.parts:
            raise NodeError(
                f"{tool_name}: path {path!r} is refused: '..' components are not allowed; "
                f"give a path relative to the root"
            )
        candidate = Path(path) if pure.is_absolute() else self.root / path
        if pure.is_absolute() and not _inside(Path(os.path.normpath(path)), self.root):
            raise NodeError(
                f"{tool_name}: path {path!r} is refused: absolute paths must be inside the "
                f"root {str(self.root)!r}"
            )
        real = candidate.resolve()
        if not _inside(real, self.root):
            raise NodeError(
                f"{tool_name}: path {path!r} is refused: it resolves outside the root "
                f"(symlinks may not leave {str(self.root)!r})"
            )
        return real

    def relative(self, real: Path) -> str:
        rel = real.relative_to(self.root).as_posix()
        return rel if rel else "."


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def _kind(path: Path) -> Literal["file", "dir", "symlink", "other"]:
    if path.is_symlink():
        return "symlink"
    if path.is_file():
        return "file"
    if path.is_dir():
        return "dir"
    return "other"


def make_tools(config: HostConfig) -> list[Tool]:
    """The fs tools, confined to ``config.root_path``."""
    jail = Jail(config.root_path)

    @tool(side_effects="read")
    def read_file(path: str, max_bytes: PositiveInt = MAX_READ_BYTES) -> ReadOut:
        """Read a UTF-8 text file: {"path", "max_bytes"?} → {"path", "text", "bytes"}."""
        real = jail.resolve("read_file", path)
        if not real.is_file():
            raise NodeError(f"read_file: {path!r} is not a file under the root")
        cap = min(max_bytes, MAX_READ_BYTES)
        size = real.stat().st_size
        if size > cap:
            raise NodeError(
                f"read_file: {path!r} is {size} bytes, over the {cap}-byte read cap; "
                f"read a smaller file"
            )
        data = real.read_bytes()[: cap + 1]
        if len(data) > cap:
            raise NodeError(f"read_file: {path!r} grew past the {cap}-byte read cap")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise NodeError(
                f"read_file: {path!r} is not UTF-8 text (invalid byte at offset {exc.start}); "
                f"binary files cannot be read"
            ) from None
        return {"path": jail.relative(real), "text": text, "bytes": len(data)}

    @tool(side_effects="write")
    def write_file(path: str, text: str, append: bool = False, make_dirs: bool = False) -> WriteOut:
        """Write UTF-8 text: {"path", "text", "append"?, "make_dirs"?} → {"path", "bytes"}."""
        real = jail.resolve("write_file", path)
        data = text.encode("utf-8")
        if len(data) > MAX_WRITE_BYTES:
            raise NodeError(
                f"write_file: {len(data)} bytes is over the {MAX_WRITE_BYTES}-byte write cap"
            )
        if real.is_dir():
            raise NodeError(f"write_file: {path!r} is a directory")
        if make_dirs:
            real.parent.mkdir(parents=True, exist_ok=True)
        elif not real.parent.is_dir():
            raise NodeError(
                f"write_file: the directory of {path!r} does not exist; pass make_dirs: true"
            )
        with open(real, "ab" if append else "wb") as f:
            f.write(data)
        return {"path": jail.relative(real), "bytes": len(data)}

    @tool(side_effects="read")
    def list_dir(path: str = ".") -> ListOut:
        """List a directory: {"path"?} → {"path", "entries": [{"name", "type", "size"}],
        "truncated"} (sorted by name)."""
        real = jail.resolve("list_dir", path)
        if not real.is_dir():
            raise NodeError(f"list_dir: {path!r} is not a directory under the root")
        names = sorted(os.listdir(real))
        entries: list[Entry] = []
        for name in names[:MAX_ENTRIES]:
            child = real / name
            kind = _kind(child)
            size = child.lstat().st_size if kind == "file" else 0
            entries.append({"name": name, "type": kind, "size": size})
        return {
            "path": jail.relative(real),
            "entries": entries,
            "truncated": len(names) > MAX_ENTRIES,
        }

    @tool(side_effects="read")
    def glob(pattern: str, path: str = ".", hidden: bool = False) -> GlobOut:
        """Match files: {"pattern", "path"?, "hidden"?} → {"paths": [sorted, relative to
        the root], "count", "truncated"}. ``**`` recurses; matches outside the root are
        dropped. As in a shell, names starting with ``.`` (``.git``, ``.venv``) are not
        matched by wildcards unless ``hidden`` is true or the pattern spells the dot."""
        if ".." in PurePosixPath(pattern).parts or PurePosixPath(pattern).is_absolute():
            raise NodeError(
                f"glob: pattern {pattern!r} is refused: it must be relative, without '..'"
            )
        base = jail.resolve("glob", path)
        found: list[str] = []
        dotted = any(part.startswith(".") for part in PurePosixPath(pattern).parts)
        for match in base.glob(pattern):
            if not (hidden or dotted) and any(
                part.startswith(".") for part in match.relative_to(base).parts
            ):
                continue
            real = match.resolve()
            if _inside(real, jail.root):
                found.append(jail.relative(match.absolute()))
        found.sort()
        return {
            "paths": found[:MAX_ENTRIES],
            "count": min(len(found), MAX_ENTRIES),
            "truncated": len(found) > MAX_ENTRIES,
        }

    @tool(side_effects="read")
    def stat(path: str) -> StatOut:
        """Describe a path: {"path"} → {"path", "exists", "type", "size", "mtime"}
        (``mtime`` float seconds since the epoch; 0 when missing)."""
        real = jail.resolve("stat", path)
        if not real.exists():
            return {"path": path, "exists": False, "type": "missing", "size": 0, "mtime": 0.0}
        st = real.stat()
        return {
            "path": jail.relative(real),
            "exists": True,
            "type": _kind(real),
            "size": st.st_size,
            "mtime": st.st_mtime,
        }

    return [read_file, write_file, list_dir, glob, stat]


PACK = ToolPack(
    name="fs",
    description="Files under the configured root: read_file, write_file, list_dir, glob, stat.",
    factory=make_tools,
)
