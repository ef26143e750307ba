"""A node's recovery fields at run time: retries, backoff, timeouts, fallbacks, the cache.

Source: PROTOCOL.md §5 Recovery (one ``start``, ``kind: "progress"`` events for attempts,
one terminal event whose ``data`` sums them up), §6 (``max_attempts``). Waits are
measured on a fake clock: nothing here sleeps for a backoff.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import msgspec
import pytest

from a2e_host.chains.messages import ChainEvent, ChainNode, ChainRequest
from a2e_host.chains.nodes import NodeContext
from a2e_host.chains.scheduler import ChainRunner
from a2e_host.chains.step_cache import StepCache
from a2e_host.chains.validation import validate_chain
from a2e_host.exceptions import ChainLimitExceeded, NodeError
from a2e_host.limits import Limits, SessionLimits
from a2e_host.messages import Message
from a2e_host.tools import tool
from tests.support.chains import ALL_CAPS, FakeCatalog
from tests.support.recovery import WAIT, FakeClock, Flaky, Host, make_tool

FAST = {"max_attempts": 3, "interval": 0.5, "backoff_rate": 2.0, "jitter": "none"}


def echo(args: dict[str, Any]) -> dict[str, Any]:
    return args


@pytest.mark.asyncio
async def test_a_tool_failing_twice_then_succeeding_takes_three_attempts() -> None:
    flaky = Flaky(2)
    host = Host([make_tool("flaky", flaky)])
    run = await host.run([{"node_id": "f", "name": "flaky", "input": {"k": 1}, "retry": FAST}])
    assert run.phases() == [("f", "start", "status"), ("f", "start", "progress"),
                            ("f", "start", "progress"), ("f", "done", "status")]
    assert [e.seq for e in run.events] == [1, 2, 3, 4]
    assert run.progress("f") == [
        {"attempt": 1, "of": 3, "error": "call 1 fails", "code": "chain_node_error",
         "retry_in_s": 0.5},
        {"attempt": 2, "of": 3, "error": "call 2 fails", "code": "chain_node_error",
         "retry_in_s": 1.0},
    ]
    done = run.last("f")
    assert done.output == {"calls": 3}
    assert done.data == {
        "attempts": 3,
        "errors": [
            {"attempt": 1, "tool": "flaky", "code": "chain_node_error", "error": "call 1 fails"},
            {"attempt": 2, "tool": "flaky", "code": "chain_node_error", "error": "call 2 fails"},
        ],
        "fallback_used": False,
        "tool": "flaky",
    }
    assert host.clock.sleeps == [0.5, 1.0]
    assert flaky.inputs == [{"k": 1}] * 3
    assert run.response.success and run.response.nodes_run == 1
    assert run.runner.budget.request.nodes == 1  # attempts are not node executions


@pytest.mark.asyncio
async def test_backoff_grows_by_its_rate_and_stops_at_max_delay() -> None:
    host = Host([make_tool("flaky", Flaky(10))])
    retry = {"max_attempts": 6, "interval": 0.25, "backoff_rate": 3.0, "max_delay": 5.0,
             "jitter": "none"}
    run = await host.run([{"node_id": "f", "name": "flaky", "retry": retry}])
    # 0.25 × 3^(n-1): 0.25, 0.75, 2.25, 6.75 → 5 (max_delay), 20.25 → 5
    assert host.clock.sleeps == [0.25, 0.75, 2.25, 5.0, 5.0]
    assert [p["retry_in_s"] for p in run.progress("f")] == host.clock.sleeps
    assert run.last("f").phase == "error" and run.last("f").data["attempts"] == 6
    assert host.clock.draws == []


@pytest.mark.asyncio
async def test_full_jitter_draws_each_wait_between_zero_and_the_backoff() -> None:
    clock = FakeClock(fraction=0.25)
    host = Host([make_tool("flaky", Flaky(3))], clock=clock)
    retry = {"max_attempts": 4, "interval": 1.0, "backoff_rate": 2.0, "max_delay": 3.0,
             "jitter": "full"}
    run = await host.run([{"node_id": "f", "name": "flaky", "retry": retry}])
    assert clock.draws == [(0.0, 1.0), (0.0, 2.0), (0.0, 3.0)]
    assert clock.sleeps == [0.25, 0.5, 0.75]
    assert run.last("f").output == {"calls": 4}


@pytest.mark.asyncio
async def test_a_retry_whose_wait_would_pass_the_chain_deadline_is_not_made() -> None:
    flaky = Flaky(5)
    host = Host([make_tool("flaky", flaky)])
    retry = {"max_attempts": 5, "interval": 4.0, "backoff_rate": 2.0, "jitter": "none"}
    # the chain has 10 s: waits of 4 s then 8 s; the second would end at 12 s
    run = await host.run([{"node_id": "f", "name": "flaky", "retry": retry}], timeout=10)
    assert host.clock.sleeps == [4.0]
    assert flaky.calls == 2
    assert run.last("f").data["attempts"] == 2
    assert run.response.error is not None and run.response.error.code == "chain_node_error"


@pytest.mark.asyncio
async def test_a_failure_that_is_not_retryable_is_not_retried() -> None:
    flaky = Flaky(1, retryable=False)
    host = Host([make_tool("t", flaky)])
    run = await host.run([{"node_id": "t", "name": "t", "retry": FAST}])
    assert run.phases() == [("t", "start", "status"), ("t", "error", "status")]
    assert flaky.calls == 1
    assert run.last("t").data == {
        "attempts": 1,
        "errors": [{"attempt": 1, "tool": "t", "code": "chain_node_error",
                    "error": "call 1 fails"}],
        "fallback_used": False,
    }
    assert run.last("t").error == "call 1 fails"
    assert host.clock.sleeps == []


@pytest.mark.asyncio
async def test_a_tool_that_raised_a_plain_exception_is_retried_only_when_retry_on_says() -> None:
    plain = Flaky(1, error=ValueError)
    host = Host([make_tool("t", plain)])
    run = await host.run([{"node_id": "t", "name": "t", "retry": FAST}])
    assert plain.calls == 1 and run.last("t").error == "ValueError: call 1 fails"
    named = Flaky(1, error=ValueError)
    host = Host([make_tool("t", named)])
    run = await host.run([{"node_id": "t", "name": "t",
                           "retry": {**FAST, "retry_on": ["chain_node_error"]}}])
    assert named.calls == 2 and run.last("t").output == {"calls": 2}


@pytest.mark.asyncio
async def test_a_tool_s_own_code_in_retry_on_is_retried_and_reported() -> None:
    flaky = Flaky(1, retryable=False, code="rate_limited")
    host = Host([make_tool("t", flaky)])
    run = await host.run([{"node_id": "t", "name": "t",
                           "retry": {**FAST, "retry_on": ["rate_limited"]}}])
    assert run.progress("t")[0]["code"] == "rate_limited"
    assert run.last("t").output == {"calls": 2}


@pytest.mark.asyncio
async def test_an_input_the_tool_refuses_is_never_retried() -> None:
    def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    host = Host([tool(add, blocking=False)])
    # b is read from input, which validation cannot type: the tool refuses it at run time
    run = await host.run([{"node_id": "t", "name": "add",
                           "input_map": {"a": "input.a", "b": "input.b"},
                           "retry": {**FAST, "retry_on": ["chain_node_error"]}}],
                         initial_input={"a": 1, "b": "two"})
    assert run.phases("t") == [("t", "start", "status"), ("t", "error", "status")]
    assert run.last("t").data["errors"][0]["code"] == "invalid_input"
    assert run.response.error is not None and run.response.error.code == "chain_node_error"


@pytest.mark.asyncio
async def test_a_ceiling_is_never_retried_even_when_it_says_it_is_retryable() -> None:
    def refuse(args: dict[str, Any]) -> Any:
        raise ChainLimitExceeded("over a ceiling", retryable=True,
                                 details={"ceiling": "max_output_bytes"})

    host = Host([make_tool("t", refuse), make_tool("echo", echo)])
    run = await host.run([{"node_id": "t", "name": "t", "retry": FAST, "fallback": "echo"}])
    assert run.phases("t") == [("t", "start", "status"), ("t", "error", "status")]
    assert run.response.error is not None and run.response.error.code == "chain_limit"
    assert run.last("t").data["fallback_used"] is False


@pytest.mark.asyncio
@pytest.mark.parametrize(("effects", "idempotent", "retry_on", "calls"), [
    ("write", False, [], 1),
    ("external", False, [], 1),
    ("write", False, ["chain_node_error"], 3),
    ("write", True, [], 3),
    ("read", False, [], 3),
])
async def test_a_tool_that_writes_is_retried_only_when_idempotent_or_asked(
    effects: str, idempotent: bool, retry_on: list[str], calls: int
) -> None:
    flaky = Flaky(2)
    host = Host([make_tool("w", flaky, side_effects=effects, idempotent=idempotent)])
    run = await host.run([{"node_id": "w", "name": "w", "retry": {**FAST, "retry_on": retry_on}}])
    assert flaky.calls == calls
    assert run.last("w").data["attempts"] == calls
    assert run.last("w").phase == ("done" if calls == 3 else "error")


@pytest.mark.asyncio
async def test_a_fallback_runs_with_the_same_input_and_is_named() -> None:
    flaky = Flaky(9)
    seen: list[dict[str, Any]] = []

    def backup(args: dict[str, Any]) -> dict[str, Any]:
        seen.append(args)
        return {"from": "backup", **args}

    host = Host([make_tool("flaky", flaky), make_tool("backup", backup)])
    run = await host.run([
        {"node_id": "a", "name": "flaky", "input": {"x": 1}, "input_map": {"y": "input.y"},
         "retry": {**FAST, "max_attempts": 2}, "fallback": "backup", "next_node": "b"},
        {"node_id": "b", "name": "backup", "input_map": {"v": "a.output"}},
    ], initial_input={"y": 2})
    assert run.phases("a") == [("a", "start", "status"), ("a", "start", "progress"),
                               ("a", "start", "progress"), ("a", "done", "status")]
    assert run.progress("a")[1] == {"attempt": 2, "of": 2, "error": "call 2 fails",
                                    "code": "chain_node_error", "retry_in_s": 0.0,
                                    "fallback": "backup"}
    done = run.last("a")
    assert done.output == {"from": "backup", "x": 1, "y": 2}
    assert done.data["fallback_used"] is True and done.data["tool"] == "backup"
    assert done.data["attempts"] == 2 and len(done.data["errors"]) == 2
    assert seen[0] == {"x": 1, "y": 2}
    assert run.response.outputs["b"] == {"from": "backup", "v": done.output}
    assert host.clock.sleeps == [0.5]  # none before the fallback


@pytest.mark.asyncio
async def test_a_fallback_is_held_to_its_own_input_schema() -> None:
    def strict(n: int) -> dict[str, int]:
        return {"n": n}

    host = Host([make_tool("bad", Flaky(9, retryable=False)), tool(strict, blocking=False)])
    # n arrives at run time (a static "one" is refused before anything runs: static checks)
    run = await host.run([{"node_id": "a", "name": "bad", "input_map": {"n": "input.n"},
                           "fallback": "strict"}], initial_input={"n": "one"})
    error = run.last("a")
    assert error.phase == "error"
    assert error.error.startswith("tool 'strict': invalid input: Expected `int`, got `str`")
    assert error.data["fallback_used"] is True
    assert [(e["tool"], e["code"]) for e in error.data["errors"]] == [
        ("bad", "chain_node_error"), ("strict", "invalid_input")]


@pytest.mark.asyncio
async def test_a_node_over_its_timeout_fails_alone() -> None:
    async def stuck(args: dict[str, Any]) -> Any:
        await anyio.Event().wait()

    host = Host([make_tool("stuck", stuck), make_tool("echo", echo)])
    started = time.monotonic()
    run = await host.run([
        {"node_id": "s", "name": "stuck", "timeout": 0.1, "on_error": "skip"},
        {"node_id": "e", "name": "echo", "input": {"ok": True}},
        {"node_id": "after", "name": "echo", "input_map": {"s": "s.status"}},
    ])
    assert time.monotonic() - started < WAIT
    error = run.last("s")
    assert error.phase == "error"
    assert error.error == ("node 's' timed out after 0.1 s (its timeout); raise the node's "
                           "timeout or make the work smaller")
    assert error.data["errors"][0]["code"] == "timeout"
    assert run.response.success
    assert run.response.outputs == {"e": {"ok": True}, "after": {"s": "error"}}


@pytest.mark.asyncio
async def test_a_node_timeout_under_abort_fails_the_chain_as_a_node_error() -> None:
    async def stuck(args: dict[str, Any]) -> Any:
        await anyio.Event().wait()

    host = Host([make_tool("stuck", stuck)])
    run = await host.run([{"node_id": "s", "name": "stuck", "timeout": 0.05}])
    assert run.response.error is not None
    assert (run.response.error.code, run.response.error.node_id) == ("chain_node_error", "s")
    assert "timed out after 0.05 s" in run.response.error.message


@pytest.mark.asyncio
async def test_a_timed_out_attempt_is_retried_as_retryable() -> None:
    calls: list[int] = []

    async def slow_once(args: dict[str, Any]) -> Any:
        calls.append(1)
        if len(calls) == 1:
            await anyio.Event().wait()
        return {"calls": len(calls)}

    host = Host([make_tool("slow", slow_once)])
    run = await host.run([{"node_id": "s", "name": "slow", "timeout": 0.05, "retry": FAST}])
    assert [p["code"] for p in run.progress("s")] == ["timeout"]
    assert run.last("s").output == {"calls": 2}


@pytest.mark.asyncio
async def test_a_map_item_is_retried_through_the_same_attempt() -> None:
    calls: dict[int, int] = {}

    def per_item(args: dict[str, Any]) -> Any:
        i = args["i"]
        calls[i] = calls.get(i, 0) + 1
        if i == 1 and calls[i] < 3:
            raise NodeError(f"item {i} call {calls[i]} fails", retryable=True)
        return {"i": i, "calls": calls[i]}

    host = Host([make_tool("per_item", per_item)])
    run = await host.run([
        {"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t"},
        {"node_id": "t", "name": "per_item", "input_map": {"i": "item"}, "retry": FAST},
    ], initial_input={"xs": [0, 1, 2]})
    assert run.phases("t[1]") == [("t[1]", "start", "status"), ("t[1]", "start", "progress"),
                                  ("t[1]", "start", "progress"), ("t[1]", "done", "status")]
    assert run.phases("t[0]") == [("t[0]", "start", "status"), ("t[0]", "done", "status")]
    assert run.last("t[1]").data["attempts"] == 3
    assert run.last("t[0]").data == {"attempts": 1, "errors": [], "fallback_used": False,
                                     "tool": "per_item"}
    assert run.last("m").data == {}  # the map itself has no recovery fields
    assert run.response.outputs["m"] == [{"i": 0, "calls": 1}, {"i": 1, "calls": 3},
                                         {"i": 2, "calls": 1}]


@pytest.mark.asyncio
async def test_a_cache_hit_answers_the_second_identical_call_and_a_new_version_misses() -> None:
    calls: list[dict[str, Any]] = []

    def pure(args: dict[str, Any]) -> dict[str, Any]:
        calls.append(args)
        return {"n": len(calls), "args": args}

    cache = StepCache()
    host = Host([make_tool("pure", pure, version="1")], cache=cache)
    node = {"node_id": "p", "name": "pure", "input": {"b": 2, "a": 1}, "cache": True}
    first = await host.run([node])
    assert first.last("p").data == {"attempts": 1, "errors": [], "fallback_used": False,
                                    "tool": "pure", "cache": "miss"}
    # same input in another key order, asked by the request rather than the node
    second = await host.run([{**node, "cache": False, "input": {"a": 1, "b": 2}}], cache=True)
    assert second.last("p").data == {"attempts": 0, "errors": [], "fallback_used": False,
                                     "tool": "pure", "cache": "hit"}
    assert second.last("p").output == first.last("p").output == {"n": 1,
                                                                  "args": {"b": 2, "a": 1}}
    assert len(calls) == 1
    host_v2 = Host([make_tool("pure", pure, version="2")], cache=cache)
    third = await host_v2.run([node])
    assert third.last("p").data["cache"] == "miss"
    assert third.last("p").output == {"n": 2, "args": {"b": 2, "a": 1}}
    other_input = await host_v2.run([{**node, "input": {"a": 1, "b": 3}}])
    assert other_input.last("p").data["cache"] == "miss"
    assert (cache.hits, cache.misses, len(cache)) == (1, 3, 3)


@pytest.mark.asyncio
async def test_a_cached_output_cannot_be_changed_by_what_reads_it() -> None:
    def pure(args: dict[str, Any]) -> dict[str, Any]:
        return {"items": [1, 2]}

    def mutate(args: dict[str, Any]) -> Any:
        args["v"]["items"].append(99)
        return args["v"]

    host = Host([make_tool("pure", pure), make_tool("mutate", mutate, cacheable=False)])
    nodes = [{"node_id": "p", "name": "pure", "cache": True, "next_node": "m"},
             {"node_id": "m", "name": "mutate", "input_map": {"v": "p.output"}}]
    first = await host.run(nodes)
    assert first.response.outputs["m"] == {"items": [1, 2, 99]}
    for _ in range(2):
        again = await host.run(nodes)
        assert again.last("p").data["cache"] == "hit"
        # a cache holding the object the first run's m changed would give [1, 2, 99, 99]
        assert again.response.outputs["m"] == {"items": [1, 2, 99]}


@pytest.mark.asyncio
async def test_the_cache_is_off_for_a_tool_with_effects_and_for_a_host_without_one() -> None:
    calls: list[int] = []

    def writes(args: dict[str, Any]) -> Any:
        calls.append(1)
        return {"n": len(calls)}

    host = Host([make_tool("w", writes, side_effects="write")])
    for _ in range(2):
        run = await host.run([{"node_id": "w", "name": "w", "cache": True}])
        assert run.last("w").data["cache"] == "off"
    bare = Host([make_tool("pure", echo)], cache=None)
    run = await bare.run([{"node_id": "p", "name": "pure", "cache": True}])
    assert run.last("p").data["cache"] == "off"
    assert len(calls) == 2


@pytest.mark.asyncio
async def test_nodes_without_recovery_fields_send_the_same_bytes_as_before() -> None:
    host = Host([make_tool("echo", echo), make_tool("flaky", Flaky(1))])
    run = await host.run([
        {"node_id": "a", "name": "echo", "input": {"x": 1}, "next_node": "f"},
        {"node_id": "f", "name": "flaky", "retry": FAST, "next_node": "b"},
        {"node_id": "b", "name": "echo", "input_map": {"y": "a.output.x"}},
    ])
    plan = run.runner.plan
    assert [p.recovery is None for p in plan.nodes] == [True, False, True]
    plain = [e for e in run.events if e.node_id in ("a", "b")]
    encoded = []
    for e in plain:
        wire = msgspec.json.decode(msgspec.json.encode(e))
        encoded.append(msgspec.json.encode({k: v for k, v in wire.items()
                                            if k not in ("id", "ts")}))
    head = b'{"type":"chain/event","version":"1.0","kind":"status","req_id":"r","data":{},'
    assert encoded == [
        head + b'"seq":1,"node_id":"a","phase":"start","output":null,"error":""}',
        head + b'"seq":2,"node_id":"a","phase":"done","output":{"x":1},"error":""}',
        head + b'"seq":6,"node_id":"b","phase":"start","output":null,"error":""}',
        head + b'"seq":7,"node_id":"b","phase":"done","output":{"y":1},"error":""}',
    ]


@pytest.mark.asyncio
async def test_a_cancel_during_a_backoff_wait_ends_the_node_with_its_report() -> None:
    class BlockingClock(FakeClock):
        def __init__(self) -> None:
            super().__init__()
            self.waiting = anyio.Event()

        async def sleep(self, seconds: float) -> None:
            self.sleeps.append(seconds)
            self.waiting.set()
            await anyio.Event().wait()

    clock = BlockingClock()
    host = Host([make_tool("flaky", Flaky(5))], clock=clock)
    plan = host.plan([{"node_id": "f", "name": "flaky", "retry": FAST}])
    sent: list[Message] = []
    runner = ChainRunner(plan, executors=host.toolbox.executors, limits=host.limits,
                         emit=sent.append, clock=clock.clock, tool_of=host.toolbox.tools.get)
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(runner.run_to_response, time.monotonic())
            await clock.waiting.wait()
            runner.cancel()
    events = [m for m in sent if isinstance(m, ChainEvent)]
    assert [(e.phase, e.kind) for e in events] == [("start", "status"), ("start", "progress"),
                                                   ("error", "status")]
    assert events[-1].error == "cancelled: the chain was cancelled"
    assert events[-1].data == {
        "attempts": 1,
        "errors": [{"attempt": 1, "tool": "flaky", "code": "chain_node_error",
                    "error": "call 1 fails"}],
        "fallback_used": False,
    }
    assert runner.reports == {}


@pytest.mark.asyncio
async def test_an_output_the_node_refuses_is_never_kept_in_the_cache() -> None:
    calls: list[int] = []

    def wordy(args: dict[str, Any]) -> Any:
        calls.append(1)
        return {"text": "x" * 100}  # over the session's max_output_bytes of 64

    cache = StepCache()
    host = Host([make_tool("wordy", wordy)], cache=cache, limits=Limits(max_output_bytes=64))
    for _ in range(2):
        run = await host.run([{"node_id": "w", "name": "wordy", "cache": True}])
        assert run.last("w").phase == "error"
        assert run.last("w").error == "node 'w' output is 111 bytes, over max_output_bytes 64"
        assert run.last("w").data["cache"] == "miss"
    assert len(calls) == 2 and len(cache) == 0


@pytest.mark.asyncio
@pytest.mark.parametrize(("retry_on", "calls"), [([], 1), (["chain_node_error"], 3)])
async def test_a_proc_node_is_retried_only_for_codes_retry_on_names(
    retry_on: list[str], calls: int
) -> None:
    # what a process does is unknown to the host (the kind table's unknown_effects)
    ran: list[int] = []

    async def proc(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        ran.append(1)
        if len(ran) < 3:
            raise NodeError("exit 1", retryable=True)
        return {"exit_code": 0}

    node = msgspec.convert({"node_id": "p", "kind": "proc", "input": {"argv": ["x"]},
                            "retry": {**FAST, "retry_on": retry_on}}, ChainNode)
    plan = validate_chain(ChainRequest(id="r", nodes=[node], entry_node="p"), FakeCatalog(),
                          SessionLimits(Limits()), granted=ALL_CAPS)
    sent: list[Message] = []
    runner = ChainRunner(plan, executors={"proc": proc}, limits=Limits(), emit=sent.append,
                         clock=FakeClock().clock)
    with anyio.fail_after(WAIT):
        await runner.run_to_response(time.monotonic())
    assert len(ran) == calls
    last = [m for m in sent if isinstance(m, ChainEvent)][-1]
    assert last.data["attempts"] == calls


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("argv", "refused"),
    [(["rm", "-rf", "x"], "'rm' is not allowed"), ([], "input 'argv'")],
)
async def test_a_proc_input_the_host_refuses_is_never_retried(
    tmp_path: Any, argv: list[str], refused: str
) -> None:
    # an executable outside the allowlist, or a bad argv, is the input's fault: as a tool's
    # schema refusal, it is refused again on every attempt, whatever retry_on names
    from a2e_host.chains.toolbox import Toolbox
    from a2e_host.config import HostConfig

    toolbox = Toolbox.from_config(HostConfig(allow_proc=("true",), root=str(tmp_path)))
    node = msgspec.convert({"node_id": "p", "kind": "proc", "input": {"argv": argv},
                            "retry": {**FAST, "retry_on": ["chain_node_error"]}}, ChainNode)
    request = ChainRequest(id="r", nodes=[node], entry_node="p")
    plan = validate_chain(request, FakeCatalog(), SessionLimits(Limits()), granted=ALL_CAPS)
    sent: list[Message] = []
    runner = ChainRunner(plan, executors={"proc": toolbox.run_proc}, limits=Limits(),
                         emit=sent.append, clock=FakeClock().clock)
    with anyio.fail_after(WAIT):
        await runner.run_to_response(time.monotonic())
    events = [m for m in sent if isinstance(m, ChainEvent)]
    assert [(e.phase, e.kind) for e in events] == [("start", "status"), ("error", "status")]
    assert refused in events[-1].error and events[-1].data["attempts"] == 1
