"""``python -m bench.startup``: how long a host takes from spawn to its ``handshake/resp``.

Each run spawns the command fresh, writes one ``handshake/req`` line to its stdin at
once (an agent that spawns ``a2e-host stdio`` does the same), and times from just before
the spawn to the moment the ``handshake/resp`` line is read back; then stdin is closed and
the process reaped (not timed). Printed: min / median / max milliseconds per command, with
the bare interpreter (``python -c pass``) as the floor no Python host can go under.

``--importtime`` adds one run under ``python -X importtime`` and lists the imports that
cost most (cumulative µs, top-level ones first) — where the rest of the time goes.

Bytecode: an installed package is imported from ``.pyc`` files; a checkout under
``PYTHONDONTWRITEBYTECODE=1`` compiles every module of the package from source at each
start (~80 ms on a 2-core machine). So that the figure is the installed one, the runs
get ``PYTHONPYCACHEPREFIX`` set to a fresh temporary directory (filled by the uncounted
warm-up run, nothing written into the checkout) and ``PYTHONDONTWRITEBYTECODE`` unset;
``--source`` measures the compile-every-time case instead.

Usage::

    python -m bench.startup                      # a2e-host stdio, 15 runs
    python -m bench.startup -n 30 --importtime
    python -m bench.startup --command "a2e-host stdio --tools fs" --json

Exit status 0, or 1 when a run did not answer the handshake (its stderr is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

HANDSHAKE = b'{"type":"handshake/req","id":"h1","agent_caps":["chains"]}\n'
DEFAULT_COMMAND = "a2e-host stdio"
RUN_TIMEOUT = 30.0
"""Seconds one run may take before it counts as failed."""


@dataclass
class Timing:
    """Milliseconds per run of one command."""

    label: str
    runs_ms: list[float] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        runs = sorted(self.runs_ms)
        return {
            "command": self.label,
            "runs": len(runs),
            "min_ms": round(runs[0], 1),
            "median_ms": round(statistics.median(runs), 1),
            "max_ms": round(runs[-1], 1),
        }


class RunFailed(RuntimeError):
    """A run ended or timed out before answering the handshake."""


def time_to_handshake(argv: list[str], *, env: dict[str, str] | None = None) -> float:
    """Spawn ``argv``, send a handshake, return milliseconds until ``handshake/resp``.

    Raises:
        RunFailed: the process closed stdout, or took over :data:`RUN_TIMEOUT` seconds.
    """
    started = time.perf_counter()
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(HANDSHAKE)
        process.stdin.flush()
        line = process.stdout.readline()
        elapsed = (time.perf_counter() - started) * 1000
        if b'"handshake/resp"' not in line:
            process.kill()
            _, err = process.communicate(timeout=RUN_TIMEOUT)
            raise RunFailed(f"{shlex.join(argv)} answered {line[:200]!r}; stderr:\n"
                            f"{err.decode('utf-8', 'replace')}")
        process.communicate(timeout=RUN_TIMEOUT)  # closes stdin: the host exits
        return elapsed
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def time_floor(env: dict[str, str] | None = None) -> float:
    """Milliseconds to start and stop the bare interpreter (``python -c pass``)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True, env=env)
    return (time.perf_counter() - started) * 1000


def bytecode_env(cache_dir: str | None) -> dict[str, str]:
    """The children's environment: with ``cache_dir``, bytecode is written and read there
    (``PYTHONPYCACHEPREFIX``); without, as this process's environment says."""
    env = dict(os.environ)
    if cache_dir is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache_dir
    return env


def measure(
    commands: list[str], runs: int, warmup: int = 1, *, env: dict[str, str] | None = None
) -> list[Timing]:
    """Time every command ``runs`` times (after ``warmup`` uncounted runs), interleaved
    so that load drift on a shared machine hits all of them alike."""
    timings = [Timing("python -c pass (floor)")] + [Timing(c) for c in commands]
    argvs = [shlex.split(c) for c in commands]
    for round_no in range(warmup + runs):
        floor = time_floor(env)
        samples = [time_to_handshake(argv, env=env) for argv in argvs]
        if round_no < warmup:
            continue
        timings[0].runs_ms.append(floor)
        for timing, sample in zip(timings[1:], samples, strict=True):
            timing.runs_ms.append(sample)
    return timings


def import_breakdown(
    command: str, top: int = 15, *, env: dict[str, str] | None = None
) -> list[tuple[str, int, int]]:
    """The costliest imports of one run of ``command`` under ``-X importtime``.

    ``a2e-host …`` is run as ``python -X importtime -m a2e_host …``, ``python …`` as
    ``python -X importtime …``; any other command gives an empty list.

    Returns:
        ``(module, self µs, cumulative µs)`` for the ``top`` largest cumulative times.
    """
    argv = shlex.split(command)
    program = os.path.basename(argv[0]) if argv else ""
    if program == "a2e-host":
        argv = [sys.executable, "-X", "importtime", "-m", "a2e_host", *argv[1:]]
    elif program.startswith("python"):
        argv = [argv[0], "-X", "importtime", *argv[1:]]
    else:
        return []
    done = subprocess.run(argv, input=HANDSHAKE, capture_output=True, timeout=RUN_TIMEOUT,
                          env=env)
    rows: list[tuple[str, int, int]] = []
    for raw in done.stderr.decode("utf-8", "replace").splitlines():
        if not raw.startswith("import time:") or "|" not in raw:
            continue
        parts = raw[len("import time:"):].split("|")
        try:
            self_us, cumulative_us = int(parts[0]), int(parts[1])
        except ValueError:  # the header line
            continue
        name = parts[2].rstrip()
        depth = (len(name) - len(name.lstrip())) // 2
        if depth == 0:
            rows.append((name.strip(), self_us, cumulative_us))
    rows.sort(key=lambda r: r[2], reverse=True)
    return rows[:top]


def _table(timings: list[Timing]) -> str:
    rows = [t.row() for t in timings]
    width = max(len(r["command"]) for r in rows)
    lines = [f"{'command':<{width}}  runs  min ms  median ms  max ms"]
    for r in rows:
        lines.append(f"{r['command']:<{width}}  {r['runs']:>4}  {r['min_ms']:>6.1f}  "
                     f"{r['median_ms']:>9.1f}  {r['max_ms']:>6.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__,
                                     allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--runs", type=int, default=15, help="timed runs (default 15)")
    parser.add_argument("--command", action="append", default=None,
                        help=f"command to time (repeatable; default {DEFAULT_COMMAND!r})")
    parser.add_argument("--importtime", action="store_true",
                        help="also list the costliest imports of one run")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--source", action="store_true",
                        help="no bytecode cache: compile the modules at every start")
    args = parser.parse_args(argv)
    commands = args.command or [DEFAULT_COMMAND]
    with tempfile.TemporaryDirectory(prefix="a2e-startup-pyc-") as cache_dir:
        env = bytecode_env(None if args.source else cache_dir)
        if args.source:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            env.pop("PYTHONPYCACHEPREFIX", None)
        try:
            timings = measure(commands, max(1, args.runs), env=env)
            imports = ({c: import_breakdown(c, env=env) for c in commands}
                       if args.importtime else {})
        except (RunFailed, OSError, subprocess.TimeoutExpired) as exc:
            print(f"bench.startup: {exc}", file=sys.stderr)
            return 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if args.json:
        print(json.dumps({
            "load_average": load, "cpus": os.cpu_count(), "bytecode": not args.source,
            "results": [t.row() for t in timings],
            "imports": {c: [{"module": m, "self_us": s, "cumulative_us": cu}
                            for m, s, cu in rows] for c, rows in imports.items()},
        }, indent=2))
        return 0
    cached = "modules compiled at every start" if args.source else "bytecode cached"
    print(f"spawn → handshake/resp, {cached}, {os.cpu_count()} CPUs"
          + (f", load {load:.2f} at the end" if load is not None else ""))
    print(_table(timings))
    for command, rows in imports.items():
        print(f"\ncostliest top-level imports of {command!r} (-X importtime, one run):")
        for module, _self_us, cumulative in rows:
            print(f"  {cumulative / 1000:8.1f} ms  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
