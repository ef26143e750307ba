"""``a2e-host run`` warns about chain-file fields no field reads (a misspelling such as
``"timout"``), on stderr, one line each, the same warnings ``validate`` prints."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.process import CLI, host_env

TYPOS = {"entry_node": "a", "timout": 5, "nodes": [
    {"node_id": "a", "kind": "tool", "name": "upper", "input": {"text": "x"}, "retrys": 2}]}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, cwd=cwd,
                          env=host_env())


def test_run_prints_validates_warnings_for_misspelt_fields_on_stderr(tmp_path: Path) -> None:
    chain = tmp_path / "typos.json"
    chain.write_text(json.dumps(TYPOS))
    ran = _cli("run", str(chain), "--tools", "conformance", "--json", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["final_output"] == {"text": "X"}  # stdout: the response only
    validated = _cli("validate", str(chain), "--tools", "conformance", cwd=tmp_path)
    expected = [line for line in validated.stdout.splitlines() if line.startswith("warning: ")]
    assert expected == [
        "warning: field 'timout': unknown chain/req field 'timout' is ignored (fix: did you "
        "mean 'timeout'?)",
        "warning: node 'a' field 'retrys': unknown node field 'retrys' is ignored (fix: did "
        "you mean 'retry'?)",
    ]
    assert ran.stderr.splitlines() == [f"a2e-host run: {line}" for line in expected]
