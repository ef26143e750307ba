"""Issue 12: no request, however hostile, stops the host from serving the others, takes
more than its budget of memory, or reaches outside what the configuration grants.

One test per row of ``tests/hostile/cases.py`` (the reproductions 12.1–12.13), each on a
real host process: the hostile request must get the agreed outcome, a second session's
pings must keep being answered while it runs (every ping, none slower than
``PROBE_MAX_MS``), the host's peak RSS must stay within the case's budget plus 100 MiB,
and the host must still answer a fresh chain afterwards.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostile.cases import CASES
from tests.hostile.harness import PROBE_MAX_MS, Case, HostPool, run_case


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
@pytest.mark.asyncio
async def test_hostile_request_is_contained_while_another_session_is_answered(
    case: Case, workdir: Path, pool: HostPool
) -> None:
    result = await run_case(case, "test", workdir, pool)
    problems = result.problems(probe_max_ms=PROBE_MAX_MS)
    probe = result.probe
    figures = (
        f"probe: {len(probe.latencies_ms)} pings, p50 {probe.quantile(0.5):.1f} ms, "
        f"max {max(probe.latencies_ms, default=float('nan')):.1f} ms; host peak RSS "
        f"+{result.added_mb:.0f} MiB over its baseline; {result.elapsed:.1f} s"
    )
    log = ""
    if not result.alive_after or "Traceback" in result.stderr_tail:
        log = f"\nhost stderr (tail): {result.stderr_tail[-1500:]}"
    assert not problems, (
        f"{case.id} ({case.title}):\n- " + "\n- ".join(problems) + f"\n{figures}{log}"
    )


def test_every_item_of_issue_12_has_a_case_and_every_case_a_budget_note() -> None:
    items = {case.item for case in CASES}
    assert items == {f"12.{n}" for n in range(1, 14)}, sorted(items)
    assert all(case.budget_note and case.budget_mb >= 0 for case in CASES)
