"""Turning case results into the per-requirement report (text, JSON or Markdown).

Layer: pure formatting; prints nothing itself.

A requirement is judged by the cases of its own level that name it
(:func:`conformance.manifest.case_level`): it *fails* when one of them failed, or when
any case met a breach of it as a *finding* (a transport or event invariant, reported
once with every case that met it); it *passes* when one of them passed and nothing
failed it; it is *not offered* when every such case was skipped because the host does
not advertise the extension it needs; *skipped* when they were skipped for another
reason (transport, runner condition); *untested* when no case of the selection named it.

Scores are kept per level (``spec`` MUST and SHOULD apart), so a host can be
spec-conformant while it differs from this host's PROTOCOL.md settlements, DECISIONS.md
choices or extensions.

The text report ends with the summary line ``N passed, M failed`` (``, K skipped`` when
some were), counting cases.
"""

from __future__ import annotations

from typing import Any

from .manifest import LEVELS, Requirement
from .runner import RUNNER_ERROR, CaseResult

__all__ = ["requirement_status", "summary_line", "text_report", "json_report",
           "markdown_report", "level_scores", "defects", "runner_errors"]

_STATUSES = ("passed", "failed", "not_offered", "skipped", "untested")
_PRECEDENCE = ("failed", "passed", "not_offered", "skipped")


def requirement_status(requirements: list[Requirement],
                       results: list[CaseResult]) -> dict[str, str]:
    """Map requirement id → ``passed`` / ``failed`` / ``not_offered`` / ``skipped`` /
    ``untested`` (see module docstring)."""
    level_of = {r.id: r.level for r in requirements}
    statuses: dict[str, set[str]] = {r.id: set() for r in requirements}
    for result in results:
        for rid in result.case.requires:
            if level_of.get(rid, result.level) != result.level:
                continue  # a less binding case does not judge it
            status = result.status
            if status == "skipped" and not result.offered:
                status = "not_offered"
            statuses.setdefault(rid, set()).add(status)
        for rid, _ in result.findings:
            statuses.setdefault(rid, set()).add("failed")
    out = {}
    for rid, seen in statuses.items():
        out[rid] = next((s for s in _PRECEDENCE if s in seen), "untested")
    return out


def defects(results: list[CaseResult],
            requirements: list[Requirement] | None = None) -> dict[str, dict[str, Any]]:
    """Findings grouped by requirement: one verdict each, with the cases that met it.

    Args:
        results: the case results.
        requirements: if given, only findings of these requirements (the selected levels).

    Returns:
        requirement id → ``{"cases": [case ids], "first": what the first case saw}``.
    """
    found: dict[str, dict[str, Any]] = {}
    wanted = None if requirements is None else {r.id for r in requirements}
    for result in results:
        for rid, text in result.findings:
            if wanted is not None and rid not in wanted:
                continue
            entry = found.setdefault(rid, {"cases": [], "first": text})
            if result.case.id not in entry["cases"]:
                entry["cases"].append(result.case.id)
    return found


def runner_errors(results: list[CaseResult]) -> list[str]:
    """Cases in which the kit itself faulted (a crash of the runner, never the host's)."""
    return [r.case.id for r in results if any(p.startswith(RUNNER_ERROR) for p in r.problems)]


def level_scores(requirements: list[Requirement],
                 results: list[CaseResult]) -> dict[str, dict[str, int]]:
    """Per level (``spec`` split into ``spec MUST`` / ``spec SHOULD``): how many
    requirements of the selection passed, failed, were not offered, skipped."""
    statuses = requirement_status(requirements, results)
    selected = {rid for r in results for rid in r.case.requires} | {
        rid for r in results for rid, _ in r.findings}
    scores: dict[str, dict[str, int]] = {}
    for r in requirements:
        if r.id not in selected or r.exempt:
            continue
        label = f"spec {r.binding}" if r.level == "spec" else r.level
        row = scores.setdefault(label, dict.fromkeys(_STATUSES, 0))
        row[statuses[r.id]] += 1
    order = ["spec MUST", "spec SHOULD", *LEVELS[1:]]
    return {label: scores[label] for label in order if label in scores}


def _score_text(row: dict[str, int]) -> str:
    judged = row["passed"] + row["failed"]
    pct = f"{100 * row['passed'] / judged:.0f}%" if judged else "n/a"
    extra = [f"{row[s]} {s.replace('_', ' ')}" for s in ("not_offered", "skipped", "untested")
             if row[s]]
    return (f"{row['passed']}/{judged} passed ({pct})"
            + (f", {', '.join(extra)}" if extra else ""))


def summary_line(results: list[CaseResult]) -> str:
    """``"N passed, M failed"`` plus ``", K skipped"`` when K > 0."""
    count = {s: sum(r.status == s for r in results) for s in ("passed", "failed", "skipped")}
    line = f"{count['passed']} passed, {count['failed']} failed"
    return line + (f", {count['skipped']} skipped" if count["skipped"] else "")


def text_report(requirements: list[Requirement], results: list[CaseResult],
                verbose: bool = False) -> str:
    """Failures in detail, defects once each, one line per requirement, per-level
    scores, then the summary line."""
    lines: list[str] = []
    failed = [r for r in results if r.status == "failed"]
    for result in failed:
        lines.append(f"FAILED {result.case.id} ({result.case.source}) "
                     f"[{', '.join(result.case.requires)}]")
        lines += [f"    {p}" for p in result.problems]
        if result.diagnostics:
            lines += [f"    | {d}" for d in result.diagnostics.splitlines()]
        lines += [f"    note: {n}" for n in result.notes]
    for rid, entry in defects(results, requirements).items():
        lines.append(f"DEFECT {rid} (met in {len(entry['cases'])} case(s), e.g. "
                     f"{', '.join(entry['cases'][:3])}): {entry['first'][:400]}")
    for result in results:
        if result.notes and result.status != "failed":
            lines += [f"note on {result.case.id}: {n}" for n in result.notes]
    if verbose:
        for result in results:
            if result.status == "skipped":
                what = "not offered" if not result.offered else "skipped"
                lines.append(f"{what} {result.case.id}: {result.problems[0]}")
    if lines:
        lines.append("")
    statuses = requirement_status(requirements, results)
    mark = {"passed": "ok  ", "failed": "FAIL", "skipped": "skip", "not_offered": "n/o ",
            "untested": "  - "}
    width = max((len(r.id) for r in requirements), default=10)
    selected = {rid for res in results for rid in res.case.requires} | set(
        defects(results, requirements))
    for r in requirements:
        if r.id in selected or verbose:
            lines.append(f"{mark[statuses[r.id]]} {r.id:<{width}}  {r.statement}")
    lines.append("")
    for label, row in level_scores(requirements, results).items():
        lines.append(f"{label:<12} {_score_text(row)}")
    crashed = runner_errors(results)
    if crashed:
        lines.append(f"runner errors (a fault of the kit): {', '.join(crashed)}")
    lines.append(summary_line(results))
    return "\n".join(lines)


def json_report(requirements: list[Requirement], results: list[CaseResult],
                transport: str) -> dict[str, Any]:
    """A machine-readable report: summary, per-level scores, per-case and
    per-requirement status, and the defects found once each."""
    statuses = requirement_status(requirements, results)
    return {
        "transport": transport,
        "summary": {s: sum(r.status == s for r in results)
                    for s in ("passed", "failed", "skipped")},
        "levels": level_scores(requirements, results),
        "runner_errors": runner_errors(results),
        "defects": defects(results, requirements),
        "cases": [{"id": r.case.id, "status": r.status, "requires": list(r.case.requires),
                   "level": r.level, "not_offered": not r.offered,
                   "source": r.case.source, "seconds": round(r.seconds, 3),
                   "problems": r.problems, "diagnostics": r.diagnostics, "notes": r.notes,
                   "findings": [list(f) for f in r.findings]}
                  for r in results],
        "requirements": [{"id": r.id, "level": r.level, "binding": r.binding,
                          "spec_lines": list(r.spec_lines), "feature": r.feature,
                          "source": r.source, "statement": r.statement,
                          "status": statuses[r.id]} for r in requirements],
    }


def markdown_report(requirements: list[Requirement], results: list[CaseResult],
                    title: str) -> str:
    """The report as Markdown: per-level scores, defects, failed requirements with the
    rule's source (spec line and binding) and why they failed."""
    statuses = requirement_status(requirements, results)
    lines = [f"# {title}", "", "| level | requirements |", "| --- | --- |"]
    lines += [f"| {label} | {_score_text(row)} |"
              for label, row in level_scores(requirements, results).items()]
    crashed = runner_errors(results)
    lines += ["", f"Cases: {summary_line(results)}; runner errors: {len(crashed)}."]
    by_case: dict[str, list[CaseResult]] = {}
    for result in results:
        for rid in result.case.requires:
            by_case.setdefault(rid, []).append(result)
    found = defects(results, requirements)
    failed = [r for r in requirements if statuses[r.id] == "failed"]
    if failed:
        lines += ["", "## Failed requirements", "", "| id | level | rule | why |",
                  "| --- | --- | --- | --- |"]
    for r in failed:
        why = ""
        if r.id in found:
            why = (f"defect in {len(found[r.id]['cases'])} case(s): "
                   f"{found[r.id]['first'][:200]}")
        else:
            bad = next((c for c in by_case.get(r.id, []) if c.status == "failed"
                        and c.level == r.level), None)
            if bad is not None:
                shown = next((p for p in bad.problems if not p.startswith("step ")),
                             bad.problems[0] if bad.problems else "")
                why = f"`{bad.case.id}`: {shown[:200]}"
        cell = why.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{r.id}` | {r.level} | {r.cited}: {r.statement} | {cell} |")
    return "\n".join(lines) + "\n"
