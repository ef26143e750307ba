"""RootDir: every path opened by handle below the root; symlinks resolved inside it or
refused; FIFOs never block; a process swapping entries for symlinks cannot make the fs
tools read or write outside the root."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError
from a2e_host.tools import PathRefused, RootDir, load_tools


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """tmp/root/{a.txt, sub/b.txt} and tmp/outside/{secret.txt, dir/secret.txt}."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("a")
    (root / "sub" / "b.txt").write_text("b")
    (tmp_path / "outside" / "dir").mkdir(parents=True)
    (tmp_path / "outside" / "secret.txt").write_text("SECRET")
    (tmp_path / "outside" / "dir" / "secret.txt").write_text("SECRET")
    return root


def read(root: RootDir, path: str) -> tuple[str, str]:
    with root.open(path) as f:
        return f.read(), root.relative(path)


def test_a_symlink_inside_the_root_is_resolved_to_its_target(tree: Path) -> None:
    (tree / "rel").symlink_to("sub/b.txt")
    (tree / "sub" / "up").symlink_to("../a.txt")
    (tree / "abs").symlink_to(tree / "sub")
    with RootDir(tree) as root:
        assert read(root, "rel") == ("b", "sub/b.txt")
        assert read(root, "sub/up") == ("a", "a.txt")
        assert read(root, "abs/b.txt") == ("b", "sub/b.txt")
        assert root.relative("abs") == "sub"


@pytest.mark.parametrize(
    ("link", "target", "path"),
    [
        ("up", "../outside/secret.txt", "up"),
        ("abs", "{outside}/secret.txt", "abs"),
        ("dir", "{outside}/dir", "dir/secret.txt"),
        ("deep", "sub/../../outside/secret.txt", "deep"),
        ("root_up", "..", "root_up/outside/secret.txt"),
    ],
)
def test_a_symlink_leading_outside_the_root_is_refused(
    tree: Path, link: str, target: str, path: str
) -> None:
    (tree / link).symlink_to(target.format(outside=tree.parent / "outside"))
    with RootDir(tree) as root, pytest.raises(PathRefused, match="resolves outside the root"):
        root.open(path)


def test_a_symlink_loop_is_refused_naming_the_loop(tree: Path) -> None:
    (tree / "x").symlink_to("y")
    (tree / "y").symlink_to("x")
    with RootDir(tree) as root, pytest.raises(PathRefused, match="a symlink loop"):
        root.open("x")


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("../outside/secret.txt", "'..' components are not allowed"),
        ("sub/../a.txt", "'..' components are not allowed"),
        ("/etc/passwd", "absolute paths must be inside the root"),
        ("a\x00b", "NUL byte"),
    ],
)
def test_request_paths_that_could_leave_are_refused(tree: Path, path: str, rule: str) -> None:
    with RootDir(tree) as root, pytest.raises(PathRefused, match=rule):
        root.open(path)


def test_writing_through_a_dangling_symlink_creates_its_target_inside(tree: Path) -> None:
    (tree / "later").symlink_to("sub/new.txt")
    with RootDir(tree) as root:
        with root.open("later", "w") as f:
            f.write("n")
        assert (tree / "sub" / "new.txt").read_text() == "n"


def test_make_dirs_never_creates_anything_outside(tree: Path) -> None:
    (tree / "out").symlink_to(tree.parent / "outside")
    with RootDir(tree) as root:
        with root.open("made/x/y.txt", "w", make_dirs=True) as f:
            f.write("y")
        with pytest.raises(PathRefused, match="resolves outside"):
            root.open("out/new/z.txt", "w", make_dirs=True)
    assert (tree / "made" / "x" / "y.txt").read_text() == "y"
    assert sorted(p.name for p in (tree.parent / "outside").iterdir()) == ["dir", "secret.txt"]


def test_a_fifo_is_refused_without_blocking(tree: Path) -> None:
    os.mkfifo(tree / "pipe")
    outcome: list[str] = []

    def attempt(mode: str) -> None:
        try:
            with RootDir(tree) as root:
                root.open("pipe", mode)
        except PathRefused as exc:
            outcome.append(exc.message)
        except OSError as exc:
            outcome.append(f"OSError {exc.errno}")

    for mode in ("r", "w"):
        worker = threading.Thread(target=attempt, args=(mode,), daemon=True)
        worker.start()
        worker.join(10)
        assert not worker.is_alive(), f"opening a FIFO with mode {mode!r} blocked"
    assert outcome[0] == "path 'pipe' is refused: it is a FIFO, not a regular file"
    assert outcome[1] == "OSError 6"  # ENXIO: no reader, refused by the kernel


def test_the_root_is_held_by_handle_when_its_directory_is_renamed(tree: Path) -> None:
    with RootDir(tree) as root:
        tree.rename(tree.parent / "moved")
        tree.symlink_to(tree.parent / "outside")
        assert read(root, "a.txt") == ("a", "a.txt")
        with pytest.raises(FileNotFoundError):
            root.open("secret.txt")


def test_open_fd_gives_the_resolved_relative_path(tree: Path) -> None:
    (tree / "l").symlink_to("sub")
    with RootDir(tree) as root:
        fd, rel = root.open_fd("l/b.txt")
        try:
            assert (rel, os.read(fd, 10)) == ("sub/b.txt", b"b")
        finally:
            os.close(fd)
        dfd, drel = root.open_dir(".")
        os.close(dfd)
        assert drel == "."


def test_a_missing_root_cannot_be_opened(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        RootDir(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        RootDir(tmp_path / "file")


# ── fs tools under a racing process ─────────────────────────────────────────

SWAPPER = r"""
import os, shutil, sys
root, outside, stop = sys.argv[1:4]
swaps = 0
while not os.path.exists(stop):
    os.symlink(os.path.join(outside, "secret.txt"), os.path.join(root, "race.tmp"))
    os.replace(os.path.join(root, "race.tmp"), os.path.join(root, "race.txt"))
    with open(os.path.join(root, "race.new"), "w") as f:
        f.write("inside")
    os.replace(os.path.join(root, "race.new"), os.path.join(root, "race.txt"))
    os.rename(os.path.join(root, "sub2"), os.path.join(root, "sub2.real"))
    while True:
        try:
            os.symlink(os.path.join(outside, "dir"), os.path.join(root, "sub2"))
            break
        except FileExistsError:  # write_file's make_dirs made a new sub2 meanwhile
            shutil.rmtree(os.path.join(root, "sub2"), ignore_errors=True)
    os.unlink(os.path.join(root, "sub2"))
    while True:
        try:
            os.rename(os.path.join(root, "sub2.real"), os.path.join(root, "sub2"))
            break
        except OSError:  # write_file's make_dirs made a new sub2 meanwhile
            shutil.rmtree(os.path.join(root, "sub2"), ignore_errors=True)
    swaps += 1
print(swaps)
"""


def test_a_process_swapping_entries_for_symlinks_never_gets_a_read_or_write_outside(
    tree: Path,
) -> None:
    """Issue 12.8: race.txt and sub2/ flip between real entries and symlinks to outside
    thousands of times while read_file and write_file run: zero outside reads or writes."""
    outside = tree.parent / "outside"
    (tree / "race.txt").write_text("inside")
    (tree / "sub2").mkdir()
    (tree / "sub2" / "secret.txt").write_text("inside")
    stop = tree.parent / "stop"
    tools = load_tools(HostConfig(tools=("fs",), root=str(tree)))
    read_file, write_file = tools.get("read_file"), tools.get("write_file")
    assert read_file is not None and write_file is not None

    def call(fn: Any, **kwargs: Any) -> str:
        try:
            out = fn(**kwargs)
        except NodeError as exc:
            return "refused" if "outside the root" in exc.message else "missing"
        except OSError:
            return "missing"
        return str(out.get("text", "written"))

    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(tree), str(outside), str(stop)],
        stdout=subprocess.PIPE, text=True,
    )
    seen: dict[str, int] = {}
    calls = 0
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and (
            calls < 4000 or seen.get("refused", 0) < 20 or seen.get("inside", 0) < 20
        ):
            for result in (
                call(read_file.fn, path="race.txt"),
                call(read_file.fn, path="sub2/secret.txt"),
                call(write_file.fn, path="race.txt", text="inside"),
                call(write_file.fn, path="sub2/secret.txt", text="inside"),
                call(write_file.fn, path="sub2/made/new.txt", text="inside", make_dirs=True),
            ):
                seen[result] = seen.get(result, 0) + 1
            calls += 5
    finally:
        stop.touch()
        swaps = int(swapper.communicate(timeout=30)[0])
    assert "SECRET" not in seen, f"read outside the root {seen['SECRET']} times in {calls}"
    assert (outside / "secret.txt").read_text() == "SECRET", "write_file wrote outside"
    assert (outside / "dir" / "secret.txt").read_text() == "SECRET", "write_file wrote outside"
    assert sorted(p.name for p in (outside / "dir").iterdir()) == ["secret.txt"]
    # the race was live: both states were met many times
    print(f"{swaps} swaps, {calls} calls: {seen}")
    assert swaps >= 100 and seen.get("refused", 0) >= 20 and seen.get("inside", 0) >= 20, (
        swaps, seen,
    )
