"""An installed Python skill whose entry point cannot be imported stops the start with one
line naming it (every installed skill is served, so there is no "not enabled" to fall back
on), instead of a host that answers every handshake with ``no_caps``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.dist import install_dist

HANDSHAKE = {"type": "handshake/req", "id": "h", "agent_caps": ["chains"]}


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return install_dist(tmp_path / "site", "a2e-badskill", "0.1",
                        {"a2e_host.skills": {"broken": "a2e_nosuchskill:SKILL"}})


@pytest.mark.parametrize("command", ["stdio", "run"])
def test_a_broken_installed_skill_stops_the_start_with_one_line(
    site: Path, tmp_path: Path, command: str
) -> None:
    chain = {"entry_node": "a", "nodes": [{"node_id": "a", "kind": "tool", "name": "lines",
                                           "input": {"text": "x"}}]}
    (tmp_path / "c.json").write_text(json.dumps(chain))
    args = ["stdio", "--tools", "conformance"] if command == "stdio" else ["run", "c.json"]
    env = dict(os.environ, PYTHONPATH=str(site))
    done = subprocess.run(
        [sys.executable, "-m", "a2e_host", *args], input=json.dumps(HANDSHAKE) + "\n",
        capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert "'broken'" in done.stderr and "a2e_nosuchskill" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stdout == ""
