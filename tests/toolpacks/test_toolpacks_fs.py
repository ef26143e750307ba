"""The fs pack: confinement to the root, UTF-8 text, sorted relative outputs."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError
from a2e_host.tools import ToolRegistry, load_tools


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "sub").mkdir(parents=True)
    (r / "a.txt").write_text("hello\nworld\n", encoding="utf-8")
    (r / "sub" / "b.txt").write_text("b", encoding="utf-8")
    (r / "sub" / "c.md").write_text("c", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("top secret", encoding="utf-8")
    return r


@pytest.fixture
def fs(root: Path) -> ToolRegistry:
    return load_tools(HostConfig(tools=("fs",), root=str(root)))


def call(fs: ToolRegistry, name: str, args: dict[str, Any]) -> Any:
    tool = fs.get(name)
    assert tool is not None
    return anyio.run(tool.invoke, args)


def test_read_file_returns_path_text_and_bytes(fs: ToolRegistry) -> None:
    assert call(fs, "read_file", {"path": "a.txt"}) == {
        "path": "a.txt",
        "text": "hello\nworld\n",
        "bytes": 12,
    }


def test_dotdot_is_refused_naming_the_rule(fs: ToolRegistry) -> None:
    with pytest.raises(NodeError, match=r"'\.\.' components are not allowed"):
        call(fs, "read_file", {"path": "../../etc/passwd"})


def test_absolute_path_outside_the_root_is_refused(fs: ToolRegistry, root: Path) -> None:
    with pytest.raises(NodeError, match="absolute paths must be inside the root"):
        call(fs, "read_file", {"path": str(root.parent / "secret.txt")})


def test_absolute_path_inside_the_root_is_accepted(fs: ToolRegistry, root: Path) -> None:
    assert call(fs, "read_file", {"path": str(root / "sub" / "b.txt")})["path"] == "sub/b.txt"


def test_symlink_escaping_the_root_is_refused(fs: ToolRegistry, root: Path) -> None:
    os.symlink(root.parent / "secret.txt", root / "link.txt")
    with pytest.raises(NodeError, match="resolves outside the root"):
        call(fs, "read_file", {"path": "link.txt"})


def test_binary_file_is_refused_as_not_utf8(fs: ToolRegistry, root: Path) -> None:
    (root / "bin.dat").write_bytes(b"ok\xff\xfe")
    with pytest.raises(NodeError, match=r"not UTF-8 text \(invalid byte at offset 2\)"):
        call(fs, "read_file", {"path": "bin.dat"})


def test_read_cap_is_enforced(fs: ToolRegistry) -> None:
    with pytest.raises(NodeError, match="12 bytes, over the 5-byte read cap"):
        call(fs, "read_file", {"path": "a.txt", "max_bytes": 5})


def test_glob_paths_are_sorted_and_relative(fs: ToolRegistry) -> None:
    assert call(fs, "glob", {"pattern": "**/*.txt"}) == {
        "paths": ["a.txt", "sub/b.txt"],
        "count": 2,
        "truncated": False,
    }


def test_glob_skips_hidden_names_unless_asked_or_spelled(fs: ToolRegistry, root: Path) -> None:
    (root / ".venv" / "lib").mkdir(parents=True)
    (root / ".venv" / "lib" / "x.txt").write_text("x")
    (root / ".notes.txt").write_text("n")
    assert call(fs, "glob", {"pattern": "**/*.txt"})["paths"] == ["a.txt", "sub/b.txt"]
    assert call(fs, "glob", {"pattern": "**/*.txt", "hidden": True})["paths"] == [
        ".notes.txt",
        ".venv/lib/x.txt",
        "a.txt",
        "sub/b.txt",
    ]
    assert call(fs, "glob", {"pattern": ".venv/**/*.txt"})["paths"] == [".venv/lib/x.txt"]


def test_glob_pattern_with_dotdot_is_refused(fs: ToolRegistry) -> None:
    with pytest.raises(NodeError, match="must be relative, without '..'"):
        call(fs, "glob", {"pattern": "../*.txt"})


def test_write_then_read_and_stat(fs: ToolRegistry, root: Path) -> None:
    assert call(fs, "write_file", {"path": "new/n.txt", "text": "é", "make_dirs": True}) == {
        "path": "new/n.txt",
        "bytes": 2,
    }
    assert (root / "new" / "n.txt").read_text(encoding="utf-8") == "é"
    st = call(fs, "stat", {"path": "new/n.txt"})
    assert (st["exists"], st["type"], st["size"]) == (True, "file", 2)
    assert call(fs, "stat", {"path": "nope"})["exists"] is False


def test_write_outside_the_root_is_refused(fs: ToolRegistry, root: Path) -> None:
    with pytest.raises(NodeError, match="refused"):
        call(fs, "write_file", {"path": "../evil.txt", "text": "x"})
    assert not (root.parent / "evil.txt").exists()


def test_list_dir_lists_sorted_entries(fs: ToolRegistry) -> None:
    out = call(fs, "list_dir", {"path": "."})
    assert [(e["name"], e["type"]) for e in out["entries"]] == [("a.txt", "file"), ("sub", "dir")]
    assert out["truncated"] is False


def test_a_symlink_loop_anywhere_does_not_break_glob_star_star(
    fs: ToolRegistry, root: Path
) -> None:
    (root / "loop").symlink_to(".")
    (root / "self").symlink_to("self")
    (root / "sub" / "back").symlink_to("..")
    (root / "sub" / "ring1.txt").symlink_to("ring2.txt")
    (root / "sub" / "ring2.txt").symlink_to("ring1.txt")
    assert call(fs, "glob", {"pattern": "**/*.txt"}) == {
        "paths": ["a.txt", "sub/b.txt"],
        "count": 2,
        "truncated": False,
    }
    assert call(fs, "glob", {"pattern": "**"})["paths"] == [".", "sub"]
    # a pattern that names the link walks through it, inside the root
    assert call(fs, "glob", {"pattern": "loop/sub/*.md"})["paths"] == ["loop/sub/c.md"]


def test_glob_lists_symlinks_leading_inside_and_drops_those_leading_outside(
    fs: ToolRegistry, root: Path
) -> None:
    (root / "in.txt").symlink_to("a.txt")
    (root / "out.txt").symlink_to(root.parent / "secret.txt")
    (root / "dangling.txt").symlink_to("nowhere.txt")
    (root / "outdir").symlink_to(root.parent)
    assert call(fs, "glob", {"pattern": "*.txt"})["paths"] == ["a.txt", "in.txt"]
    assert call(fs, "glob", {"pattern": "outdir/*.txt"})["paths"] == []


def test_many_double_stars_cost_one_walk(fs: ToolRegistry, root: Path) -> None:
    deep = root.joinpath(*["d"] * 30)
    deep.mkdir(parents=True)
    (deep / "x.txt").write_text("x")
    pattern = "**/d/" * 12 + "**/*.txt"
    started = time.monotonic()
    out = call(fs, "glob", {"pattern": pattern})
    assert out["paths"] == ["/".join(["d"] * 30 + ["x.txt"])]
    assert time.monotonic() - started < 10, "repeated ** must not multiply the walk"


def test_stat_follows_links_inside_and_refuses_links_outside(fs: ToolRegistry, root: Path) -> None:
    (root / "in").symlink_to("sub")
    (root / "out").symlink_to(root.parent / "secret.txt")
    st = call(fs, "stat", {"path": "in"})
    assert (st["path"], st["type"], st["exists"]) == ("sub", "dir", True)
    with pytest.raises(NodeError, match="resolves outside the root"):
        call(fs, "stat", {"path": "out"})
    assert call(fs, "stat", {"path": "a.txt/x"})["exists"] is False


def test_list_dir_reports_symlinks_as_symlinks(fs: ToolRegistry, root: Path) -> None:
    (root / "in").symlink_to("sub")
    out = call(fs, "list_dir", {"path": "."})
    assert [(e["name"], e["type"]) for e in out["entries"]] == [
        ("a.txt", "file"), ("in", "symlink"), ("sub", "dir"),
    ]
    assert call(fs, "list_dir", {"path": "in"})["path"] == "sub"


def test_write_file_refuses_a_directory_and_a_missing_parent(fs: ToolRegistry) -> None:
    with pytest.raises(NodeError, match="'sub' is a directory"):
        call(fs, "write_file", {"path": "sub", "text": "x"})
    with pytest.raises(NodeError, match="pass make_dirs: true"):
        call(fs, "write_file", {"path": "no/such.txt", "text": "x"})


def test_write_file_truncates_unless_appending(fs: ToolRegistry, root: Path) -> None:
    call(fs, "write_file", {"path": "a.txt", "text": "new"})
    assert (root / "a.txt").read_text() == "new"
    call(fs, "write_file", {"path": "a.txt", "text": "+", "append": True})
    assert (root / "a.txt").read_text() == "new+"


def test_a_missing_root_stops_the_pack_from_loading(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="pass an existing directory with --root"):
        load_tools(HostConfig(tools=("fs",), root=str(tmp_path / "nope")))
