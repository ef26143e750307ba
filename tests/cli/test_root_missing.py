"""A root that does not exist, or is not a directory, stops the start with exit 2 and one
line, as a missing skills directory does (issue 13.11): otherwise every glob silently
finds nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from a2e_host.chains.toolbox import Toolbox
from a2e_host.config import HostConfig
from tests.support.process import CLI


@pytest.mark.parametrize("command", ["stdio", "serve"])
@pytest.mark.parametrize("kind", ["missing", "file"])
def test_a_root_that_is_not_a_directory_stops_the_start_with_exit_2(
    tmp_path: Path, command: str, kind: str
) -> None:
    root = tmp_path / "nowhere"
    if kind == "file":
        root.write_text("not a directory")
    argv = [*CLI, command, "--tools", "fs", "--root", str(root)]
    if command == "serve":
        argv += ["--port", "0"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    what = "does not exist" if kind == "missing" else "is not a directory"
    assert lines[0] == (
        f"a2e-host: configuration error: plugin 'chains': root {str(root)!r} {what}; "
        f"pass an existing directory with --root (file tools and proc cwd are confined to it)"
    )


def test_the_toolbox_refuses_a_missing_root_even_without_file_tools(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist; pass an existing directory"):
        Toolbox.from_config(HostConfig(root=str(tmp_path / "nowhere")))
    assert Toolbox.from_config(HostConfig(root=str(tmp_path))).tool_names() == []
