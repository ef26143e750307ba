"""The conformance kit ships with the package: another host's author runs it after
``pip install a2e-host`` as ``a2e-conformance`` (issue 13 item 15)."""

from __future__ import annotations

import fnmatch
import importlib
import json
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from tests.support import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_console_script_points_at_the_kits_main() -> None:
    target = PYPROJECT["project"]["scripts"]["a2e-conformance"]
    module, _, name = target.partition(":")
    assert (module, name) == ("conformance.cli", "main")
    assert callable(getattr(importlib.import_module(module), name))


def test_the_package_and_every_data_file_it_reads_are_installed() -> None:
    setuptools = PYPROJECT["tool"]["setuptools"]
    assert "conformance" in setuptools["packages"]
    globs = setuptools["package-data"]["conformance"]
    kit = REPO / "conformance"
    data = [p.relative_to(kit).as_posix() for p in kit.rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc")]
    assert {"requirements.json", "README.md", "cases/core.jsonl"} <= set(data)
    assert [f for f in data if not any(fnmatch.fnmatch(f, g) for g in globs)] == []


def test_the_kit_runs_the_spec_level_as_a_command_from_another_directory(
        tmp_path: Path) -> None:
    # issue 21: `a2e-conformance --stdio CMD` runs the spec level in under 60 s on 2 cores
    script = Path(sys.executable).with_name("a2e-conformance")
    command = str(script) if script.exists() else shutil.which("a2e-conformance")
    assert command, "no a2e-conformance next to this Python: reinstall (pip install -e .)"
    host = f"{sys.executable} -m a2e_host stdio --tools conformance"
    started = time.monotonic()
    done = subprocess.run([command, "--stdio", host, "--level", "spec", "--json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=90)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert {c["level"] for c in report["cases"]} == {"spec"}
    assert {c["status"] for c in report["cases"]} == {"passed"}
    assert set(report["levels"]) == {"spec MUST", "spec SHOULD"}
    assert report["levels"]["spec MUST"]["passed"] == 27
    assert took < 60, f"the spec level took {took:.1f} s"
