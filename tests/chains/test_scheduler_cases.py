"""The chain scheduler against PROTOCOL.md §3–§5 and §8, case by case.

Tools are deterministic fakes; concurrency is coordinated with ``anyio.Event`` and every
wait is bounded. Only the timeout case waits on the real clock (it is about the clock).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import pytest

from a2e_host.chains.messages import ChainNode, ChainResponse
from a2e_host.chains.nodes import NodeContext
from a2e_host.chains.scheduler import ChainRunner
from a2e_host.exceptions import ChainInvalid, NodeError
from a2e_host.limits import Limits
from a2e_host.messages import Message
from tests.support.chains import WAIT, Run, check_stream, echo_tool, plan_of, run_plan

# ── branch and join ─────────────────────────────────────────────────────────

IF_ELSE = [
    {
        "node_id": "route",
        "kind": "branch",
        "condition": "input.fast",
        "true_node": "a",
        "false_node": "b",
    },
    {"node_id": "a", "input": {"v": 1}, "next_node": "join"},
    {"node_id": "b", "input": {"v": 2}, "next_node": "join"},
    {"node_id": "join", "input_map": {"a": "a.output", "b": "b.output", "o": "output"}},
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("fast", "ran", "skipped"), [(True, "a", "b"), (False, "b", "a")])
async def test_if_else_join_runs_the_join_once(fast: bool, ran: str, skipped: str) -> None:
    run = await run_plan(plan_of(IF_ELSE, initial_input={"fast": fast}))
    assert sorted(run.pairs) == sorted(
        [
            ("route", "start"),
            ("route", "done"),
            (ran, "start"),
            (ran, "done"),
            (skipped, "skip"),
            ("join", "start"),
            ("join", "done"),
        ]
    )
    seq = {pair: e.seq for pair, e in zip(run.pairs, run.events, strict=True)}
    assert seq["route", "done"] < seq[ran, "start"] < seq[ran, "done"] < seq["join", "start"]
    assert seq["route", "done"] < seq[skipped, "skip"]
    assert run.event("route", "done").output == {"condition": fast, "taken": ran}
    ran_output = {"v": 1} if fast else {"v": 2}
    expected_join = {
        "a": ran_output if fast else None,
        "b": None if fast else ran_output,
        "o": ran_output,  # the side that ran activated the join (PROTOCOL.md §3)
    }
    assert run.event("join", "done").output == expected_join
    resp = run.response
    assert resp.success and resp.error is None
    assert resp.nodes_run == 3
    assert resp.outputs == {
        "route": {"condition": fast, "taken": ran},
        ran: ran_output,
        "join": expected_join,
    }
    assert resp.final_output == expected_join


# ── maps ────────────────────────────────────────────────────────────────────


@pytest.mark.asyncio
async def test_two_empty_maps_in_a_row_output_empty_lists_and_the_summary_runs() -> None:
    calls: list[str] = []

    async def tool(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        calls.append(ctx.node_id)
        return args

    plan = plan_of(
        [
            {
                "node_id": "m1",
                "kind": "map",
                "items_path": "input.files",
                "map_node": "t1",
                "next_node": "m2",
            },
            {"node_id": "t1", "input_map": {"f": "item"}},
            {
                "node_id": "m2",
                "kind": "map",
                "items_path": "m1.output",
                "map_node": "t2",
                "next_node": "summary",
            },
            {"node_id": "t2", "input_map": {"f": "item"}},
            {"node_id": "summary", "input_map": {"first": "m1.output", "second": "m2.output"}},
        ],
        initial_input={"files": []},
    )
    run = await run_plan(plan, tool)
    assert run.pairs == [
        ("m1", "start"),
        ("m1", "done"),
        ("m2", "start"),
        ("m2", "done"),
        ("summary", "start"),
        ("summary", "done"),
    ]
    assert run.event("m1", "done").output == []
    assert run.event("m2", "done").output == []
    assert calls == ["summary"], "templates of empty maps never run"
    assert run.response.success
    assert run.response.outputs == {"m1": [], "m2": [], "summary": {"first": [], "second": []}}
    assert run.response.final_output == {"first": [], "second": []}
    assert run.response.nodes_run == 3


@pytest.mark.asyncio
async def test_map_failure_runs_its_handler_once_and_not_its_next_node() -> None:
    items = ["ok", "bad", "ok", "bad"]
    all_started = anyio.Event()
    started: list[int] = []

    async def tool(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        if node.node_id == "t":
            started.append(args["i"])
            if len(started) == len(items):
                all_started.set()
            await all_started.wait()  # every item is in flight before any fails
            if args["item"] == "bad":
                raise NodeError(f"item {args['i']} is bad")
        return args

    plan = plan_of(
        [
            {
                "node_id": "m",
                "kind": "map",
                "items_path": "input.xs",
                "map_node": "t",
                "on_error": "cleanup",
                "next_node": "after",
            },
            {"node_id": "t", "input_map": {"item": "item", "i": "index"}},
            {"node_id": "cleanup", "input_map": {"e": "error"}},
            {"node_id": "after", "input_map": {"v": "m.output"}},
        ],
        initial_input={"xs": items},
    )
    run = await run_plan(plan, tool)
    assert run.of("cleanup") == ["start", "done"]
    assert run.of("after") == ["skip"]
    assert run.of("m") == ["start", "error"]
    error = run.event("cleanup", "done").output["e"]
    assert error["node_id"] == "m"
    assert error["code"] == "chain_node_error"
    assert error["index"] in (1, 3), error
    assert f"item {error['index']}" in error["message"]
    assert run.of(f"t[{error['index']}]") == ["start", "error"]
    resp = run.response
    assert resp.success, "a failure caught by a handler that succeeded is handled"
    assert set(resp.outputs) == {"cleanup"}
    assert resp.final_output == {"e": error}
    assert resp.nodes_run == 2


@pytest.mark.asyncio
async def test_map_of_sleeps_keeps_input_order_and_a_gapless_seq() -> None:
    async def tool(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        await anyio.sleep(args["ms"] / 1000)
        return {"ms": args["ms"], "i": args["i"]}

    plan = plan_of(
        [
            {"node_id": "m", "kind": "map", "items_path": "input.ms", "map_node": "t"},
            {"node_id": "t", "input_map": {"ms": "item", "i": "index"}},
        ],
        initial_input={"ms": [300, 10, 150]},
    )
    run = await run_plan(plan, tool)
    expected = [{"ms": 300, "i": 0}, {"ms": 10, "i": 1}, {"ms": 150, "i": 2}]
    assert run.response.outputs == {"m": expected}
    assert run.event("m", "done").output == expected
    for i, out in enumerate(expected):
        assert run.event(f"t[{i}]", "done").output == out
    assert len(run.events) == 8
    assert (run.events[0].node_id, run.events[-1].node_id) == ("m", "m")
    assert run.response.nodes_run == 1


@pytest.mark.asyncio
async def test_slice_with_step_zero_is_refused_cleanly() -> None:
    nodes = [
        {"node_id": "m", "kind": "map", "items_path": "input.files[::0]", "map_node": "t"},
        {"node_id": "t", "input_map": {"f": "item"}},
    ]
    try:
        plan = plan_of(nodes, initial_input={"files": ["a", "b"]})
    except ChainInvalid as exc:  # refused at validation: fine, if it names the field
        problems = exc.details["errors"]
        assert [(p["node_id"], p["field"]) for p in problems] == [("m", "items_path")]
        return
    run = await run_plan(plan)
    assert run.pairs == [("m", "start"), ("m", "error")]
    assert "items_path" in run.event("m", "error").error
    assert not run.response.success
    assert run.response.error is not None
    assert (run.response.error.code, run.response.error.node_id) == ("chain_node_error", "m")


@pytest.mark.asyncio
async def test_negative_slice_maps_in_reverse_order() -> None:
    plan = plan_of(
        [
            {"node_id": "m", "kind": "map", "items_path": "input.files[::-1]", "map_node": "t"},
            {"node_id": "t", "input_map": {"f": "item", "i": "index"}},
        ],
        initial_input={"files": ["a", "b", "c"]},
    )
    run = await run_plan(plan)
    assert run.response.outputs == {
        "m": [{"f": "c", "i": 0}, {"f": "b", "i": 1}, {"f": "a", "i": 2}]
    }


@pytest.mark.asyncio
async def test_projection_items_path_drops_nulls() -> None:
    plan = plan_of(
        [
            {"node_id": "m", "kind": "map", "items_path": "input.rows[*].v", "map_node": "t"},
            {"node_id": "t", "input_map": {"v": "item"}},
        ],
        initial_input={"rows": [{"v": None}, {"v": 1}, {}, {"v": 2}]},
    )
    run = await run_plan(plan)
    assert sorted(e.node_id for e in run.events if e.phase == "start") == ["m", "t[0]", "t[1]"]
    assert run.response.outputs == {"m": [{"v": 1}, {"v": 2}]}
    assert run.response.success


@pytest.mark.asyncio
async def test_items_path_to_a_string_fails_the_map_as_not_a_list() -> None:
    plan = plan_of(
        [
            {"node_id": "m", "kind": "map", "items_path": "input.name", "map_node": "t"},
            {"node_id": "t", "input_map": {"v": "item"}},
        ],
        initial_input={"name": "abc"},
    )
    run = await run_plan(plan)
    assert run.pairs == [("m", "start"), ("m", "error")]
    message = run.event("m", "error").error
    assert "not a list" in message and "'m'" in message
    assert run.response.error is not None
    assert (run.response.error.code, run.response.error.node_id) == ("chain_node_error", "m")


# ── expression failures are node errors ─────────────────────────────────────


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("kind_fields", "initial_input", "mentions"),
    [
        pytest.param(
            {"kind": "branch", "condition": "length(input.n) > `2`", "true_node": "x"},
            {"n": 5},
            "length",
            id="length of a number in a condition",
        ),
        pytest.param(
            {"input_map": {"v": "merge(input.defaults, input.overrides)"}, "next_node": "x"},
            {"defaults": {"a": 1}},
            "merge",
            id="merge with a missing argument",
        ),
        pytest.param(
            {"input_map": {"v": "sort_by(input.rows, &k)"}, "next_node": "x"},
            {"rows": [{"k": 2}, {}]},
            "sort_by",
            id="sort_by on a missing key",
        ),
    ],
)
async def test_failing_expression_is_a_clean_node_error(
    kind_fields: dict[str, Any], initial_input: dict[str, Any], mentions: str
) -> None:
    plan = plan_of([{"node_id": "b", **kind_fields}, {"node_id": "x"}], initial_input=initial_input)
    run = await run_plan(plan)
    assert run.pairs == [("b", "start"), ("b", "error")], "x never starts and gets no event"
    message = run.event("b", "error").error
    assert mentions in message and "'b'" in message
    resp = run.response
    assert not resp.success and resp.nodes_run == 1 and resp.outputs == {}
    assert resp.error is not None
    assert (resp.error.code, resp.error.node_id) == ("chain_node_error", "b")
    assert mentions in resp.error.message and "'b'" in resp.error.message


# ── timeout, abort, cancel ──────────────────────────────────────────────────


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["thread", "shielded"])
async def test_timeout_answers_within_the_deadline_despite_a_stubborn_tool(how: str) -> None:
    release = threading.Event()  # set: the stubborn tool may return
    release_task = anyio.Event()
    returned = threading.Event()  # set: the stubborn tool has returned

    def blocking() -> dict[str, Any]:
        release.wait(30)
        returned.set()
        return {"late": True}

    async def tool(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        if how == "thread":
            return await anyio.to_thread.run_sync(blocking, abandon_on_cancel=True)
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(30):
                await release_task.wait()
        returned.set()
        return {"late": True}

    def let_the_tool_return() -> None:
        release.set()
        release_task.set()

    sent: list[Message] = []
    response_at: list[float] = []
    tool_returned_before_response: list[bool] = []

    def emit(message: Message) -> None:
        sent.append(message)
        if isinstance(message, ChainResponse):
            response_at.append(time.monotonic())
            tool_returned_before_response.append(returned.is_set())
            let_the_tool_return()  # the response is out: only now may the tool return

    plan = plan_of(
        [{"node_id": "s", "name": "sleep", "next_node": "after"}, {"node_id": "after"}], timeout=1
    )
    runner = ChainRunner(plan, executors={"tool": tool}, limits=Limits(), emit=emit)

    async def unstick_if_stuck() -> None:
        # only so the test itself ends if the response waits for the tool (the bug); far
        # past the chain's 1 s timeout, so that only the bug gets here first
        await anyio.sleep(8)
        let_the_tool_return()

    try:
        with anyio.fail_after(15):
            async with anyio.create_task_group() as tg:
                tg.start_soon(unstick_if_stuck)
                await runner.run_to_response(time.monotonic())
                tg.cancel_scope.cancel()
    finally:
        let_the_tool_return()
    # the tool is released only once the response is out (or by the fallback above): a
    # response sent while the tool still held came at the deadline, not when the tool gave up
    assert tool_returned_before_response == [False], (
        "the chain/resp waited for the stubborn tool to return instead of answering at the "
        "chain's 1 s timeout"
    )
    count = len(sent)
    # let the stubborn tool return: its result must never be applied
    if how == "thread":
        assert await anyio.to_thread.run_sync(returned.wait, WAIT)
    with anyio.fail_after(WAIT):
        await anyio.wait_all_tasks_blocked()
    assert len(sent) == count, "nothing is sent after the response"
    run = Run(sent, response_at[0])
    check_stream(run)
    assert run.pairs == [("s", "start"), ("s", "error")]
    assert "timed out" in run.event("s", "error").error
    resp = run.response
    assert resp.error is not None and resp.error.code == "timeout"
    assert not resp.success and resp.outputs == {} and resp.nodes_run == 1


@pytest.mark.asyncio
async def test_abort_cancels_running_siblings_and_starts_nothing_else() -> None:
    siblings_started = anyio.Event()
    running: set[str] = set()

    async def tool(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        if node.node_id in ("slow1", "slow2"):
            running.add(node.node_id)
            if len(running) == 2:
                siblings_started.set()
            await anyio.sleep_forever()
        if node.node_id == "bad":
            await siblings_started.wait()
            raise NodeError("bad broke")
        return args

    plan = plan_of(
        [
            {"node_id": "bad", "next_node": "after_bad"},
            {"node_id": "slow1", "next_node": "after_slow"},
            {"node_id": "slow2"},
            {"node_id": "after_bad"},
            {"node_id": "after_slow"},
            {"node_id": "reader", "input_map": {"v": "bad.output"}},
        ]
    )
    run = await run_plan(plan, tool)
    for node_id in ("bad", "slow1", "slow2"):
        assert run.of(node_id) == ["start", "error"], node_id
    for node_id in ("after_bad", "after_slow", "reader"):
        assert run.of(node_id) == [], f"never-started {node_id} gets no events (§8)"
    bad_error = run.event("bad", "error")
    assert "bad broke" in bad_error.error
    assert all(e.phase != "start" for e in run.events if e.seq > bad_error.seq)
    assert "cancelled" in run.event("slow1", "error").error
    resp = run.response
    assert not resp.success and resp.nodes_run == 3 and resp.outputs == {}
    assert resp.error is not None
    assert (resp.error.code, resp.error.node_id) == ("chain_node_error", "bad")
    assert "bad broke" in resp.error.message


@pytest.mark.asyncio
async def test_abort_starts_no_map_item_and_applies_no_late_result() -> None:
    item_running = anyio.Event()
    bad_failed = anyio.Event()

    async def tool(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        if node.node_id == "bad":
            await item_running.wait()
            bad_failed.set()
            raise NodeError("bad broke")
        if ctx.node_id == "t[0]":
            item_running.set()
            await bad_failed.wait()  # returns while the abort is under way
        return args

    plan = plan_of(
        [
            {"node_id": "m", "kind": "map", "items_path": "`[1, 2, 3]`", "map_node": "t"},
            {"node_id": "t", "input_map": {"v": "item"}},
            {"node_id": "bad"},
        ]
    )
    run = await run_plan(plan, tool, limits=Limits(max_map_concurrency=1))
    bad_error = run.event("bad", "error")
    late = [e.node_id for e in run.events if e.seq > bad_error.seq and e.phase == "start"]
    assert late == [], (
        f"PROTOCOL.md §5 abort: nothing else starts after 'bad' failed, but {late} started: "
        f"{run.pairs}"
    )
    assert run.of("t[1]") == [] and run.of("t[2]") == [], run.pairs
    assert run.of("t[0]") == ["start", "error"], (
        f"§5 abort: a running item is cancelled and gets an error event: {run.pairs}"
    )
    assert run.of("m") == ["start", "error"], (
        f"§5 abort: the running map is cancelled and gets an error event: {run.pairs}"
    )
    resp = run.response
    assert resp.outputs == {} and resp.final_output is None, "no result applied after the abort"
    assert resp.error is not None and resp.error.node_id == "bad"
    assert resp.nodes_run == 2


@pytest.mark.asyncio
async def test_abort_applies_no_node_result_that_arrives_after_it() -> None:
    sibling_running = anyio.Event()
    bad_failed = anyio.Event()

    async def tool(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        if node.node_id == "bad":
            await sibling_running.wait()
            bad_failed.set()
            raise NodeError("bad broke")
        if node.node_id == "sibling":
            sibling_running.set()
            await bad_failed.wait()  # returns while the abort is under way
        return args

    plan = plan_of(
        [{"node_id": "bad"}, {"node_id": "sibling", "next_node": "after"}, {"node_id": "after"}]
    )
    run = await run_plan(plan, tool)
    assert run.of("after") == []
    assert run.of("sibling") == ["start", "error"], (
        f"§5 abort: the chain fails at once and the running sibling is cancelled with an "
        f"error event, not completed: {run.pairs}"
    )
    assert run.response.outputs == {}, "no result is applied after the abort"


@pytest.mark.asyncio
async def test_cancel_ends_the_chain_as_cancelled() -> None:
    started = anyio.Event()

    async def tool(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        if node.node_id in ("x", "y"):
            if node.node_id == "y":
                started.set()
            await anyio.sleep_forever()
        return args

    async def cancel_when_running(runner: ChainRunner) -> None:
        await started.wait()
        runner.cancel()

    plan = plan_of(
        [
            {"node_id": "d", "next_node": "x"},
            {"node_id": "x", "next_node": "z"},
            {"node_id": "y"},
            {"node_id": "z"},
        ]
    )
    run = await run_plan(plan, tool, during=cancel_when_running)
    assert run.of("d") == ["start", "done"]
    assert run.of("x") == ["start", "error"]
    assert run.of("y") == ["start", "error"]
    assert run.of("z") == []
    resp = run.response
    assert resp.error is not None and resp.error.code == "cancelled"
    assert not resp.success and resp.nodes_run == 3
    assert resp.outputs == {"d": {}}


# ── on_error ────────────────────────────────────────────────────────────────


@pytest.mark.asyncio
async def test_on_error_skip_nulls_the_output_and_successors_go_on() -> None:
    plan = plan_of(
        [
            {
                "node_id": "x",
                "name": "fail",
                "input": {"message": "x broke"},
                "on_error": "skip",
                "next_node": "y",
            },
            {
                "node_id": "y",
                "input_map": {"prev": "x.output", "status": "x.status", "o": "output"},
            },
        ]
    )
    run = await run_plan(plan)
    assert run.pairs == [("x", "start"), ("x", "error"), ("y", "start"), ("y", "done")]
    assert "x broke" in run.event("x", "error").error
    assert run.event("y", "done").output == {"prev": None, "status": "error", "o": None}
    resp = run.response
    assert resp.success and resp.error is None
    assert resp.outputs == {"y": {"prev": None, "status": "error", "o": None}}
    assert resp.nodes_run == 2


@pytest.mark.asyncio
@pytest.mark.parametrize("handler_fails", [False, True])
async def test_handler_sees_the_error_and_decides_success(handler_fails: bool) -> None:
    handler: dict[str, Any] = {"node_id": "h", "input_map": {"e": "error"}}
    if handler_fails:
        handler.update(name="fail", input={"message": "h broke"}, on_error="skip")
    plan = plan_of(
        [
            {
                "node_id": "x",
                "name": "fail",
                "input": {"message": "x broke"},
                "on_error": "h",
                "next_node": "y",
            },
            {"node_id": "y"},
            handler,
        ]
    )
    run = await run_plan(plan)
    assert run.of("x") == ["start", "error"]
    assert run.of("y") == ["skip"]
    assert run.of("h") == ["start", "error" if handler_fails else "done"]
    resp = run.response
    if handler_fails:
        assert not resp.success, "the failure of x was not handled: its handler failed"
        assert resp.outputs == {}
        assert resp.error is not None
        assert (resp.error.code, resp.error.node_id) == ("chain_node_error", "x")
        return
    error = run.event("h", "done").output["e"]
    assert set(error) == {"node_id", "code", "message"}
    assert (error["node_id"], error["code"]) == ("x", "chain_node_error")
    assert "x broke" in error["message"]
    assert resp.success and resp.error is None
    assert resp.outputs == {"h": {"e": error}}
    assert resp.final_output == {"e": error}


# ── the response ────────────────────────────────────────────────────────────


@pytest.mark.asyncio
async def test_response_outputs_final_output_and_nodes_run() -> None:
    plan = plan_of(
        [
            {
                "node_id": "root",
                "kind": "branch",
                "condition": "`false`",
                "true_node": "b",
                "next_node": "m",
            },
            {"node_id": "m", "kind": "map", "items_path": "`[1, 2, 3]`", "map_node": "t"},
            {"node_id": "t", "input_map": {"v": "item"}},
            {"node_id": "a", "input": {"out": "a"}},
            {"node_id": "b", "input": {"out": "b"}},
            {"node_id": "c", "name": "fail", "on_error": "skip"},
        ]
    )
    run = await run_plan(plan)
    resp = run.response
    # terminals in declaration order: m, a, b (skipped), c (failed): the last done is a
    assert resp.final_output == {"out": "a"}
    assert resp.outputs == {
        "root": {"condition": False, "taken": ""},
        "m": [{"v": 1}, {"v": 2}, {"v": 3}],
        "a": {"out": "a"},
    }
    assert resp.nodes_run == 4, "root, m (once, not per item), a, c"
    assert resp.success
    assert run.of("b") == ["skip"]


@pytest.mark.asyncio
async def test_streaming_false_sends_only_the_response() -> None:
    plan = plan_of(
        [
            {
                "node_id": "route",
                "kind": "branch",
                "condition": "`true`",
                "true_node": "m",
                "false_node": "z",
            },
            {"node_id": "m", "kind": "map", "items_path": "`[1, 2]`", "map_node": "t"},
            {"node_id": "t", "input_map": {"v": "item"}},
            {"node_id": "z"},
        ],
        streaming=False,
    )
    run = await run_plan(plan)
    assert run.events == []
    assert len(run.sent) == 1
    assert run.response.success and run.response.outputs["m"] == [{"v": 1}, {"v": 2}]
    assert run.response.nodes_run == 2


# ── ceilings on concurrency ─────────────────────────────────────────────────


class Gate:
    """Tools that block until released one by one, counting how many are in flight."""

    def __init__(self) -> None:
        self.in_flight: list[str] = []
        self.most = 0
        self.finished = 0
        self.release: dict[str, anyio.Event] = {}

    async def tool(self, node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        key = ctx.node_id
        self.release[key] = anyio.Event()
        self.in_flight.append(key)
        self.most = max(self.most, len(self.in_flight))
        await self.release[key].wait()
        self.in_flight.remove(key)
        self.finished += 1
        return {"k": key}

    async def drive(self, total: int) -> list[int]:
        """Release the oldest tool each time everything is blocked; returns the counts."""
        seen: list[int] = []
        while self.finished < total:
            await anyio.wait_all_tasks_blocked()
            if self.finished == total:
                break
            seen.append(len(self.in_flight))
            assert self.in_flight, "the chain is blocked with no tool in flight"
            self.release[self.in_flight[0]].set()
        return seen


@pytest.mark.asyncio
async def test_max_concurrency_bounds_nodes_in_flight() -> None:
    gate = Gate()
    nodes = [{"node_id": f"n{i}", "name": "gate"} for i in range(10)]
    nodes.append({"node_id": "last", "input_map": {f"v{i}": f"n{i}.output" for i in range(10)}})
    plan = plan_of(nodes)
    seen: list[int] = []

    async def drive(runner: ChainRunner) -> None:
        seen.extend(await gate.drive(10))

    async def tool(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        return await (
            gate.tool(node, args, ctx) if node.name == "gate" else echo_tool(node, args, ctx)
        )

    run = await run_plan(plan, tool, limits=Limits(max_concurrency=3), during=drive)
    assert gate.most == 3
    assert seen[:8] == [3] * 8, f"in flight when all were blocked: {seen}"
    assert run.response.success and run.response.nodes_run == 11


@pytest.mark.asyncio
async def test_max_map_concurrency_bounds_items_in_flight() -> None:
    gate = Gate()
    plan = plan_of(
        [
            {"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t"},
            {"node_id": "t", "name": "gate", "input_map": {"v": "item"}},
        ],
        initial_input={"xs": list(range(10))},
    )
    seen: list[int] = []

    async def drive(runner: ChainRunner) -> None:
        seen.extend(await gate.drive(10))

    run = await run_plan(plan, gate.tool, limits=Limits(max_map_concurrency=3), during=drive)
    assert gate.most == 3
    assert seen[:8] == [3] * 8, f"in flight when all were blocked: {seen}"
    assert run.response.outputs == {"m": [{"k": f"t[{i}]"} for i in range(10)]}
