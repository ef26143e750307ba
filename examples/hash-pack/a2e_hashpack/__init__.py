"""An example tool pack for a2e-host: ``file_sha256`` and ``tree_size``, confined to the
host's root with :class:`a2e_host.tools.RootDir`.

Install it beside the host (``pip install -e examples/hash-pack``) and enable it with
``--tools hash`` (or ``tools = ["hash"]`` in the configuration file, ``A2E_TOOLS=hash``).
"""

from __future__ import annotations

import hashlib
import os
import stat
from typing import Annotated, TypedDict

import msgspec

from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError
from a2e_host.tools import RootDir, Tool, ToolPack, tool

__all__ = ["PACK", "make_tools"]

MAX_HASH_BYTES = 256 * 1024 * 1024
"""The most bytes ``file_sha256`` reads from one file."""


class HashOut(TypedDict):
    path: str
    sha256: str
    bytes: int


class SizeOut(TypedDict):
    path: str
    files: int
    bytes: int


def make_tools(config: HostConfig) -> list[Tool]:
    """The pack's tools for one host configuration (the ToolPack's factory).

    Raises:
        ValueError: the root cannot be opened (the host then refuses to start).
    """
    try:
        root = RootDir(config.root_path)
    except OSError as exc:
        raise ValueError(f"hash pack: root {str(config.root_path)!r}: {exc.strerror}") from None

    @tool(side_effects="read", timeout=60)
    def file_sha256(
        path: str, max_bytes: Annotated[int, msgspec.Meta(gt=0)] = MAX_HASH_BYTES
    ) -> HashOut:
        """SHA-256 of a file under the root: {"path", "max_bytes"?} → {"path", "sha256",
        "bytes"}; any bytes, not only text."""
        fd, rel = root.open_fd(path)  # by handle; PathRefused (a NodeError) if it leaves
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise NodeError(f"file_sha256: {path!r} is not a regular file")
            os.set_blocking(f.fileno(), True)
            digest = hashlib.sha256()
            size = 0
            while chunk := f.read(1 << 20):
                size += len(chunk)
                if size > min(max_bytes, MAX_HASH_BYTES):
                    raise NodeError(f"file_sha256: {path!r} is over {max_bytes} bytes")
                digest.update(chunk)
        return {"path": rel, "sha256": digest.hexdigest(), "bytes": size}

    @tool(side_effects="read", timeout=60)
    def tree_size(path: str = ".") -> SizeOut:
        """Regular files and their bytes below a directory: {"path"?} → {"path", "files",
        "bytes"}; symlinks are not followed."""
        rel = root.relative(path)
        files = total = 0
        pending = [rel]  # directories to list, relative to the root
        while pending:
            where = pending.pop()
            fd, _ = root.open_dir(where)  # by handle from the root, every time
            try:
                with os.scandir(fd) as entries:
                    for entry in entries:
                        if entry.is_file(follow_symlinks=False):
                            files += 1
                            total += entry.stat(follow_symlinks=False).st_size
                        elif entry.is_dir(follow_symlinks=False):
                            pending.append(entry.name if where == "." else f"{where}/{entry.name}")
            finally:
                os.close(fd)
        return {"path": rel, "files": files, "bytes": total}

    return [file_sha256, tree_size]


PACK = ToolPack(
    name="hash",
    description="Checksums and sizes of files under the root: file_sha256, tree_size.",
    factory=make_tools,
)
