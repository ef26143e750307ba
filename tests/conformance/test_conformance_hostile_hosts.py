"""The runner against hosts that handshake properly and then misbehave (issue 21: "a
runner must never crash on a host's answer"): each case gets a clear verdict, in a time
bounded by its own timeout, and the run never ends in a runner error.

The hosts are ``tests/support/hostile_host.py`` (standard library only: they start in
milliseconds); the cases are the spec level's first few, the most widely shared.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from typing import Any

import pytest

from conformance.cases import load_cases
from conformance.manifest import case_level
from conformance.report import defects, runner_errors
from conformance.runner import BARRIER_TIMEOUT, CaseResult
from conformance.suite import Target, requirements_by_id, run_suite
from conformance.transports import MAX_FRAME_BYTES
from tests.support.hostile_host import HUGE_BYTES

#: Each case's own bound in these runs: a host that never answers costs this much a case.
CASE_TIMEOUT = 2.0


def spec_cases(count: int) -> list[Any]:
    by_id = requirements_by_id()
    chosen = [c for c in load_cases() if case_level(c, by_id) == "spec"][:count]
    return [dataclasses.replace(c, timeout=CASE_TIMEOUT) for c in chosen]


def run_against(mode: str, cases: list[Any], bound: float = CASE_TIMEOUT) -> list[CaseResult]:
    command = f"{sys.executable} -m tests.support.hostile_host {mode}"
    results = asyncio.run(run_suite(cases, Target("stdio", command)))
    assert runner_errors(results) == []
    assert len(results) == len(cases)
    # a verdict says what was seen, and came within the case's bound (plus the wait
    # for a failed shared session to drain, and the host process's stop)
    assert all(r.problems for r in results if r.status != "passed")
    slow = {r.case.id: r.seconds for r in results
            if r.seconds > bound + BARRIER_TIMEOUT + 5}
    assert slow == {}
    return results


def test_a_line_over_the_frame_bound_is_one_framing_defect_and_is_skipped() -> None:
    assert HUGE_BYTES > MAX_FRAME_BYTES
    # the case's own timeout: moving the huge line through a pipe takes a loaded machine
    # seconds
    case = next(c for c in load_cases() if c.id == "spec-tool-output")
    results = run_against("huge", [case], bound=case.timeout)
    assert defects(results) == {"FRAME-STDIO": {"cases": ["spec-tool-output"], "first": (
        f"host sent a frame that is not protocol (a line over {MAX_FRAME_BYTES} bytes "
        f"(the kit's frame bound); skipped): ''")}}
    # the answer after the huge line was still read: the case fails on what it says
    assert results[0].problems[:2] == ["step 2 (expect_chain) failed:",
                                       "$resp.outputs.a: missing"]


def test_a_host_that_never_answers_fails_each_case_at_its_timeout() -> None:
    results = run_against("silent", spec_cases(3))
    assert {r.status for r in results} == {"failed"}
    assert all(r.problems[0].startswith(f"case timed out after {CASE_TIMEOUT} s")
               for r in results), [r.problems for r in results]


def test_a_host_that_exits_mid_case_fails_it_as_closed() -> None:
    results = run_against("hangup", spec_cases(4))
    assert {r.status for r in results} == {"failed"}
    assert all("connection closed while waiting for chain/resp" in " ".join(r.problems)
               for r in results), [r.problems for r in results]


def test_events_and_answers_for_requests_nobody_sent_fail_the_case() -> None:
    results = run_against("stray", spec_cases(4))
    assert {r.status for r in results} == {"failed"}
    assert any("unexpected messages at the end" in " ".join(r.problems) for r in results)


def test_a_duplicated_chain_resp_is_reported_once_as_its_requirement() -> None:
    results = run_against("double", spec_cases(4))
    found = defects(results)
    assert sorted(found) == ["CHAIN-EVT-BEFORE-RESP", "SPEC-EVENTS-BEFORE-RESP"]
    assert len(found["SPEC-EVENTS-BEFORE-RESP"]["cases"]) == 4


@pytest.mark.timeout(120)
def test_a_host_advertising_extensions_it_lacks_fails_their_cases_not_the_runner() -> None:
    by_id = requirements_by_id()
    cases = [dataclasses.replace(c, timeout=CASE_TIMEOUT) for c in load_cases()
             if case_level(c, by_id) == "extension"]
    results = run_against("liar", cases)
    assert sum(r.status == "failed" for r in results) >= 30


@pytest.mark.asyncio
async def test_a_websocket_frame_over_the_frame_bound_is_a_framing_defect() -> None:
    # a WebSocket host answering a chain/req with one frame over the bound: the runner
    # closes the connection (1009) rather than buffer it, and says why
    from websockets.asyncio.server import ServerConnection, serve

    from tests.support.hostile_host import answer

    async def handler(ws: ServerConnection) -> None:
        async for text in ws:
            message = json.loads(text)
            if message.get("type") == "chain/req":
                await ws.send("x" * (MAX_FRAME_BYTES + 1))
            for frame in answer("double", message) or []:
                if isinstance(frame, dict) and frame.get("type") != "chain/resp":
                    await ws.send(json.dumps(frame))

    case = next(c for c in load_cases() if c.id == "spec-tool-output")
    async with serve(handler, "127.0.0.1", 0, subprotocols=["a2e.v1"],  # type: ignore[list-item]
                     max_size=2**20) as server:
        port = server.sockets[0].getsockname()[1]
        results = await run_suite([case], Target("ws", f"ws://127.0.0.1:{port}"))
    assert runner_errors(results) == []
    assert results[0].status == "failed"
    assert defects(results)["FRAME-WS"]["first"] == (
        f"host sent a frame that is not protocol (a frame over {MAX_FRAME_BYTES} bytes "
        f"(the kit's frame bound)): ''")
