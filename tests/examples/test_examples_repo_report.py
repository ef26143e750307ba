"""examples/repo-report.json on real files: counts checked against a walk done here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support import REPO

CHAIN = REPO / "examples" / "repo-report.json"


def snapshot_python_files(dest: Path) -> None:
    """Copy this repository's Python files (a fixed snapshot: the tree may change meanwhile)."""
    for path in REPO.glob("**/*.py"):
        if any(part.startswith(".") for part in path.relative_to(REPO).parts):
            continue  # .git, .venv, .ci-venv: the chain's glob skips hidden names too
        if path.is_file() and not path.is_symlink():
            target = dest / path.relative_to(REPO)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                shutil.copyfile(path, target)
            except FileNotFoundError:  # removed while copying
                continue


def expected_report(root: Path, pattern: str, large_lines: int) -> dict[str, Any]:
    texts = [p.read_text(encoding="utf-8") for p in sorted(root.glob(pattern)) if p.is_file()]
    lines = sum(len(t.splitlines()) for t in texts)
    newlines = sum(p.read_bytes().count(b"\n") for p in root.glob(pattern) if p.is_file())
    return {
        "pattern": pattern,
        "files": len(texts),
        "lines": lines,
        "words": sum(len(t.split()) for t in texts),
        "chars": sum(len(t) for t in texts),
        "wc_lines": newlines,
        "wc_agrees": lines == newlines,
        "size": "large" if lines > large_lines else "small",
    }


def run_report(cwd: Path, *extra: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "a2e_host", "run", str(CHAIN), "--allow-proc", "wc", "--json",
         *extra],
        capture_output=True, text=True, timeout=120, cwd=cwd,  # the fs root is the cwd
    )
    assert done.returncode == 0, done.stderr + done.stdout
    response: dict[str, Any] = json.loads(done.stdout)
    return response


def test_report_over_this_repository_matches_an_independent_count(tmp_path: Path) -> None:
    snapshot_python_files(tmp_path)
    response = run_report(tmp_path)
    report = response["final_output"]
    expected = expected_report(tmp_path, "**/*.py", 5000)
    assert expected["files"] > 10  # the snapshot really holds the project's sources
    assert {k: report[k] for k in expected} == expected
    assert report["summary"] == (
        f"{expected['size']}: {expected['lines']} lines of Python in {expected['files']} files "
        f"({'over' if expected['size'] == 'large' else 'at most'} 5000)"
    )
    if expected["wc_agrees"]:
        assert report["check"] == (
            f"wc -l agrees: {expected['lines']} lines in {expected['files']} files"
        )
    else:
        assert report["check"] == (
            f"wc -l counts {expected['wc_lines']} lines but word_count counts "
            f"{expected['lines']}"
        )
    per_file = response["outputs"]["counts"]
    paths = response["outputs"]["files"]["paths"]
    for path, counts in zip(paths, per_file, strict=True):
        text = (tmp_path / path).read_text(encoding="utf-8")
        assert counts == {"words": len(text.split()), "lines": len(text.splitlines()),
                          "chars": len(text)}, path


def test_report_notices_when_wc_and_word_count_disagree(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\ny = 2\n", encoding="utf-8")
    (tmp_path / "pkg" / "b.py").write_text("print('no newline at the end')", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("not python\n", encoding="utf-8")
    response = run_report(tmp_path, "--input", '{"pattern": "pkg/*.py", "large_lines": 2}')
    report = response["final_output"]
    assert report == {
        **expected_report(tmp_path, "pkg/*.py", 2),
        "summary": "large: 3 lines of Python in 2 files (over 2)",
        "check": "wc -l counts 2 lines but word_count counts 3",
    }
    assert report["wc_agrees"] is False and report["size"] == "large"
    assert "agreed" not in response["outputs"]  # the branch skipped it


def test_a_small_tree_takes_the_small_branch_and_wc_agrees(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\ny = 2\n", encoding="utf-8")
    (tmp_path / "pkg" / "b.py").write_text("import os\n", encoding="utf-8")
    response = run_report(tmp_path, "--input", '{"pattern": "pkg/*.py", "large_lines": 100}')
    assert response["final_output"] == {
        **expected_report(tmp_path, "pkg/*.py", 100),
        "summary": "small: 3 lines of Python in 2 files (at most 100)",
        "check": "wc -l agrees: 3 lines in 2 files",
    }
    assert response["final_output"]["size"] == "small"
    assert "large" not in response["outputs"] and "disagreed" not in response["outputs"]
