"""Start-up of the commands agents spawn: ``a2e-host stdio`` and ``serve`` answer without
importing what only the local commands use (the CLI framework, the terminal UI, YAML);
``python -m bench.startup`` measures spawn → ``handshake/resp``."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.support import REPO

HANDSHAKE = b'{"type":"handshake/req","id":"h1","agent_caps":["chains"]}\n'
UNNEEDED = ("typer", "click", "pydantic", "rich", "pygments", "yaml")
"""Top-level packages the serving commands must not import."""


PROBE = (
    "import atexit, json, sys\n"
    "def report():\n"
    "    names = {n.split('.')[0] for n, m in sys.modules.items() if m is not None}\n"
    "    print('MODULES ' + json.dumps(sorted(names)), file=sys.stderr, flush=True)\n"
    "atexit.register(report)\n"
    "from a2e_host.cli import main\n"
    "main(sys.argv[1:])\n"
)
"""Runs the CLI and, at exit, prints the top-level packages the process imported."""


def imported(stderr: bytes) -> set[str]:
    """The packages :data:`PROBE` reported."""
    for line in stderr.decode("utf-8", "replace").splitlines():
        if line.startswith("MODULES "):
            return set(json.loads(line[len("MODULES "):]))
    raise AssertionError(f"no module report in stderr: {stderr[-2000:]!r}")


def test_stdio_answers_a_handshake_without_importing_unneeded_packages() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "stdio", "--tools", "fs,text"],
        input=HANDSHAKE, capture_output=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[0])["type"] == "handshake/resp"
    modules = imported(done.stderr)
    assert {"a2e_host", "a2e_chains", "structlog", "anyio"} <= modules  # the report is real
    assert modules.isdisjoint(UNNEEDED), sorted(modules & set(UNNEEDED))


def test_serve_listens_without_importing_unneeded_packages() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", PROBE, "serve", "--port", "0", "--log-format", "json"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        first = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and b"a2e-host listening on" not in first:
            first = process.stderr.readline()
            if not first:
                break
        assert b"a2e-host listening on ws://" in first
        process.terminate()  # the orderly stop; the probe reports at exit
        _, rest = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0
    modules = imported(rest)
    assert {"a2e_host", "websockets"} <= modules
    assert modules.isdisjoint(UNNEEDED), sorted(modules & set(UNNEEDED))


def test_rich_is_still_importable_after_the_serving_path_skipped_it() -> None:
    code = (
        "import sys; from a2e_host import cli; cli._import_host_without_rich(); "
        "assert 'rich' not in sys.modules; import rich.console; print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.strip() == "ok", done.stderr


@pytest.mark.timeout(180)
def test_bench_startup_reports_min_median_max_per_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.startup", "-n", "2", "--json", "--importtime"],
        capture_output=True, text=True, timeout=170,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    rows = {row["command"]: row for row in report["results"]}
    host = rows["a2e-host stdio"]
    assert host["runs"] == 2
    assert 0 < host["min_ms"] <= host["median_ms"] <= host["max_ms"]
    assert rows["python -c pass (floor)"]["runs"] == 2
    modules = [row["module"] for row in report["imports"]["a2e-host stdio"]]
    assert any(m.startswith("a2e_host") for m in modules)
