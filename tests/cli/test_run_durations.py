"""``a2e-host run`` shows each node's duration by the host's clock, as the chain's: no
node is longer than its whole chain, even when its events are read late (stdout a pipe
with a line per map item). The real CLI on README's first example."""

from __future__ import annotations

import re
import subprocess

from tests.support import REPO
from tests.support.process import CLI


def _ms(text: str) -> float:
    value, unit = text.split()
    return float(value) * (1 if unit == "ms" else 1000)


def test_no_node_of_the_readme_example_takes_longer_than_its_chain() -> None:
    done = subprocess.run([*CLI, "run", "examples/repo-report.json", "--allow-proc", "wc"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    [footer] = [line for line in lines if line.startswith("chain repo-report succeeded:")]
    chain_ms = int(re.fullmatch(r"chain repo-report succeeded: \d+ nodes in (\d+) ms",
                                footer).group(1))  # type: ignore[union-attr]
    nodes = {m.group(1): _ms(m.group(2)) for m in (
        re.match(r"\[\s*\d+\] done  (\S+)  (\d+(?:\.\d+)? m?s)", line) for line in lines) if m}
    assert {"files", "wc", "read", "report"} <= nodes.keys(), lines[:20]
    # both rounded to whole ms: 1 ms of slack each way
    assert {n: ms for n, ms in nodes.items() if ms > chain_ms + 2} == {}
