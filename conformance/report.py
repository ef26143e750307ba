"""Turning case results into the per-requirement report (text or JSON).

Layer: pure formatting; prints nothing itself.

A requirement *fails* when any of its cases failed (or any failed case reports a problem
prefixed with its id: the per-transcript invariants), *passes* when at least one case
passed and none failed, and is *skipped* when all its cases were skipped.
The text report ends with the summary line ``N passed, M failed`` (``, K skipped``
when some were), counting cases.
"""

from __future__ import annotations

from typing import Any

from .manifest import Requirement
from .runner import CaseResult

__all__ = ["requirement_status", "summary_line", "text_report", "json_report"]


def requirement_status(requirements: list[Requirement],
                       results: list[CaseResult]) -> dict[str, str]:
    """Map requirement id → ``passed`` / ``failed`` / ``skipped`` / ``untested``."""
    statuses: dict[str, set[str]] = {r.id: set() for r in requirements}
    for result in results:
        for rid in result.case.requires:
            statuses.setdefault(rid, set()).add(result.status)
        if result.status == "failed":
            # invariants are checked on every transcript: a problem that starts with a
            # requirement id fails that requirement too, whichever case found it
            for problem in result.problems:
                rid = problem.split(":", 1)[0]
                if rid in statuses:
                    statuses[rid].add("failed")
    out = {}
    for rid, seen in statuses.items():
        if "failed" in seen:
            out[rid] = "failed"
        elif "passed" in seen:
            out[rid] = "passed"
        elif "skipped" in seen:
            out[rid] = "skipped"
        else:
            out[rid] = "untested"
    return out


def summary_line(results: list[CaseResult]) -> str:
    """``"N passed, M failed"`` plus ``", K skipped"`` when K > 0."""
    count = {s: sum(r.status == s for r in results) for s in ("passed", "failed", "skipped")}
    line = f"{count['passed']} passed, {count['failed']} failed"
    return line + (f", {count['skipped']} skipped" if count["skipped"] else "")


def text_report(requirements: list[Requirement], results: list[CaseResult],
                verbose: bool = False) -> str:
    """Failures in detail, then one line per requirement, then the summary line."""
    lines: list[str] = []
    failed = [r for r in results if r.status == "failed"]
    for result in failed:
        lines.append(f"FAILED {result.case.id} ({result.case.source}) "
                     f"[{', '.join(result.case.requires)}]")
        lines += [f"    {p}" for p in result.problems]
        if result.diagnostics:
            lines += [f"    | {d}" for d in result.diagnostics.splitlines()]
        lines += [f"    note: {n}" for n in result.notes]
    for result in results:
        if result.notes and result.status != "failed":
            lines += [f"note on {result.case.id}: {n}" for n in result.notes]
    if verbose:
        for result in results:
            if result.status == "skipped":
                lines.append(f"skipped {result.case.id}: {result.problems[0]}")
    if failed:
        lines.append("")
    statuses = requirement_status(requirements, results)
    mark = {"passed": "ok  ", "failed": "FAIL", "skipped": "skip", "untested": "  - "}
    width = max((len(r.id) for r in requirements), default=10)
    selected = {rid for res in results for rid in res.case.requires}
    for r in requirements:
        if r.id in selected or verbose:
            lines.append(f"{mark[statuses[r.id]]} {r.id:<{width}}  {r.statement}")
    lines.append("")
    lines.append(summary_line(results))
    return "\n".join(lines)


def json_report(requirements: list[Requirement], results: list[CaseResult],
                transport: str) -> dict[str, Any]:
    """A machine-readable report: summary, per-case and per-requirement status."""
    statuses = requirement_status(requirements, results)
    return {
        "transport": transport,
        "summary": {s: sum(r.status == s for r in results)
                    for s in ("passed", "failed", "skipped")},
        "cases": [{"id": r.case.id, "status": r.status, "requires": list(r.case.requires),
                   "source": r.case.source, "seconds": round(r.seconds, 3),
                   "problems": r.problems, "diagnostics": r.diagnostics, "notes": r.notes}
                  for r in results],
        "requirements": [{"id": r.id, "source": r.source, "statement": r.statement,
                          "status": statuses[r.id]} for r in requirements],
    }
