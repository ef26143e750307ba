"""The recovery fields are checked before anything runs (PROTOCOL.md §4 Validation, §5
Recovery, §6 ``max_attempts``): every problem names its node and field."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from a2e_host.chains.messages import ChainNode, ChainRequest, RetryPolicy
from a2e_host.chains.recovery_policy import Recovery
from a2e_host.chains.validation import validate_chain
from a2e_host.exceptions import ChainInvalid
from a2e_host.limits import Limits, SessionLimits
from tests.support.chains import ALL_CAPS, FakeCatalog


def nodes_of(*nodes: dict[str, Any]) -> list[ChainNode]:
    return [msgspec.convert({"kind": "tool", "name": "echo", **n}, ChainNode) for n in nodes]


def problems(*nodes: dict[str, Any], asked: dict[str, int] | None = None,
             **fields: Any) -> list[tuple[str, str, str, str]]:
    request = ChainRequest(nodes=nodes_of(*nodes), entry_node=nodes[0]["node_id"], **fields)
    with pytest.raises(ChainInvalid) as info:
        validate_chain(request, FakeCatalog(), SessionLimits(Limits(), asked),
                       granted=ALL_CAPS)
    return [(p["code"], p["node_id"], p["field"], p["message"])
            for p in info.value.details["errors"]]


def test_a_fallback_must_be_a_registered_tool_other_than_the_node_s_own() -> None:
    assert problems({"node_id": "a", "fallback": "ad"}) == [
        ("chain_invalid", "a", "fallback",
         "fallback names 'ad', which is not a registered tool; did you mean 'add'?")]
    assert problems({"node_id": "a", "fallback": "echo"}) == [
        ("chain_invalid", "a", "fallback", "fallback names the node's own tool 'echo'")]


@pytest.mark.parametrize(("kind", "extra"), [
    ("skill", {"name": "summarize"}),
    ("branch", {"name": "", "condition": "`true`", "true_node": "b"}),
    ("map", {"name": "", "items_path": "input.xs", "map_node": "b"}),
])
def test_a_fallback_is_only_for_tool_nodes_and_retry_not_for_skills_or_control_kinds(
    kind: str, extra: dict[str, Any]
) -> None:
    found = problems({"node_id": "a", "kind": kind, "fallback": "add", "retry": {}, **extra},
                     {"node_id": "b"})
    assert ("chain_invalid", "a", "fallback",
            f"fallback is set on a {kind} node; only tool nodes take it") in found
    assert ("chain_invalid", "a", "retry",
            f"retry is set on a {kind} node; only tool or proc nodes take it") in found


def test_timeout_is_refused_on_control_kinds_and_taken_by_skills() -> None:
    assert problems({"node_id": "a", "kind": "branch", "name": "", "condition": "`true`",
                     "true_node": "b", "timeout": 2.0}, {"node_id": "b"}) == [
        ("chain_invalid", "a", "timeout",
         "timeout is set on a branch node; only tool, skill or proc nodes take it")]
    request = ChainRequest(nodes=nodes_of({"node_id": "a", "kind": "skill",
                                           "name": "summarize", "timeout": 2.0}),
                           entry_node="a")
    plan = validate_chain(request, FakeCatalog(), SessionLimits(Limits()), granted=ALL_CAPS)
    assert plan.nodes[0].recovery == Recovery(retry=None, max_attempts=1, timeout=2.0,
                                              fallback="", cache=False)


@pytest.mark.parametrize(("timeout", "message"), [
    (0, "timeout must be positive seconds, got 0.0"),
    (-1.5, "timeout must be positive seconds, got -1.5"),
    (float("inf"), "timeout must be positive seconds, got inf"),
    (61, "timeout 61 s is over the chain's timeout of 60 s"),
])
def test_a_node_timeout_must_be_positive_and_within_the_chain_s(
    timeout: float, message: str
) -> None:
    assert problems({"node_id": "a", "timeout": timeout}, timeout=60) == [
        ("chain_invalid", "a", "timeout", message)]


def test_a_node_timeout_is_held_to_the_default_chain_timeout_under_a_low_max_timeout() -> None:
    assert problems({"node_id": "a", "timeout": 30}, asked={"max_timeout": 20}) == [
        ("chain_invalid", "a", "timeout", "timeout 30 s is over the chain's timeout of 20 s")]


@pytest.mark.parametrize(("retry", "field", "message"), [
    ({"max_attempts": 0}, "retry.max_attempts", "retry.max_attempts must be at least 1, got 0"),
    ({"interval": -1}, "retry.interval", "retry.interval must be seconds >= 0, got -1.0"),
    ({"max_delay": float("nan")}, "retry.max_delay",
     "retry.max_delay must be seconds >= 0, got nan"),
    ({"backoff_rate": 0.5}, "retry.backoff_rate",
     "retry.backoff_rate must be a factor >= 1, got 0.5"),
    ({"jitter": "half"}, "retry.jitter", "retry.jitter must be 'full' or 'none', got 'half'"),
    ({"retry_on": ["timeout", ""]}, "retry.retry_on[1]", "retry.retry_on holds an empty code"),
    ({"retry_on": ["chain_limit"]}, "retry.retry_on[0]",
     "retry.retry_on names 'chain_limit', which is never retried (the same call fails the "
     "same way again)"),
    ({"retry_on": ["invalid_input"]}, "retry.retry_on[0]",
     "retry.retry_on names 'invalid_input', which is never retried (the same call fails the "
     "same way again)"),
])
def test_a_retry_policy_that_cannot_be_honoured_is_refused(
    retry: dict[str, Any], field: str, message: str
) -> None:
    assert problems({"node_id": "a", "retry": retry}) == [("chain_invalid", "a", field, message)]


def test_max_attempts_is_a_ceiling_at_host_and_session_scope() -> None:
    request = ChainRequest(nodes=nodes_of({"node_id": "a", "retry": {"max_attempts": 11}}),
                           entry_node="a")
    with pytest.raises(ChainInvalid) as info:
        validate_chain(request, FakeCatalog(), SessionLimits(Limits()), granted=ALL_CAPS)
    assert info.value.code == "chain_limit"
    details = info.value.details
    assert {k: details[k] for k in ("ceiling", "scope", "limit", "requested")} == {
        "ceiling": "max_attempts", "scope": "host", "limit": 10, "requested": 11}
    assert details["errors"][0]["node_id"] == "a"
    assert details["errors"][0]["field"] == "retry.max_attempts"
    assert details["errors"][0]["hint"] == "ask for at most 10 attempts"
    found = problems({"node_id": "a", "retry": {"max_attempts": 4}}, asked={"max_attempts": 3})
    assert found == [("chain_limit", "a", "retry.max_attempts",
                      "max_attempts is 3 at session scope, but 4 was asked in node 'a'")]
    request = ChainRequest(nodes=nodes_of({"node_id": "a", "retry": {"max_attempts": 3}}),
                           entry_node="a")
    plan = validate_chain(request, FakeCatalog(), SessionLimits(Limits(), {"max_attempts": 3}),
                          granted=ALL_CAPS)
    assert plan.nodes[0].recovery is not None and plan.nodes[0].recovery.max_attempts == 3


def test_every_recovery_problem_of_a_chain_is_reported_at_once() -> None:
    found = problems({"node_id": "a", "fallback": "nope", "timeout": 0, "next_node": "b"},
                     {"node_id": "b", "retry": {"max_attempts": 0, "jitter": "x"}})
    assert [(node, field) for _, node, field, _ in found] == [
        ("a", "timeout"), ("a", "fallback"), ("b", "retry.max_attempts"), ("b", "retry.jitter")]


def test_an_unknown_retry_field_is_a_schema_violation_naming_its_path() -> None:
    from a2e_host.chains.messages import chain_codec
    from a2e_host.exceptions import SchemaViolation

    frame = (b'{"type":"chain/req","id":"r","nodes":[{"node_id":"a","kind":"tool",'
             b'"name":"echo","retry":{"max_attempt":3}}],"entry_node":"a"}')
    with pytest.raises(SchemaViolation) as info:
        chain_codec.decode(frame)
    assert "max_attempt" in info.value.message
    assert info.value.detail["path"] == "$.nodes[0].retry"


def test_a_plan_reads_the_recovery_fields_once_and_none_without_them() -> None:
    request = ChainRequest(
        nodes=nodes_of({"node_id": "a", "next_node": "b"},
                       {"node_id": "b", "retry": {"max_attempts": 2}, "fallback": "add",
                        "next_node": "c"},
                       {"node_id": "c", "cache": True, "next_node": "m"},
                       {"node_id": "m", "kind": "map", "name": "", "items_path": "input.xs",
                        "map_node": "t"},
                       {"node_id": "t"}),
        entry_node="a",
    )
    plan = validate_chain(request, FakeCatalog(), SessionLimits(Limits()), granted=ALL_CAPS)
    assert [p.recovery for p in plan.nodes] == [
        None,
        Recovery(retry=RetryPolicy(max_attempts=2), max_attempts=2, timeout=None,
                 fallback="add", cache=False),
        Recovery(retry=None, max_attempts=1, timeout=None, fallback="", cache=True),
        None,
        None,
    ]
    cached = validate_chain(msgspec.structs.replace(request, cache=True), FakeCatalog(),
                            SessionLimits(Limits()), granted=ALL_CAPS)
    # the request's cache reaches every tool node, and only tool nodes
    assert [p.recovery is not None and p.recovery.cache for p in cached.nodes] == [
        True, True, True, False, True]
