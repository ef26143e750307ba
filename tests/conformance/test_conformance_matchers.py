"""The conformance kit's matcher language, templates and chain invariants.

Source: conformance/matchers.py, conformance/templates.py, conformance/invariants.py.
"""

from __future__ import annotations

import asyncio

import pytest

from conformance.cases import Case
from conformance.invariants import check_chain, expand_events
from conformance.matchers import MatcherError, match
from conformance.runner import CaseFailure, CaseRun
from conformance.templates import expand, fill_envelope
from conformance.transports import Connection, Frame, _decode

# ---- literals and objects -------------------------------------------------------------


def test_literals_compare_as_json_values():
    assert match(3, 3.0) == []
    assert match(True, 1) == ["$: expected True, got 1"]
    assert match("a", "b") == ["$: expected 'a', got 'b'"]
    assert match(None, None) == []


def test_plain_objects_need_exactly_their_keys():
    assert match({"sum": 3}, {"sum": 3}) == []
    assert match({"sum": 3}, {"sum": 4}) == ["$.sum: expected 3, got 4"]
    assert match({"sum": 3}, {"sum": 3, "x": 1}) == ["$: unexpected keys ['x']"]
    assert match({"sum": 3}, {}) == ["$.sum: missing"]


def test_partial_objects_allow_extra_keys():
    assert match({"$partial": {"a": 1}}, {"a": 1, "b": 2}) == []
    assert match({"$partial": {"a": 1}}, {"b": 2}) == ["$.a: missing"]


def test_absent_and_optional_keys():
    assert match({"$partial": {"a2e": {"$absent": True}}}, {"version": "1.0"}) == []
    assert match({"$partial": {"a2e": {"$absent": True}}}, {"a2e": "1.0"}) == [
        "$.a2e: expected no such key, got '1.0'"]
    assert match({"error": {"$optional": None}}, {}) == []
    assert match({"error": {"$optional": None}}, {"error": None}) == []
    assert match({"error": {"$optional": None}}, {"error": {}}) == [
        "$.error: expected None, got {}"]


def test_lists_match_item_by_item():
    assert match([1, 2], [1, 2]) == []
    assert match([1, 2], [2, 1]) == ["$[0]: expected 1, got 2", "$[1]: expected 2, got 1"]
    assert match([1], [1, 2]) == ["$: expected 1 items, got 2: [1, 2]"]


# ---- scalar operators ---------------------------------------------------------------------


def test_type_operator():
    assert match({"$type": "int"}, 3) == []
    assert match({"$type": "int"}, True) == ["$: expected type int, got True"]
    assert match({"$type": "number"}, 2.5) == []
    assert match({"$type": ["str", "null"]}, None) == []
    with pytest.raises(MatcherError):
        match({"$type": "string"}, "x")


def test_regex_approx_range_len():
    assert match({"$regex": "^[0-9a-f]{8}$"}, "abc123ef") == []
    assert match({"$regex": "^[0-9a-f]{8}$"}, "abc") != []
    assert match({"$regex": "x"}, 5) == ["$: expected a string matching /x/, got 5"]
    assert match({"$approx": 0.75}, 0.5 + 0.25) == []
    assert match({"$approx": 1.0, "tol": 0.1}, 1.05) == []
    assert match({"$approx": 1.0, "tol": 0.01}, 1.05) == ["$: expected 1.0 ± 0.01, got 1.05"]
    assert match({"$range": [250, None]}, 305) == []
    assert match({"$range": [250, 300]}, 305) == ["$: expected a number in [250, 300], got 305"]
    assert match({"$range": [{"$ref": "u"}, None]}, 2.0, {"u": 1.5}) == []
    assert match({"$len": 3}, [1, 2, 3]) == []
    assert match({"$len": {"$range": [1, 2]}}, "abc") == [
        "len($): expected a number in [1, 2], got 3"]


def test_any_one_of_all_of_not():
    assert match({"$any": True}, None) == []
    assert match({"$oneOf": ["", {"$regex": "^r"}]}, "r1") == []
    assert match({"$oneOf": ["a", "b"]}, "c") != []
    assert match({"$allOf": [{"$type": "int"}, {"$range": [0, None]}]}, -1) == [
        "$: expected a number in [0, None], got -1"]
    assert match({"$not": "no-such-capability"}, "chains") == []
    assert match({"$not": "x"}, "x") == ["$: expected not to match 'x', got 'x'"]


# ---- list operators -------------------------------------------------------------------------


def test_unordered_is_a_multiset_match():
    assert match({"$unordered": [1, 2, 2]}, [2, 1, 2]) == []
    assert match({"$unordered": [1, 2, 2]}, [2, 1, 1]) != []
    # needs a real assignment, not greedy: {"$any"} must not steal the only 1
    assert match({"$unordered": [{"$any": True}, 1]}, [1, 5]) == []


def test_contains_and_each():
    assert match({"$contains": [{"$partial": {"capability": "chains"}}]},
                 [{"capability": "tools"}, {"capability": "chains", "enabled": True}]) == []
    assert match({"$contains": [1, 1]}, [1, 2]) != []
    assert match({"$each": {"$type": "str"}}, ["chain/cancel", "x"]) == []
    assert match({"$each": {"$type": "str"}}, ["a", 1]) == ["$[1]: expected type str, got 1"]


def test_seq_with_groups_fixes_order_between_groups_only():
    seq = {"$seq": ["start", {"$group": ["x", "y"]}, "end"]}
    assert match(seq, ["start", "y", "x", "end"]) == []
    assert match(seq, ["y", "start", "x", "end"]) != []
    assert match(seq, ["start", "x", "end"]) != []


def test_has_searches_nested_values():
    details = {"errors": [{"code": "chain_limit", "ceiling": "max_nodes", "scope": "session",
                           "limit": 2, "requested": 3, "message": "too many"}]}
    wanted = {"$partial": {"ceiling": "max_nodes", "scope": "session", "limit": 2,
                           "requested": 3}}
    assert match({"$has": wanted}, details) == []
    assert match({"$has": {"$regex": "too many"}}, details) == []
    assert match({"$has": {"$regex": "ghost"}}, details) != []


def test_ref_and_bind_use_case_variables():
    variables = {"r": {"id": "c1-7"}}
    assert match({"$ref": "r.id"}, "c1-7", variables) == []
    assert match({"$ref": "r.id"}, "other", variables) == [
        "$: expected 'c1-7' (= r.id), got 'other'"]
    assert match({"uptime": {"$bind": "u1"}}, {"uptime": 0.5}, variables) == []
    assert variables["u1"] == 0.5


def test_literal_escapes_operator_objects():
    assert match({"$literal": {"$any": True}}, {"$any": True}) == []
    assert match({"$literal": {"$any": True}}, 5) != []


def test_unknown_operator_is_a_case_bug():
    with pytest.raises(MatcherError):
        match({"$anything": 1}, 1)


# ---- templates -----------------------------------------------------------------------------


def test_templates_expand_refs_repeats_and_sums():
    variables = {"probe_limits": {"max_timeout": 3600}, "session_id": "s1"}
    sent = expand({"timeout": {"$add": [{"$ref": "probe_limits.max_timeout"}, 1]},
                   "pad": {"$repeat": ["x", 3]}, "keep": {"$literal": {"$ref": "no"}}},
                  variables)
    assert sent == {"timeout": 3601, "pad": "xxx", "keep": {"$ref": "no"}}


def test_fill_envelope_adds_what_a_client_library_adds():
    filled = fill_envelope({"type": "chain/req", "nodes": []},
                           {"nonce": "n1", "session_id": "s1"})
    assert filled["version"] == "1.0"
    assert filled["session_id"] == "s1"
    assert filled["id"].startswith("n1-")
    assert isinstance(filled["ts"], float)
    alias = fill_envelope({"type": "ping", "a2e": "1.0"}, {})
    assert "version" not in alias
    assert fill_envelope([1], {}) == [1]


# ---- chain transcript invariants -------------------------------------------------------------


_IDS = iter(range(10**9))


def _envelope(kind: str) -> dict:
    return {"type": kind, "id": f"m{next(_IDS)}", "version": "1.0", "ts": 1000.0}


def _event(seq, node_id, phase, **extra):
    return {**_envelope("chain/event"), "req_id": "r", "seq": seq, "node_id": node_id,
            "phase": phase, **({"output": None} if phase == "done" else {}),
            **({"error": "failed"} if phase == "error" else {}), **extra}


def _resp(**fields):
    return {**_envelope("chain/resp"), "req_id": "r", "chain_id": "c", "success": True,
            "outputs": {}, "final_output": None, "duration_ms": 5, "nodes_run": 0,
            "error": None, **fields}


def test_a_conforming_linear_transcript_passes():
    messages = [_event(1, "a", "start"), _event(2, "a", "done", output={"v": 1}),
                _event(3, "b", "skip"), _resp(outputs={"a": {"v": 1}}, nodes_run=1)]
    spec = {"events": ["a:start", {"node_id": "a", "phase": "done", "output": {"v": 1}},
                       "b:skip"],
            "order": [["a:done", "b:skip"]], "response": {"success": True}}
    assert check_chain(messages, [""] * 4, spec, {}) == []


def test_invariants_catch_seq_gaps_double_terminals_and_counts():
    messages = [_event(1, "a", "start"), _event(3, "a", "done"), _event(4, "a", "error"),
                _resp(outputs={"a": 1, "zz": 2}, nodes_run=2)]
    problems = check_chain(messages, [""] * 4, {}, {})
    assert any(p.startswith("CHAIN-EVT-SEQ") for p in problems)
    assert any(p.startswith("CHAIN-EVT-LIFECYCLE") for p in problems)
    assert any(p.startswith("CHAIN-RESP-OUTPUTS") for p in problems)
    assert any(p.startswith("CHAIN-RESP-NODES-RUN") for p in problems)


def test_progress_events_of_a_node_s_attempts_fit_between_its_start_and_its_end():
    # PROTOCOL.md §5 Recovery: attempts are kind "progress" events in phase start
    progress = {"kind": "progress", "data": {"attempt": 1, "of": 2}}
    messages = [_event(1, "a", "start", kind="status"), _event(2, "a", "start", **progress),
                _event(3, "a", "done", output=1), _resp(outputs={"a": 1}, nodes_run=1)]
    spec = {"order": [["a:start", "a:done"]], "in_flight": {"pattern": "^a$", "max": 1}}
    assert check_chain(messages, [""] * 4, spec, {}) == []


def test_a_progress_event_outside_its_node_s_run_breaks_the_lifecycle():
    progress = {"kind": "progress", "data": {}}
    before = [_event(1, "a", "start", **progress), _event(2, "a", "start"),
              _event(3, "a", "done", output=1), _resp(outputs={"a": 1}, nodes_run=1)]
    after = [_event(1, "a", "start"), _event(2, "a", "error"),
             _event(3, "a", "start", **progress), _resp(success=False, error={"code": "x"},
                                                        nodes_run=1)]
    wrong_phase = [_event(1, "a", "start"), _event(2, "a", "done", **progress),
                   _event(3, "a", "done", output=1), _resp(outputs={"a": 1}, nodes_run=1)]
    assert check_chain(before, [""] * 4, {}, {}) == [
        "CHAIN-EVT-LIFECYCLE: node 'a' had a progress event with phase 'start' after phases []"]
    assert check_chain(after, [""] * 4, {}, {}) == [
        "CHAIN-EVT-LIFECYCLE: node 'a' had a progress event with phase 'start' after phases "
        "['start', 'error']"]
    assert check_chain(wrong_phase, [""] * 4, {}, {}) == [
        "CHAIN-EVT-LIFECYCLE: node 'a' had a progress event with phase 'done' after phases "
        "['start']"]
    # a second start of kind status is a second start, not an attempt
    twice = [_event(1, "a", "start"), _event(2, "a", "start", kind="status"),
             _event(3, "a", "done", output=1), _resp(outputs={"a": 1}, nodes_run=1)]
    assert check_chain(twice, [""] * 4, {}, {}) == [
        "CHAIN-EVT-LIFECYCLE: node 'a' had phases ['start', 'start', 'done']",
        "SPEC-EVENT-PHASES: node 'a' had phases ['start', 'start', 'done']"]


def test_the_spec_s_own_invariants_are_looser_than_protocol_md() -> None:
    # seq from 5 rising by 2 is a monotonic sequence (chains spec l.61), not PROTOCOL.md's
    request = {"type": "chain/req", "id": "r", "nodes": [{"node_id": "a"}, {"node_id": "b"}]}
    messages = [_event(5, "a", "start"), _event(7, "a", "done", output=1),
                _resp(outputs={"a": 1, "b": None}, nodes_run=2)]
    problems = check_chain(messages, [""] * 3, {}, {}, request)
    assert [p.split(":")[0] for p in problems] == [
        "CHAIN-EVT-SEQ", "CHAIN-RESP-OUTPUTS", "CHAIN-RESP-NODES-RUN"]


def test_an_early_answer_dropping_the_work_done_breaks_the_spec_invariants() -> None:
    # what the public SDK's host answers on a timeout: outputs {}, nodes_run 0, 0 ms
    request = {"type": "chain/req", "id": "r", "nodes": [{"node_id": "a"}, {"node_id": "s"}]}
    a_done = _event(2, "a", "done", output={"x": 1})
    s_done = {**_event(4, "s", "done", output=2), "ts": 1002.5}
    messages = [_event(1, "a", "start"), a_done, _event(3, "s", "start"), s_done,
                _resp(success=False, error={"code": "timeout"}, duration_ms=0)]
    problems = check_chain(messages, [""] * 5, {}, {}, request)
    spec = sorted(p.split(":")[0] for p in problems if p.startswith("SPEC-"))
    assert spec == ["SPEC-DURATION", "SPEC-NODES-RUN", "SPEC-OUTPUTS"]
    assert "missing from outputs: ['a', 's']" in problems[-3]


def test_seq_always_zero_is_reported_and_the_events_re_sequenced_for_the_rest() -> None:
    messages = [_event(0, "a", "start"), _event(0, "a", "done", output=1),
                _resp(outputs={"a": 1}, nodes_run=1)]
    notes: list[str] = []
    spec = {"events": [{"node_id": "a", "seq": 1}, {"node_id": "a", "seq": 2}]}
    problems = check_chain(messages, [""] * 3, spec, {}, None, notes)
    assert [p.split(":")[0] for p in problems] == ["CHAIN-EVT-SEQ", "SPEC-EVENT-SEQ"]
    assert notes and "re-sequenced" in notes[0]


def test_map_items_are_not_declared_nodes():
    messages = [_event(1, "m", "start"), _event(2, "t[0]", "start"), _event(3, "t[0]", "done"),
                _event(4, "m", "done"), _resp(outputs={"m": [1]}, nodes_run=1)]
    assert check_chain(messages, [""] * 5, {}, {}) == []


def test_outputs_may_be_empty_only_when_the_request_opted_out_of_them():
    # PROTOCOL.md §5 Payload opt-ins: include_outputs false sends outputs {}
    messages = [_event(1, "a", "start"), _event(2, "a", "done", output={"v": 1}),
                _resp(outputs={}, nodes_run=1)]
    opted_out = {"type": "chain/req", "id": "r", "include_outputs": False}
    assert check_chain(messages, [""] * 3, {}, {}, opted_out) == []
    for request in (None, {"type": "chain/req", "id": "r"},
                    {"type": "chain/req", "id": "r", "include_outputs": True}):
        assert check_chain(messages, [""] * 3, {}, {}, request) == [
            "CHAIN-RESP-OUTPUTS: outputs keys [] != nodes with a done event ['a']"]


def test_success_and_error_must_agree():
    assert check_chain([_resp(success=True, error={"code": "x"})], [""], {}, {}) == [
        "CHAIN-RESP-ERROR: success is true but error is {'code': 'x'}"]
    assert check_chain([_resp(success=False, error=None)], [""], {}, {}) == [
        "CHAIN-RESP-ERROR: success is false but error is None"]


def test_order_in_flight_and_raw_checks():
    messages = [_event(1, "t[0]", "start"), _event(2, "t[1]", "start"),
                _event(3, "t[0]", "done"), _event(4, "t[1]", "done"), _resp()]
    assert check_chain(messages, [""] * 5, {"in_flight": {"pattern": r"^t\[", "min_peak": 2}},
                       {}) == []
    assert check_chain(messages, [""] * 5, {"in_flight": {"pattern": r"^t\[", "max": 1}}, {})
    assert check_chain(messages, [""] * 5, {"order": [["t[1]:done", "t[0]:start"]]}, {})
    assert check_chain(messages, ["a\u2028b"] + [""] * 4, {"raw_excludes": ["\u2028"]}, {})


def test_event_shorthand_expands_inside_list_operators():
    assert expand_events({"$unordered": ["a:start"]}) == {
        "$unordered": [{"$partial": {"node_id": "a", "phase": "start"}}]}
    assert expand_events({"$seq": [{"$group": ["t[0]:done"]}]}) == {
        "$seq": [{"$group": [{"$partial": {"node_id": "t[0]", "phase": "done"}}]}]}


def test_frames_are_decoded_strictly():
    assert _decode('{"type": "pong"}').message == {"type": "pong"}
    assert _decode('{"x": NaN}').message is None
    assert _decode("[1]").fault == "not a JSON object"


# ---- the step interpreter, against a scripted in-memory peer ----------------------------------


class ScriptedConnection(Connection):
    """Answers each sent ping with a pong, after an unrelated chain event."""

    kind = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []
        self.replies = 0

    async def send_text(self, text: str) -> None:
        import json

        self.sent.append(text)
        message = json.loads(text)
        for reply in ({"type": "chain/event", "req_id": "other", "seq": 1},
                      {"type": "pong", "req_id": message["id"], "uptime_seconds": 1.0}):
            self.replies += 1
            raw = json.dumps({"id": f"h{self.replies}", "version": "1.0", "ts": 1.0, **reply})
            self._frames.put_nowait(Frame(raw, json.loads(raw)))

    async def send_bytes(self, data: bytes) -> None:
        await self.send_text(data.decode())

    def closed_code(self) -> int | None:
        return None

    async def close_sending(self) -> None:
        self._frames.put_nowait(None)

    async def aclose(self) -> None:
        return None


def _case(*steps):
    return Case(id="t", requires=("CORE-PING",), doc="", steps=steps, source="test",
                handshake=None)


def test_expect_where_picks_the_matching_message_and_leftovers_fail_the_case():
    case = _case({"send": {"type": "ping"}, "as": "p"},
                 {"expect": {"type": "pong", "req_id": {"$ref": "p.id"}},
                  "where": {"type": "pong"}})
    with pytest.raises(CaseFailure, match="unexpected messages at the end"):
        asyncio.run(CaseRun(case, ScriptedConnection(), {}).run(None))


def test_expect_for_a_request_ignores_other_requests_messages():
    case = _case({"send": {"type": "ping"}, "as": "p"},
                 {"expect": {"type": "pong"}, "for": "p"},
                 {"expect": {"type": "chain/event", "req_id": "other"}})
    asyncio.run(CaseRun(case, ScriptedConnection(), {}).run(None))


def test_a_reused_message_id_fails_the_case():
    run = CaseRun(_case({"comment": "none"}), ScriptedConnection(), {})
    first = Frame('{"type":"pong","id":"same","version":"1.0","ts":1}',
                  {"type": "pong", "id": "same", "version": "1.0", "ts": 1})
    run._check_frame(first)
    run._check_frame(first)  # one defect: a finding, the case goes on
    assert [rid for rid, _ in run.findings] == ["FRAME-MESSAGE-ID"]
    named = Case(id="t", requires=("FRAME-MESSAGE-ID",), doc="", steps=(), source="test",
                 handshake=None)
    run = CaseRun(named, ScriptedConnection(), {})
    run._check_frame(first)
    with pytest.raises(CaseFailure, match="FRAME-MESSAGE-ID"):
        run._check_frame(first)


def test_expect_next_message_reports_the_mismatch():
    case = _case({"send": {"type": "ping"}}, {"expect": {"type": "pong"}})
    with pytest.raises(CaseFailure) as failure:
        asyncio.run(CaseRun(case, ScriptedConnection(), {}).run(None))
    assert "$msg.type: expected 'pong', got 'chain/event'" in failure.value.problems
