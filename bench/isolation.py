"""``python -m bench.isolation``: each hostile request of issue 12 beside a probe session.

Runs the rows of ``tests/hostile/cases.py`` — the same table the hostile suite runs —
one after another, each on a fresh ``a2e-host`` process with the default ceilings
(where a case sets one, it says so in its table row). Each hostile request is repeated
for :data:`REPEAT_FOR` seconds (at least once) while a probe session on its own
connection (its own process) pings every 20 ms. Printed per case: what the host
answered, whether that is the agreed outcome, how many times the request ran, the
probe's ping p50 / p99 / max (ms), the host's peak RSS (MiB, ``VmHWM``) and what it
added over the idle host, and the case's memory budget.

Goal (issue 12): probe p99 ≤ 50 ms and peak RSS ≤ budget + 100 MB over the idle host in
every case, on a 2-core machine. Not a timed test: the suite
(``pytest tests/hostile``) checks the behaviour with bounds loose enough for a loaded CI
box; this prints the figures.

Usage::

    python -m bench.isolation                      # every case, a markdown table
    python -m bench.isolation --cases 12.1,12.6-map-big-outputs --json
    python -m bench.isolation --readme             # + the README's figures paragraph

``--cases`` takes case ids or item numbers (``12.4`` selects every 12.4 case). Exit
status 1 when a case's outcome was not the agreed one, the host stopped serving, or a
probe ping went unanswered; a latency or memory figure over the goal is marked ✗ but is
a measurement, not an error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the table lives in tests/hostile/
    sys.path.insert(0, str(ROOT))

from tests.hostile.cases import CASES  # noqa: E402
from tests.hostile.harness import RSS_CONSTANT_MB, Case, CaseResult, run_case  # noqa: E402

P99_GOAL_MS = 50.0
"""Issue 12's goal for the probe's p99 ping latency."""

REPEAT_FOR = 2.0
"""Seconds each case's hostile action is repeated for (at least once), so that even a
request refused in a millisecond is measured over ~100 probe pings."""


def select(spec: str) -> list[Case]:
    """The cases named by ``spec``: comma-separated ids or item numbers; all when empty.

    Raises:
        SystemExit: a name that matches no case (the message lists the ids).
    """
    if not spec:
        return list(CASES)
    chosen: list[Case] = []
    for name in (part.strip() for part in spec.split(",") if part.strip()):
        found = [c for c in CASES if c.id == name or c.item == name]
        if not found:
            ids = ", ".join(c.id for c in CASES)
            raise SystemExit(f"no case {name!r}; the cases are: {ids}")
        chosen += [c for c in found if c not in chosen]
    return chosen


def figures(result: CaseResult) -> dict[str, Any]:
    """One case's row: outcome, probe latencies (ms), RSS (MiB), budget and goals."""
    probe = result.probe
    p99 = probe.quantile(0.99)
    problems = result.problems(probe_max_ms=math.inf)
    return {
        "case": result.case.id,
        "item": result.case.item,
        "outcome": result.summary,
        "agreed": not problems,
        "problems": problems,
        "runs": result.runs,
        "pings": probe.count,
        "unanswered": probe.unanswered,
        "p50_ms": round(probe.quantile(0.5), 1),
        "p99_ms": round(p99, 1),
        "max_ms": round(max(probe.latencies_ms, default=math.nan), 1),
        "peak_rss_mb": round(result.peak_kib / 1024, 1),
        "added_rss_mb": round(result.added_mb, 1),
        "budget_mb": result.case.budget("bench"),
        "budget": result.case.budget_note,
        "p99_goal_met": p99 <= P99_GOAL_MS,
        "rss_goal_met": result.added_mb <= result.rss_bound_mb,
        "seconds": round(result.elapsed, 1),
    }


def _mark(ok: bool) -> str:
    return "✓" if ok else "✗"


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table."""
    lines = [
        "| case | outcome | agreed | runs | probe p50 / p99 / max ms (pings) "
        "| host peak RSS MB (added) | budget | goals (p99 ≤ 50 ms, RSS ≤ budget + 100 MB) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        latency = f"{r['p50_ms']} / {r['p99_ms']} / {r['max_ms']} ({r['pings']}"
        if r["unanswered"]:
            latency += f", {r['unanswered']} unanswered"
        latency += ")"
        lines.append(
            f"| {r['case']} | {r['outcome']} | {_mark(r['agreed'])} | {r['runs']} | {latency} "
            f"| {r['peak_rss_mb']:.0f} (+{r['added_rss_mb']:.0f}) | {r['budget']} "
            f"| {_mark(r['p99_goal_met'])} {_mark(r['rss_goal_met'])} |"
        )
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    """Where the figures were taken."""
    load = os.getloadavg()
    return {
        "date": time.strftime("%Y-%m-%d"),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "load_at_start": round(load[0], 2),
    }


def readme_lines(where: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The README's figures line (one paragraph) for ``rows``: the worst p99, the slowest
    ping and the largest RSS growth, each with its case, and whether every case met the
    goals."""
    worst_p99 = max(rows, key=lambda r: r["p99_ms"] if r["p99_ms"] == r["p99_ms"] else 0)
    slowest = max(rows, key=lambda r: r["max_ms"] if r["max_ms"] == r["max_ms"] else 0)
    biggest = max(rows, key=lambda r: r["added_rss_mb"])
    agreed = sum(r["agreed"] for r in rows)
    missed = [r["case"] for r in rows if not (r["p99_goal_met"] and r["rss_goal_met"])]
    verdict = "met in every case" if not missed else "missed in " + ", ".join(missed)
    return (
        f"Measured {where['date']} on a {where['cpus']}-core {where['machine']} Linux machine "
        f"(load {where['load_at_start']} at start), Python {where['python']}, "
        f"`python -m bench.isolation` ({len(rows)} cases, {agreed} with the agreed outcome): "
        f"probe p99 at most {worst_p99['p99_ms']:g} ms ({worst_p99['case']}), slowest ping "
        f"{slowest['max_ms']:g} ms ({slowest['case']}); host peak RSS at most "
        f"+{biggest['added_rss_mb']:.0f} MB over the idle host ({biggest['case']}, budget "
        f"{biggest['budget_mb']:g} MB). Goals (p99 ≤ 50 ms, RSS ≤ budget + 100 MB) "
        f"{verdict}."
    )


async def run(cases: list[Case]) -> list[dict[str, Any]]:
    rows = []
    for case in cases:
        with tempfile.TemporaryDirectory(prefix="a2e-isolation-") as tmp:
            result = await run_case(case, "bench", Path(tmp), repeat_for=REPEAT_FOR)
        row = figures(result)
        rows.append(row)
        print(f"{case.id}: {row['outcome']} · p99 {row['p99_ms']} ms · "
              f"+{row['added_rss_mb']:.0f} MB · {row['seconds']} s", file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.isolation",
        allow_abbrev=False,
        description="Each hostile request of the suite in tests/hostile beside a probe "
                    "session: the probe's ping latencies and the host's peak RSS.",
    )
    parser.add_argument("--cases", default="", help="comma-separated case ids or items")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--readme", action="store_true",
                        help="also print the README's figures paragraph")
    args = parser.parse_args(argv)
    cases = select(args.cases)
    where = machine()
    rows = asyncio.run(run(cases))
    if args.json:
        print(json.dumps({"machine": where, "p99_goal_ms": P99_GOAL_MS,
                          "rss_constant_mb": RSS_CONSTANT_MB, "cases": rows}, indent=2))
    else:
        print(f"{where['date']}, {where['cpus']} CPUs {where['machine']}, Python "
              f"{where['python']}, load {where['load_at_start']} at start\n")
        print(table(rows))
        if args.readme:
            print("\n" + readme_lines(where, rows))
        failed = [r for r in rows if not r["agreed"]]
        for r in failed:
            print(f"\n{r['case']}: " + "; ".join(r["problems"]))
    return 1 if any(not r["agreed"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
