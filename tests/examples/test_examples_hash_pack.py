"""examples/hash-pack: a third-party tool pack found through its entry point.

"Installed" the way an installer would leave it, minus the copying: a ``*.dist-info``
directory whose ``entry_points.txt`` is written from the example's own ``pyproject.toml``,
on ``sys.path`` / ``PYTHONPATH`` beside the package's source. The host then discovers it
like any installed pack (``importlib.metadata``), and a real ``a2e-host run`` uses it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError
from a2e_host.tools import ToolPack, discover_packs, load_tools
from tests.support import REPO
from tests.support.dist import install_project

PACK_DIR = REPO / "examples" / "hash-pack"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A site directory holding the example's dist-info (entry points from its pyproject)."""
    return install_project(tmp_path / "site", PACK_DIR)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "a.dat").write_bytes(b"\x00\xff binary")
    (root / "sub" / "b.dat").write_bytes(b"b" * 5000)
    (root / "sub" / "notes.txt").write_text("not matched")
    (root / "escape.dat").symlink_to(tmp_path / "secret.dat")
    (tmp_path / "secret.dat").write_bytes(b"outside")
    return root


def test_the_pack_is_discovered_through_its_entry_point(
    site: Path, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(PACK_DIR))
    monkeypatch.syspath_prepend(str(site))
    packs = discover_packs()
    assert isinstance(packs["hash"], ToolPack) and packs["hash"].name == "hash"
    tools = load_tools(HostConfig(tools=("hash",), root=str(root)))
    assert tools.names() == ["file_sha256", "tree_size"]
    sha = tools.get("file_sha256")
    assert sha is not None
    assert anyio.run(sha.invoke, {"path": "a.dat"}) == {
        "path": "a.dat",
        "sha256": hashlib.sha256(b"\x00\xff binary").hexdigest(),
        "bytes": 9,
    }
    with pytest.raises(NodeError, match="resolves outside the root"):
        anyio.run(sha.invoke, {"path": "escape.dat"})
    assert sha.input_schema["required"] == ["path"]


def test_a_chain_runs_with_the_installed_pack(site: Path, root: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(PACK_DIR)]))
    done = subprocess.run(
        [sys.executable, "-m", "a2e_host", "run", str(PACK_DIR / "checksums.json"),
         "--tools", "hash", "--tools", "fs", "--tools", "json", "--root", str(root),
         "--input", '{"pattern": "**/*.dat"}', "--json"],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    resp = json.loads(done.stdout)
    assert resp["success"], resp
    regular = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    assert resp["final_output"] == {
        "files": len(regular),
        "bytes": sum(p.stat().st_size for p in regular),
        "sha256": [
            {"path": "a.dat", "sha256": hashlib.sha256(b"\x00\xff binary").hexdigest(),
             "bytes": 9},
            {"path": "sub/b.dat", "sha256": hashlib.sha256(b"b" * 5000).hexdigest(),
             "bytes": 5000},
        ],
    }
