"""Issue 19, traces: ``a2e-host run`` honours ``otel_exporter`` like ``serve`` and
``stdio`` do (the real CLI)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.process import CLI, REPO, host_env

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_run_with_the_console_exporter_writes_spans_to_stderr_and_only_the_answer_to_stdout(
    tmp_path: Path,
) -> None:
    chain = tmp_path / "chain.json"
    chain.write_text(json.dumps({
        "entry_node": "a", "trace_context": {"traceparent": TRACEPARENT},
        "nodes": [{"node_id": "a", "kind": "tool", "name": "word_count",
                   "input": {"text": "one two"}}]}), encoding="utf-8")
    done = subprocess.run([*CLI, "run", str(chain), "--json"], capture_output=True,
                          text=True, timeout=60, cwd=REPO,
                          env=host_env(A2E_OTEL_EXPORTER="console"))
    assert done.returncode == 0, done.stderr
    response = json.loads(done.stdout)  # one JSON line: no span on stdout
    assert (response["type"], response["success"]) == ("chain/resp", True)
    assert '"name": "a2e.chain"' in done.stderr and '"name": "a2e.node"' in done.stderr
    assert '"trace_id": "0x4bf92f3577b34da6a3ce929d0e0e4736"' in done.stderr
    assert '"a2e.tool.name": "word_count"' in done.stderr
