"""The pure decisions of a node's attempts, table-tested (PROTOCOL.md §5 Recovery): which
failure is retried, what its code is, how long a retry waits, what the events say."""

from __future__ import annotations

import random
from typing import Any

import pytest

from a2e_host.chains.messages import ChainNode, RetryPolicy
from a2e_host.chains.recovery import backoff
from a2e_host.chains.recovery_policy import (
    Report,
    failure_codes,
    is_guarded,
    may_retry,
    progress_data,
    recovery_of,
)
from a2e_host.exceptions import ChainError, ChainLimitExceeded, NodeError, NodeTimeout

RETRY = RetryPolicy()

FAILURES: list[tuple[str, BaseException, tuple[str, str], bool, bool]] = [
    # (what, exception, (own, wire) codes, retried by default, retried when guarded)
    ("a retryable node error", NodeError("x", retryable=True),
     ("chain_node_error", "chain_node_error"), True, False),
    ("a plain node error", NodeError("x"), ("chain_node_error", "chain_node_error"),
     False, False),
    ("a timeout", NodeTimeout("x"), ("timeout", "chain_node_error"), True, False),
    ("a tool's own retryable code", NodeError("x", code="rate_limited", retryable=True),
     ("rate_limited", "chain_node_error"), True, False),
    ("a ceiling that says retryable", ChainLimitExceeded("x", retryable=True),
     ("chain_limit", "chain_limit"), False, False),
    ("a refused input", NodeError("x", code="invalid_input", retryable=True),
     ("invalid_input", "chain_node_error"), False, False),
    ("a sub-chain refused", ChainError("x", code="chain_invalid", retryable=True),
     ("chain_invalid", "chain_node_error"), False, False),
    ("a plain exception", ValueError("x"), ("chain_node_error", "chain_node_error"),
     False, False),
]


@pytest.mark.parametrize(("what", "exc", "codes", "default", "guarded"), FAILURES,
                         ids=[f[0] for f in FAILURES])
def test_which_failures_are_retried(
    what: str, exc: BaseException, codes: tuple[str, str], default: bool, guarded: bool
) -> None:
    assert failure_codes(exc) == codes
    assert may_retry(exc, RETRY, guarded=False) is default
    assert may_retry(exc, RETRY, guarded=True) is guarded


@pytest.mark.parametrize(("retry_on", "exc", "retried"), [
    (["chain_node_error"], NodeError("x"), True),
    (["chain_node_error"], NodeTimeout("x"), True),  # the wire code names it too
    (["timeout"], NodeError("x"), False),
    (["timeout"], NodeTimeout("x"), True),
    (["rate_limited"], NodeError("x", code="rate_limited"), True),
    (["chain_node_error"], NodeError("x", code="invalid_input"), False),
    (["chain_limit"], ChainLimitExceeded("x"), False),
])
def test_retry_on_names_codes_retried_even_for_a_guarded_tool(
    retry_on: list[str], exc: BaseException, retried: bool
) -> None:
    policy = RetryPolicy(retry_on=retry_on)
    assert may_retry(exc, policy, guarded=True) is retried
    assert may_retry(exc, policy, guarded=False) is (retried or may_retry(exc, RETRY,
                                                                          guarded=False))


@pytest.mark.parametrize(("effects", "idempotent", "guarded"), [
    ("none", False, False), ("read", False, False), ("write", False, True),
    ("external", False, True), ("write", True, False), ("external", True, False),
])
def test_a_tool_is_guarded_when_it_has_effects_and_is_not_idempotent(
    effects: str, idempotent: bool, guarded: bool
) -> None:
    assert is_guarded(effects, idempotent) is guarded


@pytest.mark.parametrize(("policy", "waits"), [
    (RetryPolicy(interval=1, backoff_rate=2, max_delay=30, jitter="none"),
     [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]),
    (RetryPolicy(interval=0.1, backoff_rate=1, max_delay=30, jitter="none"), [0.1] * 7),
    (RetryPolicy(interval=0, backoff_rate=2, max_delay=30, jitter="none"), [0.0] * 7),
    (RetryPolicy(interval=5, backoff_rate=2, max_delay=0, jitter="none"), [0.0] * 7),
    (RetryPolicy(interval=0.3, backoff_rate=1.5, max_delay=1, jitter="none"),
     [0.3, 0.45, 0.675, 1.0, 1.0, 1.0, 1.0]),
])
def test_backoff_is_interval_times_rate_to_the_attempt_capped_at_max_delay(
    policy: RetryPolicy, waits: list[float]
) -> None:
    never: Any = None  # no draw without jitter
    assert [backoff(policy, n, never) for n in range(1, 8)] == waits


def test_backoff_stays_capped_at_attempts_whose_exponent_would_overflow() -> None:
    policy = RetryPolicy(interval=1, backoff_rate=10, max_delay=7, jitter="none")
    assert backoff(policy, 10_000, None) == 7.0  # type: ignore[arg-type]


def test_full_jitter_draws_uniformly_below_the_backoff() -> None:
    policy = RetryPolicy(interval=1, backoff_rate=2, max_delay=5)  # jitter "full" by default
    rng = random.Random(7)
    for attempt in range(1, 10):
        high = min(5.0, 2.0 ** (attempt - 1))
        draws = [backoff(policy, attempt, rng.uniform) for _ in range(200)]
        assert all(0.0 <= d <= high for d in draws), (attempt, max(draws))
        assert max(draws) > high * 0.8 and min(draws) < high * 0.2  # spread over the range


def test_a_node_without_recovery_fields_has_no_recovery() -> None:
    node = ChainNode(node_id="a", kind="tool", name="t")
    assert recovery_of(node) is None
    assert recovery_of(node, request_cache=True) is not None
    assert recovery_of(ChainNode(node_id="b", kind="branch"), request_cache=True) is None


def test_progress_and_terminal_data_have_the_documented_keys_in_order() -> None:
    data = progress_data(2, 5, NodeTimeout("slow"), 1.25)
    assert list(data.items()) == [("attempt", 2), ("of", 5), ("error", "slow"),
                                  ("code", "timeout"), ("retry_in_s", 1.25)]
    assert progress_data(1, 1, ValueError("v"), 0.0, "backup")["fallback"] == "backup"
    report = Report("t")
    report.attempts = 1
    report.failed(1, "t", ValueError("v"))
    assert report.data(False) == {
        "attempts": 1,
        "errors": [{"attempt": 1, "tool": "t", "code": "chain_node_error",
                    "error": "ValueError: v"}],
        "fallback_used": False,
    }
    report.cache = "miss"
    assert list(report.data(True)) == ["attempts", "errors", "fallback_used", "tool", "cache"]


def test_an_attempts_error_in_data_is_cut_and_says_how_long_it_was() -> None:
    from a2e_host.chains.recovery_policy import MAX_ATTEMPT_ERROR_CHARS, attempt_error
    from a2e_host.exceptions import NodeError

    long = attempt_error(NodeError("y" * 10_000))
    assert long == "y" * MAX_ATTEMPT_ERROR_CHARS + "… (10,000 characters)"
    assert attempt_error(NodeError("short")) == "short"
