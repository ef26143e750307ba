"""``chain/resp.error``: one typed ChainFailure, made in a2e_host.errors (PROTOCOL.md §5).

Also the exceptions' own ``req_id`` / ``capability_name`` fields, which the wire ``error``
reads without ``getattr`` (PROTOCOL.md §2).
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import structlog

from a2e_host.chains.messages import ChainResponse, chain_codec
from a2e_host.codec import encode_message
from a2e_host.errors import (
    UNENCODABLE,
    ChainFailure,
    cancelled_failure,
    chain_failure_of,
    error_message_of,
    failure_message_of,
    sendable_details,
    timeout_failure,
)
from a2e_host.exceptions import (
    Busy,
    CapabilityMissing,
    ChainError,
    ChainInvalid,
    ChainLimitExceeded,
    NodeError,
    NodeTimeout,
    SchemaViolation,
)

LIMIT = {"ceiling": "max_output_bytes", "scope": "host", "limit": 10, "requested": 11}

# (what the node raised, code, message, retryable, details) — node_id is always the node's
NODE_FAILURES: list[tuple[BaseException, str, str, bool, dict[str, Any]]] = [
    (NodeError("read broke", details={"field": "x"}), "chain_node_error", "read broke",
     False, {"field": "x"}),
    (ChainLimitExceeded("too big", node_id="read", details=LIMIT), "chain_limit", "too big",
     False, LIMIT),
    (NodeTimeout("tool 'nap' timed out"), "chain_node_error", "tool 'nap' timed out", True, {}),
    # a skill whose sub-chain is invalid: the node failed, the request was valid
    (ChainInvalid("skill 's' is invalid", details={"errors": []}), "chain_node_error",
     "skill 's' is invalid", False, {"errors": []}),
    (ChainError("skill 's' failed: timed out", code="timeout"), "chain_node_error",
     "skill 's' failed: timed out", False, {}),
    (ValueError("bad value"), "chain_node_error", "ValueError: bad value", False, {}),
    (KeyError("k"), "chain_node_error", "KeyError: 'k'", False, {}),
]


@pytest.mark.parametrize(("exc", "code", "message", "retryable", "details"), NODE_FAILURES,
                         ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else "")
def test_a_node_failure_is_chain_node_error_unless_a_ceiling_refused(
    exc: BaseException, code: str, message: str, retryable: bool, details: dict[str, Any]
) -> None:
    assert chain_failure_of(exc, node_id="read") == ChainFailure(
        code=code, message=message, node_id="read", retryable=retryable, details=details
    )


def test_a_chain_level_failure_keeps_the_exception_s_code_node_and_details() -> None:
    exc = ChainInvalid("chain is invalid (1 problem)", code="chain_cycle", node_id="a",
                       details={"errors": [{"code": "chain_cycle"}]})
    assert chain_failure_of(exc) == ChainFailure(
        code="chain_cycle", message="chain is invalid (1 problem)", node_id="a",
        retryable=False, details={"errors": [{"code": "chain_cycle"}]},
    )


def test_a_chain_level_bug_is_runtime_error_naming_only_the_exception_type() -> None:
    failure = chain_failure_of(AttributeError("'NoneType' object has no attribute 'x'"))
    assert (failure.code, failure.node_id, failure.retryable, failure.details) == (
        "runtime_error", "", False, {}
    )
    assert failure.message == (
        "the host failed while running the chain (AttributeError); this is a fault in the "
        "host, not in the chain"
    )
    assert "NoneType" not in failure.message


def test_the_failure_copies_details_so_the_exception_cannot_change_it_later() -> None:
    exc = NodeError("x", details={"index": 1})
    failure = chain_failure_of(exc, node_id="m")
    exc.details["index"] = 2
    assert failure.details == {"index": 1}


def test_timeout_and_cancelled_failures_read_as_before() -> None:
    assert timeout_failure(2.5) == ChainFailure(
        code="timeout", message="the chain did not finish within its timeout of 2.5 s",
        node_id="", retryable=True, details={"timeout": 2.5},
    )
    assert cancelled_failure() == ChainFailure(
        code="cancelled", message="the chain was cancelled before it finished"
    )
    assert cancelled_failure("interrupted").message == "interrupted"


@pytest.mark.parametrize(
    ("exc", "text"),
    [(NodeError("a sentence"), "a sentence"), (ValueError("v"), "ValueError: v"),
     (RuntimeError(), "RuntimeError: ")],
)
def test_failure_message_is_the_chain_error_s_own_or_type_and_text(
    exc: BaseException, text: str
) -> None:
    assert failure_message_of(exc) == text


def test_chain_resp_error_encodes_to_the_five_keys_in_the_seed_order() -> None:
    response = ChainResponse(
        id="i", ts=1.0, req_id="r", chain_id="c", success=False,
        error=ChainFailure(code="chain_limit", message="too big", node_id="n",
                           details={"ceiling": "max_output_bytes", "index": 3}),
    )
    assert encode_message(response) == (
        b'{"type":"chain/resp","id":"i","version":"1.0","ts":1.0,"req_id":"r","chain_id":"c",'
        b'"success":false,"outputs":{},"final_output":null,"duration_ms":0,"nodes_run":0,'
        b'"error":{"code":"chain_limit","message":"too big","node_id":"n","retryable":false,'
        b'"details":{"ceiling":"max_output_bytes","index":3}}}'
    )


def test_a_client_decoding_chain_resp_reads_the_error_as_fields() -> None:
    decoded = chain_codec.decode(
        b'{"type":"chain/resp","success":false,"error":{"code":"timeout","message":"late",'
        b'"node_id":"","retryable":true,"details":{"timeout":1}}}'
    )
    assert isinstance(decoded, ChainResponse) and decoded.error is not None
    assert (decoded.error.code, decoded.error.retryable, decoded.error.details) == (
        "timeout", True, {"timeout": 1}
    )


def test_an_error_with_only_a_code_decodes_with_the_other_fields_at_their_defaults() -> None:
    decoded = chain_codec.decode(
        b'{"type":"chain/resp","error":{"code":"chain_node_error","extra":1}}'
    )
    assert isinstance(decoded, ChainResponse)
    assert decoded.error == ChainFailure(code="chain_node_error")


def test_a_failure_is_frozen() -> None:
    failure = ChainFailure(code="cancelled")
    with pytest.raises(AttributeError):
        failure.code = "timeout"  # type: ignore[misc]
    assert msgspec.structs.replace(failure, message="m").message == "m"


# ── the exceptions' own wire fields ─────────────────────────────────────────


def test_remote_protocol_errors_carry_req_id_and_capability_name_as_fields() -> None:
    err = CapabilityMissing("needs chains", capability_name="chains", req_id="r7")
    assert (err.req_id, err.capability_name, err.code) == ("r7", "chains", "capability_missing")
    plain = SchemaViolation("bad", detail={"path": "$.nodes"})
    assert (plain.req_id, plain.capability_name, plain.detail) == ("", "", {"path": "$.nodes"})
    assert Busy("busy").retryable is True and Busy("x", retryable=False).retryable is False


def test_the_wire_error_prefers_the_exception_s_own_id_and_capability() -> None:
    log = structlog.get_logger("test")
    own = error_message_of(
        CapabilityMissing("needs chains", capability_name="chains", req_id="own"),
        req_id="handled", log=log, capability_name="other",
    )
    assert (own.req_id, own.capability_name, own.code) == ("own", "chains", "capability_missing")
    fallback = error_message_of(SchemaViolation("bad"), req_id="handled", log=log,
                                capability_name="chains")
    assert (fallback.req_id, fallback.capability_name) == ("handled", "chains")


# ── facts the encoder cannot write ──────────────────────────────────────────


class Opaque:
    """Something a tool or plugin put in its error's facts by mistake."""


def test_facts_the_encoder_cannot_write_are_left_out_and_named() -> None:
    facts = {"path": "a.txt", "when": Opaque(), "n": 10**5000, 3: "x", "deep": [1, (2,)]}
    assert sendable_details(facts) == {
        "path": "a.txt", "deep": [1, (2,)], UNENCODABLE: ["when", "n", "<int key>"]}
    assert sendable_details({"a": 1, "b": [None, 1.5]}) == {"a": 1, "b": [None, 1.5]}
    assert sendable_details({}) == {}
    nested = current = []  # type: ignore[var-annotated]
    for _ in range(5000):  # past the encoder's nesting limit
        current.append([])
        current = current[0]
    assert sendable_details({"ok": True, "nested": nested}) == {
        "ok": True, UNENCODABLE: ["nested"]}


def test_a_node_failure_with_facts_the_encoder_cannot_write_still_encodes() -> None:
    failure = chain_failure_of(NodeError("odd", details={"when": Opaque(), "k": 1}),
                               node_id="a")
    assert (failure.code, failure.node_id, failure.details) == (
        "chain_node_error", "a", {"k": 1, UNENCODABLE: ["when"]})
    response = ChainResponse(req_id="r", success=False, error=failure)
    decoded = chain_codec.decode(encode_message(response))
    assert isinstance(decoded, ChainResponse) and decoded.error == failure


def test_a_wire_error_with_facts_the_encoder_cannot_write_still_encodes() -> None:
    error = error_message_of(SchemaViolation("bad", detail={"path": "$.x", "v": Opaque()}),
                             req_id="r", log=structlog.get_logger("test"))
    assert error.detail == {"path": "$.x", UNENCODABLE: ["v"]}
    assert b'"unencodable":["v"]' in encode_message(error)
