"""``a2e-host run`` redacts a configured secret a tool prints, on every stream, as
``stdio`` and ``serve`` do (README "Secrets"): piped or on a terminal, with or without
``--json``. Every byte the process writes is scanned."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.process import CLI, host_env
from tests.support.terminal import run_on_terminal

SECRET = "supersecretvalue123"
CONFIG = """\
tools = ["secretprobe", "text"]
[secrets]
MY_KEY = {env = "MY_API_KEY", tools = ["secret_*"]}
"""
FAIL = {
    "chain_id": "leak",
    "entry_node": "probe",
    "nodes": [{"node_id": "probe", "kind": "tool", "name": "secret_fail",
               "input": {"a": {"$secret": "MY_KEY"}, "b": "plain"}}],
}


def _setup(tmp_path: Path) -> list[str]:
    (tmp_path / "host.toml").write_text(f"root = {json.dumps(str(tmp_path))}\n" + CONFIG)
    (tmp_path / "fail.json").write_text(json.dumps(FAIL))
    return [*CLI, "run", str(tmp_path / "fail.json"), "--config", str(tmp_path / "host.toml")]


@pytest.mark.parametrize("mode", [[], ["--json"], ["--json", "--events"], ["--final"]],
                         ids=["plain", "json", "json-events", "final"])
def test_run_piped_never_writes_a_secret_a_tool_prints(tmp_path: Path, mode: list[str]) -> None:
    done = subprocess.run([*_setup(tmp_path), *mode], capture_output=True, timeout=60,
                          cwd=tmp_path, env=host_env(MY_API_KEY=SECRET))
    assert done.returncode == 1, done.stderr.decode()
    everything = done.stdout + done.stderr
    assert SECRET.encode() not in everything
    # the tool's line did come out, redacted
    assert "secret_fail got a=«secret:MY_KEY» b=plain" in done.stderr.decode()


def test_run_on_a_terminal_never_writes_a_secret_a_tool_prints(tmp_path: Path) -> None:
    status, screen = run_on_terminal(
        _setup(tmp_path), cwd=tmp_path, env={**host_env(MY_API_KEY=SECRET), "COLUMNS": "120"})
    assert status == 1
    assert SECRET.encode() not in screen
    assert "secret_fail got a=«secret:MY_KEY» b=plain" in screen.decode("utf-8", "replace")
