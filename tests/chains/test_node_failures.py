"""A node that fails on the real stdio host (PROTOCOL.md §3, §5): a failing tool or
expression is ``chain_node_error`` naming the node and the cause, a map item's failure
names its index (or leaves a null with ``on_error: skip``), and ``streaming: false`` sends
the response alone, failed or not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.support.requests import chain, error_of, mapping, tool
from tests.support.stdio import Client, shared_stdio_host


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    """One stdio host for the module: each failure below must leave its session serving
    the next request, so the cases run one after another on the same session."""
    async with shared_stdio_host(tmp_path_factory.mktemp("host")) as shared:
        yield shared

RUNTIME_FAILURES: list[tuple[dict[str, Any], dict[str, Any], tuple[str, ...]]] = [
    # node, initial_input, words the error message must contain
    (tool("a", "fail", input={"message": "boom here"}), {}, ("'a'", "boom here")),
    # a wrong input shape that arrives at run time (a static one is refused by validation)
    (tool("a", "add", input={"a": 1}, input_map={"b": "input.b"}), {"b": "two"},
     ("'a'", "'add'", "$.b")),
    (tool("a", "upper", input_map={"text": "input.t"}), {"t": 5}, ("'a'", "'upper'", "text")),
    (tool("a", "echo", input_map={"x": "sort_by(input.xs, &v)"}),
     {"xs": [{"v": 1}, {"v": "s"}]}, ("'a'", "input_map.x", "sort_by")),
    (tool("a", "echo", input_map={"x": "merge(input.n, input.n)"}), {},
     ("'a'", "input_map.x", "merge")),
    (tool("a", "echo", input_map={"x": "input.xs[::0]"}), {"xs": [1, 2]},
     ("'a'", "input_map.x", "step")),
    (tool("a", "echo", input_map={"x": "to_number('1e999')"}), {}, ("'a'", "non-finite")),
    (tool("a", "echo", input_map={"x": "sum(input.xs)"}), {"xs": [1e308, 1e308]},
     ("'a'", "non-finite")),
    (tool("a", "echo", input_map={"x": "abs(input.s)"}), {"s": "str"}, ("'a'", "abs")),
]


@pytest.mark.parametrize(("node", "initial_input", "words"), RUNTIME_FAILURES)
@pytest.mark.asyncio(loop_scope="module")
async def test_a_failing_tool_or_expression_is_chain_node_error_naming_node_and_cause(
    node: dict[str, Any], initial_input: dict[str, Any], words: tuple[str, ...],
    client: Client,
) -> None:
    events, resp = await client.run(chain("r", [node], initial_input=initial_input))
    await client.assert_alive("after")
    err = error_of(resp)
    assert (err["code"], err["node_id"], resp["nodes_run"]) == ("chain_node_error", "a", 1), err
    assert "Traceback" not in err["message"]
    for word in words:
        assert word in err["message"], f"{word!r} missing from {err['message']!r}"
    assert [(e["node_id"], e["phase"]) for e in events] == [("a", "start"), ("a", "error")]


@pytest.mark.asyncio(loop_scope="module")
async def test_map_item_failure_names_its_index_and_skip_leaves_a_null(client: Client) -> None:
    items = {"xs": ["a", "b", 3, "d"]}
    _, aborted = await client.run(chain(
        "abort", mapping("input.xs", tool("t", "upper", input_map={"text": "item"})),
        initial_input=items, streaming=False,
    ))
    _, skipped = await client.run(chain(
        "skip",
        mapping("input.xs", tool("t", "upper", input_map={"text": "item"}, on_error="skip")),
        initial_input=items, streaming=False,
    ))
    _, not_list = await client.run(chain(
        "obj", mapping("input.xs", tool("t", "echo")), initial_input={"xs": {"k": 1}},
        streaming=False,
    ))
    err = error_of(aborted)
    assert (err["code"], err["node_id"], err["details"]["index"]) == ("chain_node_error", "m", 2)
    assert skipped["success"] and skipped["final_output"] == [
        {"text": "A"}, {"text": "B"}, None, {"text": "D"}
    ]
    err = error_of(not_list)
    assert err["node_id"] == "m" and "not a list" in err["message"], err


@pytest.mark.asyncio(loop_scope="module")
async def test_streaming_false_sends_only_the_response_even_on_failure(
    client: Client,
) -> None:
    nodes = [tool("a", "echo", input={"v": 1}, next_node="b"),
             tool("b", "fail", input={"message": "no"}, on_error="skip", next_node="c"),
             tool("c", "add", input={"a": 1, "b": 2})]
    events, ok = await client.run(chain("quiet", nodes, streaming=False))
    events_bad, bad = await client.run(
        chain("quiet2", [tool("a", "fail", input={"message": "x"})], streaming=False)
    )
    assert (events, events_bad) == ([], [])
    assert ok["success"] and ok["outputs"] == {"a": {"v": 1}, "c": {"sum": 3}}, ok
    assert error_of(bad)["code"] == "chain_node_error"
