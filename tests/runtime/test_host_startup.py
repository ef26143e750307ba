"""A configuration a plugin refuses stops the host at start, with one clear line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.process import CLI


@pytest.mark.parametrize("command", ["stdio", "serve"])
def test_missing_skills_directory_stops_the_start_with_exit_2(
    tmp_path: Path, command: str
) -> None:
    argv = [*CLI, command, "--skills", str(tmp_path / "nowhere")]
    if command == "serve":
        argv += ["--port", "0"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("a2e-host: configuration error: plugin 'chains': ")
    assert "nowhere" in lines[0] and "is not a directory" in lines[0]


def test_unknown_tool_pack_stops_the_start_with_exit_2() -> None:
    done = subprocess.run([*CLI, "stdio", "--tools", "nope"], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert "unknown tool pack 'nope'" in done.stderr
    assert "listening" not in done.stderr
