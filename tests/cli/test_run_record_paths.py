"""``a2e-host run --record PATH`` where PATH is not a file to write: one line saying what
it is, exit 2, before the chain runs, with or without ``--force``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "a2e_host"]
CHAIN = {"entry_node": "a", "nodes": [
    {"node_id": "a", "kind": "tool", "name": "word_count", "input": {"text": "x"}}]}


def record(tmp_path: Path, target: str, *flags: str) -> subprocess.CompletedProcess[str]:
    chain = tmp_path / "chain.json"
    chain.write_text(json.dumps(CHAIN), encoding="utf-8")
    return subprocess.run([*CLI, "run", str(chain), "--final", "--record", target, *flags],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)


def test_a_fifo_or_a_directory_as_the_record_is_named_for_what_it_is_not_as_existing(
        tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "dir").mkdir()
    said = {
        "pipe": "is not a regular file (a pipe, socket or device); name a file",
        "dir": "is a directory; name a file",
    }
    for name, reason in said.items():
        for flags in ((), ("--force",)):
            done = record(tmp_path, name, *flags)
            assert done.returncode == 2, (name, flags, done.stderr)
            assert done.stdout == ""
            assert done.stderr == f"a2e-host run: --record file {name!r} {reason}\n", flags


def test_a_configuration_error_leaves_the_forced_record_file_as_it_was(tmp_path: Path) -> None:
    # a plugin refuses the configuration when the host is built: after the config loaded
    (tmp_path / "host.toml").write_text("[mcp]\nsevers = {}\n", encoding="utf-8")
    kept = tmp_path / "old.ndjson"
    kept.write_text('{"kept": true}\n', encoding="utf-8")
    done = record(tmp_path, "old.ndjson", "--force", "--config", "host.toml")
    assert done.returncode == 2, done.stderr
    assert "configuration error" in done.stderr and "severs" in done.stderr, done.stderr
    assert kept.read_text(encoding="utf-8") == '{"kept": true}\n'
