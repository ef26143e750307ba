"""The hostile suite's harness checks what it claims to: a benign request passes every
check, and a host that stalls its loop and balloons its memory is reported on both
counts (so a passing hostile case means something)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.hostile.cases import expect_limit, one_chain, tool
from tests.hostile.harness import Case, HostSpec, run_case


def _echoed(outcome: dict[str, Any]) -> None:
    resp = outcome["resp"]
    assert resp["success"] and resp["final_output"] == {"v": [1, 2]}, resp


BENIGN = Case(
    id="benign-echo",
    item="-",
    title="one echo node",
    host=HostSpec(),
    action=one_chain([tool("e", "echo", input={"v": [1, 2]})]),
    expect=_echoed,
    budget_mb=0,
    budget_note="none",
)

# ``big`` builds its output on the event loop: a 150 MB string, then its encoding for
# the max_output_bytes check. The loop is held and RSS grows by several hundred MB.
BALLOON = Case(
    id="balloon",
    item="-",
    title="one big node of 150 MB, on a host that lets one output be that big",
    host=HostSpec(env={"A2E_MAX_OUTPUT_BYTES": str(200_000_000)}),
    action=one_chain([tool("b", "big", input={"bytes": 150_000_000})]),
    expect=expect_limit("max_chain_output_bytes"),
    budget_mb=0,
    budget_note="none",
)


@pytest.mark.asyncio
async def test_a_benign_chain_passes_every_check_with_real_figures(workdir: Path) -> None:
    result = await run_case(BENIGN, "test", workdir)
    assert result.problems() == []
    assert result.outcome is not None and result.outcome["events"] == 2
    assert result.alive_after and result.probe.count >= 1 and not result.probe.unanswered
    assert 0 < result.baseline_kib <= result.peak_kib, (result.baseline_kib, result.peak_kib)
    assert result.summary == "success"


@pytest.mark.asyncio
async def test_a_host_that_stalls_and_balloons_is_reported_on_both_counts(
    workdir: Path,
) -> None:
    result = await run_case(BALLOON, "test", workdir)
    problems = result.problems(probe_max_ms=50)
    assert any("RSS" in p for p in problems), problems
    assert any("slowest ping" in p for p in problems), (problems, result.probe)
    assert result.added_mb > 140, result.added_mb
