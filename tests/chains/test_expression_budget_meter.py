"""BudgetMeter, the interpreter's accounting on its own: steps, slices, the cancel flag and
the sizes of built values, without parsing or visiting an expression (PROTOCOL.md §6)."""

from __future__ import annotations

import threading

import pytest

from a2e_host.chains import interpreter
from a2e_host.chains.context_view import ContextView
from a2e_host.chains.expression_budget import (
    CHECK_EVERY,
    Budget,
    BudgetMeter,
    EvaluationCancelled,
    EvaluationSliceExhausted,
    ExpressionBudgetExceeded,
)


def test_steps_up_to_the_budget_pass_and_the_next_check_refuses_naming_steps_taken() -> None:
    meter = BudgetMeter(Budget(max_steps=3 * CHECK_EVERY))
    meter._charge(3 * CHECK_EVERY)  # exactly the budget
    with pytest.raises(ExpressionBudgetExceeded) as info:
        meter._charge(1)
    assert (info.value.ceiling, info.value.limit, info.value.requested) == (
        "max_expression_steps", 3 * CHECK_EVERY, 3 * CHECK_EVERY + 1,
    )
    assert str(info.value) == f"took more than {3 * CHECK_EVERY} steps"


def test_a_slice_running_out_is_not_a_failure_but_a_request_to_run_again() -> None:
    meter = BudgetMeter(Budget(max_steps=10 * CHECK_EVERY, slice_steps=CHECK_EVERY))
    meter._charge(CHECK_EVERY)
    with pytest.raises(EvaluationSliceExhausted):
        meter._charge(1)


def test_a_slice_at_or_over_the_budget_is_no_slice() -> None:
    meter = BudgetMeter(Budget(max_steps=CHECK_EVERY, slice_steps=CHECK_EVERY))
    meter._charge(CHECK_EVERY)
    with pytest.raises(ExpressionBudgetExceeded):
        meter._charge(1)


def test_the_cancel_flag_is_seen_at_the_next_check_not_before() -> None:
    cancelled = threading.Event()
    meter = BudgetMeter(Budget(cancelled=cancelled))
    cancelled.set()
    meter._charge(CHECK_EVERY)  # within the steps granted before the next check
    with pytest.raises(EvaluationCancelled):
        meter._charge(1)


def test_a_built_value_over_the_bytes_is_refused_with_its_size() -> None:
    meter = BudgetMeter(Budget(max_bytes=100))
    small = ["x" * 40]
    assert meter._built(small, 45) is small
    with pytest.raises(ExpressionBudgetExceeded) as info:
        meter._built(["y" * 200], 205)
    assert (info.value.ceiling, info.value.limit, info.value.requested) == (
        "max_expression_bytes", 100, 205,
    )
    assert str(info.value) == "built a value of at least 205 bytes"


def test_a_value_built_twice_into_another_counts_twice_and_is_remembered() -> None:
    meter = BudgetMeter(Budget())
    part = ["a" * 100]  # 1 + 102 + 1 bytes as JSON
    assert meter.size_of(part) == len('["' + "a" * 100 + '"]') == 104
    pair = meter._built([part, part], 1 + 2 * (104 + 1))
    assert meter.size_of(pair) == 211  # remembered by identity, not measured again


def test_sizes_of_scalars_are_their_json_lengths() -> None:
    meter = BudgetMeter(Budget())
    assert [meter.size_of(v) for v in ("abc", None, True, False, 12345, 2.5)] == [
        5, 4, 4, 5, 5, 3,
    ]


def test_the_context_root_is_materialised_once_and_measured_as_a_json_object() -> None:
    meter = BudgetMeter(Budget())
    view = ContextView({"input": {"n": 1}}, {"item": 2})
    plain = meter.plain(view)
    assert plain == {"input": {"n": 1}, "item": 2}
    assert meter.plain(view) is plain
    assert meter.size_of(view) == len('{"input":{"n":1},"item":2}')


def test_the_interpreter_module_still_exports_what_the_scheduler_imports() -> None:
    assert interpreter.Budget is Budget
    assert interpreter.ContextView is ContextView
    assert interpreter.EvaluationSliceExhausted is EvaluationSliceExhausted
    assert interpreter.ExpressionBudgetExceeded is ExpressionBudgetExceeded
    assert interpreter.EvaluationCancelled is EvaluationCancelled
    assert issubclass(interpreter.BudgetedInterpreter, BudgetMeter)
