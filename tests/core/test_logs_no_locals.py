"""A logged traceback never carries frame locals: a local may be the configuration (its
``auth_token``) or a request's data.

A third-party pack whose tool fails with a bug, closing over the configuration as a pack
factory's tools do (``config.root_path``), is run by a real ``a2e-host run`` with an auth
token configured and stderr piped, in both log renderers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.dist import install_dist

TOKEN = "tok-5ecret-d0-not-log"

PACK = '''
from a2e_host.config import HostConfig
from a2e_host.tools import Tool, ToolPack, tool


def make_tools(config: HostConfig) -> list[Tool]:
    @tool
    def crash(text: str) -> dict:
        """Fails with a bug."""
        where = config.root_path / text
        raise RuntimeError(f"bug while reading {where.name}")

    return [crash]


PACK = ToolPack(name="crash", description="A tool with a bug.", factory=make_tools)
'''


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return install_dist(tmp_path / "site", "a2e-crashpack", "0.1",
                        {"a2e_host.tools": {"crash": "a2e_crashpack:PACK"}},
                        files={"a2e_crashpack/__init__.py": PACK})


@pytest.mark.parametrize("log_format", ["auto", "console"])
def test_a_failing_tool_logs_a_short_traceback_without_the_auth_token(
    site: Path, tmp_path: Path, log_format: str
) -> None:
    chain = {"entry_node": "a", "nodes": [
        {"node_id": "a", "kind": "tool", "name": "crash", "input": {"text": "notes.txt"}}]}
    (tmp_path / "chain.json").write_text(json.dumps(chain))
    env = dict(os.environ, PYTHONPATH=str(site), A2E_AUTH_TOKEN=TOKEN)
    done = subprocess.run(
        [sys.executable, "-m", "a2e_host", "run", "chain.json", "--tools", "+crash",
         "--log-format", log_format],
        capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    assert "RuntimeError: bug while reading notes.txt" in done.stderr
    assert "a2e_crashpack/__init__.py" in done.stderr  # the traceback is there …
    assert TOKEN not in done.stderr  # … but not the frames' locals
    assert "HostConfig(" not in done.stderr
    assert len(done.stderr) < 2500, done.stderr
    if log_format == "auto":  # stderr is a pipe: JSON lines
        logged = [json.loads(line) for line in done.stderr.splitlines()
                  if line.startswith("{")]
        frames = [f for rec in logged for exc in rec.get("exception", [])
                  for f in exc["frames"]]
        assert frames and all("locals" not in f for f in frames)
