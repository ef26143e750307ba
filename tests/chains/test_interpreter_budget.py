"""The budgeted JMESPath interpreter: steps, logical bytes of built values, the cancel flag,
the context root as a plain object, and ordering comparisons (PROTOCOL.md §3, §6)."""

from __future__ import annotations

import threading
import tracemalloc
from typing import Any

import pytest

from a2e_host.chains.expressions import compile_expression
from a2e_host.chains.interpreter import (
    CHECK_EVERY,
    Budget,
    ContextView,
    EvaluationCancelled,
    EvaluationSliceExhausted,
    ExpressionBudgetExceeded,
    evaluate,
)
from a2e_host.limits import Limits

DOUBLINGS = "|".join(["[@,@]"] * 40)
FLATTENED = "length(" + "|".join(["[@,@]"] * 28) + "|" + "|".join(["[]"] * 27) + ")"


def run(text: str, root: Any, **budget: Any) -> Any:
    return evaluate(compile_expression(text).parsed, root, Budget(**budget))


def refusal(text: str, root: Any, **budget: Any) -> ExpressionBudgetExceeded:
    with pytest.raises(ExpressionBudgetExceeded) as info:
        run(text, root, **budget)
    return info.value


def node_context() -> ContextView:
    base = {"input": {"n": 5, "s": "7", "items": [1, 2, 3]},
            "a": {"output": {"x": 1}, "status": "done"}}
    return ContextView(base, {"output": {"x": 1}})


def test_budget_defaults_are_the_ceilings_defaults() -> None:
    assert (Budget().max_steps, Budget().max_bytes) == (
        Limits().max_expression_steps, Limits().max_expression_bytes)


# ── bytes ──────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("text", [DOUBLINGS, FLATTENED], ids=["doublings", "flattened"])
def test_value_bombs_stop_at_max_expression_bytes_in_bounded_memory(text: str) -> None:
    tracemalloc.start()
    try:
        err = refusal(text, node_context())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert err.ceiling == "max_expression_bytes"
    assert err.limit == 8 * 1024 * 1024
    assert 8 * 1024 * 1024 < err.requested < 2 * 8 * 1024 * 1024 + 100  # one doubling past
    assert peak < 16 * 1024 * 1024, f"evaluation allocated {peak} bytes on the way"


def test_shared_references_count_each_time_they_appear() -> None:
    # {"x":1} is 7 bytes; [v,v] is 2*7+3 = 17; [[v,v],[v,v]] is 2*17+3 = 37
    assert run("[a.output, a.output]", node_context(), max_bytes=17) == [{"x": 1}] * 2
    err = refusal("[a.output, a.output] | [@, @]", node_context(), max_bytes=36)
    assert (err.ceiling, err.requested) == ("max_expression_bytes", 37)


def test_values_read_from_the_context_are_not_charged_until_built_into_another() -> None:
    root = {"input": {"big": "x" * 10_000}}
    assert run("input.big", root, max_bytes=100) == "x" * 10_000  # read, not built
    assert run("length(input.big)", root, max_bytes=100) == 10_000
    err = refusal("[input.big]", root, max_bytes=100)
    assert err.requested == 10_002 + 2


def test_to_string_is_refused_before_the_string_is_written() -> None:
    root = {"input": {"list": list(range(100))}}
    assert run("to_string(input.list)", root, max_bytes=1_000) == str(list(range(100))).replace(
        " ", "")
    err = refusal("to_string([input.list, input.list, input.list, input.list])", root,
                  max_bytes=1_000)
    assert err.requested > 1_000


def test_join_with_a_long_separator_is_refused_before_joining() -> None:
    root = {"input": {"sep": "-" * 1_000, "words": ["a"] * 1_000}}
    err = refusal("join(input.sep, input.words)", root, max_bytes=100_000)
    assert err.requested == 2 + 999 * 1_000 + 1_000


def test_projection_results_are_charged_as_they_grow() -> None:
    root = {"input": {"items": [{"name": "n" * 10}] * 1_000}}
    assert len(run("input.items[*].name", root, max_bytes=14_000)) == 1_000
    err = refusal("input.items[*].name", root, max_bytes=5_000)
    assert 5_000 < err.requested < 5_020  # stopped at the first element past the ceiling


# ── steps ──────────────────────────────────────────────────────────────────────


def test_a_long_filter_stops_at_max_expression_steps() -> None:
    root = {"input": {"items": list(range(100_000))}}
    err = refusal("length(input.items[?to_string(@)=='x'])", root, max_steps=10_000)
    assert err.ceiling == "max_expression_steps"
    assert (err.limit, err.requested) == (10_000, 10_001)


def test_flatten_and_slice_charge_their_elements_before_copying() -> None:
    root = {"input": {"rows": [list(range(1_000))] * 100}}
    assert refusal("input.rows[]", root, max_steps=50_000).ceiling == "max_expression_steps"
    assert len(run("input.rows[]", root, max_steps=300_000)) == 100_000
    flat = {"input": {"xs": list(range(100_000))}}
    assert refusal("input.xs[::2]", flat, max_steps=20_000).ceiling == "max_expression_steps"


def test_length_of_a_long_list_costs_no_steps_per_element() -> None:
    root = {"input": {"xs": list(range(100_000))}}
    assert run("length(input.xs) > `3`", root, max_steps=10) is True


def test_sorting_is_charged_n_log_n() -> None:
    root = {"input": {"xs": list(range(1_000, 0, -1))}}
    assert refusal("sort(input.xs)", root, max_steps=5_000).ceiling == "max_expression_steps"
    assert run("sort(input.xs)[0]", root, max_steps=20_000) == 1


def test_an_exhausted_slice_asks_for_a_rerun_not_a_failure() -> None:
    root = {"input": {"items": list(range(10_000))}}
    with pytest.raises(EvaluationSliceExhausted):
        run("input.items[?@ > `5`]", root, slice_steps=100)
    assert len(run("input.items[?@ > `5`]", root)) == 9_994
    # a slice at or above the budget is the budget itself: running out is a refusal
    with pytest.raises(ExpressionBudgetExceeded):
        run("input.items[?@ > `5`]", root, max_steps=100, slice_steps=100)


def test_a_set_cancel_flag_stops_the_evaluation_at_its_next_check() -> None:
    cancelled = threading.Event()
    cancelled.set()
    root = {"input": {"items": list(range(10_000))}}
    with pytest.raises(EvaluationCancelled):
        run("input.items[?@ > `5`]", root, cancelled=cancelled)
    assert run("input.items[:3]", root, cancelled=cancelled) == [0, 1, 2]  # under one check
    assert CHECK_EVERY <= 4096


def test_a_cancel_from_another_thread_stops_a_long_evaluation() -> None:
    cancelled = threading.Event()
    started = threading.Event()
    outcome: list[BaseException] = []
    root = {"input": {"items": list(range(10_000_000))}}

    def work() -> None:
        started.set()
        try:
            run("input.items[?to_string(@)=='x']", root, max_steps=10**9, cancelled=cancelled)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            outcome.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    assert started.wait(10)
    cancelled.set()
    thread.join(30)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], EvaluationCancelled), outcome


# ── the root ───────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("@", {"input": {"n": 5, "s": "7", "items": [1, 2, 3]},
               "a": {"output": {"x": 1}, "status": "done"}, "output": {"x": 1}}),
        ("keys(@)", ["input", "a", "output"]),
        ("length(@)", 3),
        ("type(@)", "object"),
        ("merge(@, `{\"z\": 1}`) | keys(@)", ["input", "a", "output", "z"]),
        ("[@][0].a.status", "done"),
        ("{whole: @}.whole.input.n", 5),
        ("values(@)[1]", {"output": {"x": 1}, "status": "done"}),
        ("*.status", ["done"]),
        ("@ == @", True),
        ("@.input.n", 5),
    ],
)
def test_the_root_is_the_whole_context_as_a_plain_object(text: str, expected: Any) -> None:
    got = run(text, node_context())
    assert got == expected
    assert type(got) is not ContextView


def test_the_root_result_is_a_plain_dict_that_encodes_whole() -> None:
    import msgspec

    got = compile_expression("$").search(node_context())
    assert type(got) is dict
    assert msgspec.json.decode(msgspec.json.encode(got)) == {
        "input": {"n": 5, "s": "7", "items": [1, 2, 3]},
        "a": {"output": {"x": 1}, "status": "done"}, "output": {"x": 1},
    }


def test_a_context_view_is_a_mapping_whose_own_keys_win() -> None:
    view = ContextView({"input": 1, "output": "shared"}, {"output": "own", "item": 2})
    assert dict(view) == {"input": 1, "output": "own", "item": 2}
    assert len(view) == 3 and list(view) == ["input", "output", "item"]
    assert view["output"] == "own" and view.get("nope", 7) == 7 and "item" in view


def test_a_snapshot_does_not_see_nodes_that_finish_later() -> None:
    base: dict[str, Any] = {"input": {}}
    view = ContextView(base, {"output": None})
    frozen = view.snapshot()
    base["late"] = {"output": 1, "status": "done"}
    assert "late" in view and "late" not in frozen


# ── comparisons ────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("input.n < input.s", None),
        ("input.s >= input.n", None),
        ("input.n > '7'", None),
        ("`\"a\"` <= `1`", None),
        ("input.n < `null`", None),
        ("input.n >= `true`", None),
        ("input.items > input.n", None),
        ("input.n <= `{}`", None),
        ("input.n < `6`", True),
        ("input.n >= `5.0`", True),
        ("'a' < 'b'", True),
        ("input.n == input.s", False),
        ("input.items[?@ > '1']", []),
    ],
)
def test_ordering_different_types_is_null_never_an_error(text: str, expected: Any) -> None:
    assert run(text, node_context()) == expected


def test_equality_of_big_values_is_charged_for_the_walk_before_it_happens() -> None:
    """An equality of two separately built 4 MiB values is one C call walking both; a
    thousand of them in one expression ran for 20 s as a few thousand steps."""
    doublings = compile_expression("input.z|" + "|".join(["[@,@]"] * 20))
    root = {"input": {"z": 0}}
    full = Budget(max_steps=10**9, max_bytes=8 * 2**20)
    context = {
        "a": {"output": {"v": evaluate(doublings.parsed, root, full)}},
        "b": {"output": {"v": evaluate(doublings.parsed, root, full)}},
    }
    one = compile_expression("a.output.v == b.output.v")
    assert evaluate(one.parsed, context, Budget()) is True  # within the default budget
    many = compile_expression("length([" + ", ".join(["a.output.v == b.output.v"] * 1300) + "])")
    with pytest.raises(ExpressionBudgetExceeded) as refused:
        evaluate(many.parsed, context, Budget())
    assert refused.value.ceiling == "max_expression_steps"
    # identical or differently typed values cost nothing beyond their step
    cheap = compile_expression("length([" + ", ".join(["a.output.v == a.output.v"] * 1300) + "])")
    assert evaluate(cheap.parsed, context, Budget()) == 1300


def test_contains_with_a_big_needle_is_charged_per_element_it_is_compared_with() -> None:
    needle = list(range(5000))
    context = {"input": {"hay": [list(range(5000)) for _ in range(300)], "needle": needle}}
    expr = compile_expression("contains(input.hay, input.needle)")
    with pytest.raises(ExpressionBudgetExceeded):
        evaluate(expr.parsed, context, Budget(max_steps=100_000))
    assert evaluate(expr.parsed, context, Budget()) is True
