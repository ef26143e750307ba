"""The static checks refuse no chain that can run (PROTOCOL.md §4 static checks): every
example chain, every conformance case's chain that the case expects to run, and every
benchmark workload validate against the tools they are written for."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from a2e_host.chains.messages import ChainRequest, chain_codec
from a2e_host.chains.toolbox import Toolbox
from a2e_host.chains.validation import validate_chain
from a2e_host.config import HostConfig
from a2e_host.exceptions import ChainInvalid, SchemaViolation
from a2e_host.limits import Limits, SessionLimits
from a2e_host.tools import ToolRegistry, load_tools
from conformance.templates import expand
from tests.support import REPO

EXAMPLES = sorted([*REPO.glob("examples/*.json"), *REPO.glob("examples/**/*.json")])
WORKLOADS = sorted(REPO.glob("bench/workloads/*.json"))
CASES = sorted(REPO.glob("conformance/cases/*.jsonl"))
#: Codes a conformance case expects when it expects its chain refused before it runs.
REFUSALS = frozenset({"chain_invalid", "chain_cycle", "chain_limit"})
GRANTED = frozenset({"chains", "skill", "proc"})
LIMITS: dict[str, Any] = msgspec.to_builtins(Limits())


def request_of(body: dict[str, Any]) -> ChainRequest:
    message = chain_codec.decode(msgspec.json.encode({**body, "type": "chain/req"}))
    assert isinstance(message, ChainRequest)
    return message


@pytest.fixture(scope="module")
def toolbox(tmp_path_factory: pytest.TempPathFactory) -> Toolbox:
    """Every first-party pack, and the example hash pack (imported from its folder)."""
    root = str(tmp_path_factory.mktemp("root"))
    config = HostConfig(tools=["conformance", "fs", "text", "json", "bench"], root=root)
    registry = load_tools(config)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPO / "examples" / "hash-pack"))
        import a2e_hashpack

        for tool in a2e_hashpack.PACK.factory(config):
            registry.register(tool)
    return Toolbox(ToolRegistry(list(registry)))


def test_the_corpus_of_valid_chains_is_not_empty() -> None:
    assert {p.name for p in EXAMPLES} >= {"languages.json", "repo-report.json",
                                          "checksums.json"}
    assert len(WORKLOADS) >= 5
    assert sum(1 for _ in conformance_chains()) >= 150


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_chain_validates_without_errors_or_warnings(
    path: Path, toolbox: Toolbox
) -> None:
    plan = validate_chain(request_of(json.loads(path.read_text("utf-8"))), toolbox,
                          SessionLimits(Limits()), granted=GRANTED)
    assert plan.warnings == ()


@pytest.mark.parametrize("path", WORKLOADS, ids=[p.name for p in WORKLOADS])
def test_every_benchmark_workload_validates(path: Path, toolbox: Toolbox) -> None:
    plan = validate_chain(request_of(json.loads(path.read_text("utf-8"))), toolbox,
                          SessionLimits(Limits()), granted=GRANTED)
    assert len(plan.nodes) == len(json.loads(path.read_text("utf-8"))["nodes"])


def conformance_chains() -> Iterator[tuple[str, dict[str, Any], str | None, Any, frozenset[str]]]:
    """Each case's ``chain/req`` with what its ``expect_chain`` expects: ``(case id, body,
    the refusal code it expects before anything runs or None, the handshake's limits,
    the capabilities asked)``, templates filled in as the kit's runner would."""
    for path in CASES:
        case: dict[str, Any] = {}
        sent: dict[str, dict[str, Any]] = {}
        for line in path.read_text("utf-8").splitlines():
            step = json.loads(line)
            if "case" in step:
                case, sent = step, {}
                continue
            if any(n.startswith("proc:") for n in case.get("needs", ())):
                continue  # proc nodes: a host allowing executables, not this toolbox
            variables = {"nonce": "n0", "case": case["case"], "limits": LIMITS,
                         "probe_limits": LIMITS}
            message = step.get("send")
            if isinstance(message, dict) and message.get("type") == "chain/req":
                sent[step.get("as", "")] = expand(message, variables)
            expected = step.get("expect_chain")
            if expected is None or step.get("for") not in sent:
                continue
            handshake = expand(case.get("handshake") or {}, variables)
            handshake = handshake if isinstance(handshake, dict) else {}
            caps = frozenset(handshake.get("agent_caps") or ()) | {"chains"}
            yield (case["case"], sent.pop(step["for"]), refusal_expected(expected),
                   handshake.get("limits"), caps)


def refusal_expected(expected: dict[str, Any]) -> str | None:
    response = expected.get("response") or {}
    error = response.get("error")
    if isinstance(error, dict):
        error = error.get("$partial", error)
    code = error.get("code") if isinstance(error, dict) else None
    if code == "chain_cycle" or (  # a cycle is refused before anything runs (§4)
            code in REFUSALS and (expected.get("events") == [] or response.get("nodes_run") == 0)):
        return str(code)
    return None


def test_no_conformance_chain_expected_to_run_is_refused() -> None:
    toolbox = Toolbox(load_tools(HostConfig(tools=["conformance"])))
    checked = refused = 0
    wrongly: list[str] = []
    for case_id, body, expected, asked, caps in conformance_chains():
        try:
            request = request_of(body)
        except SchemaViolation:
            continue  # a case about schema_violation: it never reaches validation
        checked += 1
        try:
            validate_chain(request, toolbox, SessionLimits(Limits(), asked), granted=caps)
        except ChainInvalid as exc:
            refused += 1
            if exc.code != expected:
                wrongly.append(f"{case_id}: {exc.code} ({exc.message}), expected "
                               f"{expected or 'to run'}")
    assert wrongly == []
    assert checked >= 150 and refused >= 40  # both sides of the rule were exercised
