"""A tool node's ``fallback`` in the static checks (PROTOCOL.md §4 static checks, §5
Recovery): the fallback is held to the node's input, and the node's output is typed as
either tool's, so downstream checks neither refuse a chain that works through the fallback
nor miss a read both tools fail."""

from __future__ import annotations

from typing import Any

import pytest

from a2e_host.chains.catalog import Signature
from a2e_host.chains.validation import ChainPlan
from tests.support.chains import problems, refusal, validate
from tests.support.signatures import SignedCatalog, obj

INTEGER: dict[str, Any] = {"type": "integer"}
STRING: dict[str, Any] = {"type": "string"}
BOOLEAN: dict[str, Any] = {"type": "boolean"}

SIGNATURES = {
    "count_up": Signature(obj(("n",), n=INTEGER), obj(("n",), n=INTEGER)),
    "named": Signature(obj(("n",), n=STRING), obj(("name",), name=STRING)),
    "loose_named": Signature(obj(("n",), n=STRING), obj(("name",), name=STRING),
                             input_enforced=False, required_enforced=False),
    "reader": Signature(obj(("path",), path=STRING),
                        obj(("text", "size"), text=STRING, size=INTEGER)),
    "prober": Signature(obj(("path",), path=STRING),
                        obj(("size", "exists"), size=INTEGER, exists=BOOLEAN)),
    "numbered": Signature(obj(("path",), path=STRING), obj(("text",), text=INTEGER)),
    "mirror": Signature(obj(("path",), path=STRING), obj(("path",), path=STRING)),
    "opaque": Signature(obj(("path",), path=STRING), True, output_enforced=False),
    "shout": Signature(obj(("text",), text=STRING), obj(("text",), text=STRING)),
    "sized": Signature(obj(("size",), size=INTEGER), obj(("ok",), ok=BOOLEAN)),
}


def catalog() -> SignedCatalog:
    return SignedCatalog(SIGNATURES)


def check(*nodes: dict[str, Any]) -> ChainPlan:
    return validate(list(nodes), nodes[0]["node_id"], catalog=catalog())


def refused(*nodes: dict[str, Any]) -> list[dict[str, Any]]:
    return problems(refusal(list(nodes), nodes[0]["node_id"], catalog=catalog()))


def read_then(fallback: str | None, primary: str, **downstream: Any) -> list[dict[str, Any]]:
    first: dict[str, Any] = {"node_id": "r", "name": primary, "input": {"path": "a.txt"},
                             "next_node": "d"}
    if fallback is not None:
        first["fallback"] = fallback
    return [first, {"node_id": "d", **downstream}]


# ── the fallback's input ──


def test_a_fallback_whose_schema_refuses_the_static_input_is_refused_at_field_fallback() -> None:
    found = refused({"node_id": "a", "name": "count_up", "input": {"n": 3},
                     "fallback": "named"})
    assert found == [{
        "code": "chain_invalid", "node_id": "a", "field": "fallback",
        "message": "input field 'n' of fallback tool 'named' must be a string, but input "
                   "gives integer 3",
        "hint": "name a fallback tool that takes this node's input, or change input.n to a "
                "string",
        "expected": "string", "inferred": "integer 3",
    }]


def test_a_fallback_missing_a_required_field_is_refused_naming_the_fallback() -> None:
    found = refused({"node_id": "a", "name": "reader", "input": {"path": "a.txt"},
                     "fallback": "shout"})
    assert [(p["code"], p["field"], p["message"], p["expected"], p["inferred"])
            for p in found] == [
        ("chain_invalid", "fallback", "fallback tool 'shout' requires input field 'text', "
         "which neither input nor input_map gives", "string", "nothing"),
    ]


def test_a_mapped_input_the_fallback_cannot_take_is_refused_with_both_types() -> None:
    found = refused(
        {"node_id": "r", "name": "reader", "input": {"path": "a.txt"}, "next_node": "c"},
        {"node_id": "c", "name": "count_up", "input_map": {"n": "r.output.size"},
         "fallback": "named"},
    )
    assert [(p["node_id"], p["field"], p["message"], p["expected"], p["inferred"])
            for p in found] == [
        ("c", "fallback", "input field 'n' of fallback tool 'named' must be a string, but "
         "'r.output.size' is an integer", "string", "integer"),
    ]


def test_a_fallback_that_only_describes_its_schema_gets_a_warning_not_a_refusal() -> None:
    plan = check({"node_id": "a", "name": "count_up", "input": {"n": 3},
                  "fallback": "loose_named"})
    assert [(w["code"], w["node_id"], w["field"], w["expected"], w["inferred"])
            for w in plan.warnings] == [
        ("chain_warning", "a", "fallback", "string", "integer 3")]


def test_a_fallback_that_takes_the_input_adds_no_problem() -> None:
    plan = check({"node_id": "a", "name": "reader", "input": {"path": "a.txt"},
                  "fallback": "prober"})
    assert plan.warnings == ()


def test_an_input_both_tools_refuse_is_reported_once_for_each_tool() -> None:
    found = refused({"node_id": "a", "name": "count_up", "input": {"n": "x"},
                     "fallback": "sized"})
    assert [(p["field"], p["expected"], p["inferred"]) for p in found] == [
        ("fallback", "integer", "nothing"),  # sized requires size, which nothing gives
        ("input.n", "integer", "string 'x'"),
    ]


# ── what downstream reads ──


def test_a_read_only_the_primary_gives_is_a_warning_naming_the_fallback() -> None:
    plan = check(*read_then("prober", "reader", name="shout",
                            input_map={"text": "r.output.text"}))
    assert plan.warnings == ({
        "code": "chain_warning", "node_id": "d", "field": "input_map.text",
        "message": "input field 'text' of tool 'shout' takes a string; 'r.output.text' gives "
                   "one from tool 'reader', but not when node 'r' falls back to tool 'prober' "
                   "(there is no field 'text' there (fields: exists, size))",
        "hint": "read a value both 'reader' and 'prober' give, or name a fallback whose "
                "output has it",
        "expected": "string", "inferred": "string or null",
    },)


def test_a_read_the_fallback_gives_another_type_of_is_a_warning_saying_which() -> None:
    plan = check(*read_then("numbered", "reader", name="shout",
                            input_map={"text": "r.output.text"}))
    assert [(w["code"], w["message"], w["expected"], w["inferred"]) for w in plan.warnings] == [
        ("chain_warning", "input field 'text' of tool 'shout' takes a string; 'r.output.text' "
         "gives one from tool 'reader', but not when node 'r' falls back to tool 'numbered' "
         "(it gives an integer)", "string", "integer or string")]


def test_a_read_neither_tool_gives_is_refused() -> None:
    found = refused(*read_then("prober", "reader", name="shout",
                               input_map={"text": "r.output.txt"}))
    assert [(p["node_id"], p["field"], p["expected"], p["inferred"]) for p in found] == [
        ("d", "input_map.text", "string", "null")]
    assert found[0]["message"].endswith(
        "there is no field 'txt' there (fields: exists, size, text); did you mean 'text'?")


def test_a_mismatch_both_tools_cause_is_refused() -> None:
    found = refused(*read_then("prober", "reader", name="shout",
                               input_map={"text": "r.output.size"}))
    assert [(p["node_id"], p["field"], p["message"], p["expected"], p["inferred"])
            for p in found] == [
        ("d", "input_map.text", "input field 'text' of tool 'shout' must be a string, but "
         "'r.output.size' is an integer", "string", "integer")]


def test_a_chain_that_works_only_through_the_fallback_is_accepted() -> None:
    without = refused(*read_then(None, "prober", name="shout",
                                 input_map={"text": "r.output.text"}))
    assert [(p["field"], p["inferred"]) for p in without] == [("input_map.text", "null")]
    plan = check(*read_then("reader", "prober", name="shout",
                            input_map={"text": "r.output.text"}))
    assert [(w["code"], w["field"], w["message"]) for w in plan.warnings] == [
        ("chain_warning", "input_map.text",
         "input field 'text' of tool 'shout' takes a string; 'r.output.text' gives one only "
         "when node 'r' falls back to tool 'reader', not from tool 'prober' (there is no "
         "field 'text' there (fields: exists, size))")]


def test_a_field_either_tool_gives_reads_with_no_finding() -> None:
    plan = check(*read_then("prober", "reader", name="sized",
                            input_map={"size": "r.output.size"}))
    assert plan.warnings == ()


@pytest.mark.parametrize(("primary", "fallback"), [("prober", "opaque"), ("opaque", "prober")])
def test_a_fallback_or_primary_without_an_output_schema_leaves_reads_to_run_time(
    primary: str, fallback: str
) -> None:
    plan = check(*read_then(fallback, primary, name="shout",
                            input_map={"text": "r.output.text"}))
    assert plan.warnings == ()


def test_a_map_of_a_tool_with_a_fallback_lists_either_tools_output() -> None:
    found = refused(
        {"node_id": "m", "kind": "map", "items_path": "input.paths", "map_node": "t",
         "next_node": "d"},
        {"node_id": "t", "name": "reader", "input_map": {"path": "item"},
         "fallback": "mirror"},
        {"node_id": "d", "name": "sized", "input_map": {"size": "m.output[0].path"}},
    )
    assert [(p["node_id"], p["field"], p["expected"], p["inferred"]) for p in found] == [
        ("d", "input_map.size", "integer", "string or null")]


# ── bounded and cached ──


def test_each_tool_is_asked_once_however_many_nodes_fall_back_to_it() -> None:
    cat = catalog()
    nodes = [{"node_id": f"n{k}", "name": "reader", "input": {"path": "a.txt"},
              "fallback": "prober", **({"next_node": f"n{k + 1}"} if k < 1999 else {})}
             for k in range(2000)]
    nodes.append({"node_id": "d", "name": "sized", "input_map": {"size": "n1999.output.size"}})
    nodes[-2]["next_node"] = "d"
    plan = validate(nodes, "n0", catalog=cat)
    assert plan.warnings == ()
    assert cat.asked == {("tool", "reader"): 1, ("tool", "prober"): 1, ("tool", "sized"): 1}
