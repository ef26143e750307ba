"""The conformance kit as a pytest plugin: one test item per case, against a real host."""

from __future__ import annotations

import subprocess
import sys

from tests.support import REPO

# pytest's start-up, a probe and two host processes (the shared session, and one for the
# case that lowers max_nodes): a few seconds, under the global guard even when busy.
PLUGIN_TIMEOUT = 90.0


def test_the_plugin_runs_selected_cases_as_pytest_items() -> None:
    host = f"{sys.executable} -m a2e_host stdio --tools conformance"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conformance.pytest_plugin", "conformance/cases",
         "--a2e-stdio", host, "-k", "cycle", "-q", "-o", "addopts=",
         "-p", "no:hypothesispytest"],  # not needed here; importing it costs a second
        cwd=REPO, capture_output=True, text=True, timeout=PLUGIN_TIMEOUT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    summary = done.stdout.strip().splitlines()[-1]
    passed = int(summary.split(" passed")[0].split()[-1])
    assert passed >= 5 and "failed" not in summary, summary
