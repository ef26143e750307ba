"""Tools that can return more than they are given refuse an output over the node's
``max_output_bytes`` before building it, and long inputs are worked on off the event loop."""

from __future__ import annotations

import json
import string
import threading
import time
from typing import Any

import anyio
import pytest
from a2e_toolpacks import conformance, jsontools, text

from a2e_host.chains.messages import ChainNode
from a2e_host.chains.nodes import NodeContext
from a2e_host.chains.toolbox import Toolbox
from a2e_host.config import HostConfig
from a2e_host.exceptions import ChainLimitExceeded
from a2e_host.limits import Limits, SessionLimits

CAP = 100_000


@pytest.fixture(scope="module")
def box() -> Toolbox:
    return Toolbox.from_config(HostConfig(tools=("conformance", "text", "json")))


def run(box: Toolbox, name: str, args: dict[str, Any], cap: int = CAP) -> Any:
    """Run tool ``name`` as the scheduler would, in a session that lowered
    max_output_bytes to ``cap``."""
    limits = SessionLimits(Limits(), {"max_output_bytes": cap})
    ctx = NodeContext(
        node_id="n", chain_id="c", req_id="r", max_output_bytes=cap, limits=limits
    )
    node = ChainNode(node_id="n", kind="tool", name=name)
    return anyio.run(box.executors["tool"], node, args, ctx)


def refused(box: Toolbox, name: str, args: dict[str, Any], cap: int = CAP) -> ChainLimitExceeded:
    started = time.monotonic()
    with pytest.raises(ChainLimitExceeded) as info:
        run(box, name, args, cap)
    assert time.monotonic() - started < 5.0  # nothing gigantic was built first
    err = info.value
    assert err.code == "chain_limit"
    assert err.details["ceiling"] == "max_output_bytes"
    assert err.details["scope"] == "session" and err.details["limit"] == cap
    assert err.details["requested"] > cap
    assert f"tool {name!r}" in err.message and f"max_output_bytes {cap}" in err.message
    return err


def shared_doubling(leaf: Any, times: int) -> Any:
    """``[@,@]`` applied ``times`` times: 2**times leaves, one object in memory."""
    value = leaf
    for _ in range(times):
        value = [value, value]
    return value


def test_big_refuses_bytes_over_the_cap_before_building_them(box: Toolbox) -> None:
    err = refused(box, "big", {"bytes": 1_000_000_000_000})
    assert err.details["requested"] == 1_000_000_000_000 + len('{"data":""}')
    assert run(box, "big", {"bytes": CAP - 11}) == {"data": "x" * (CAP - 11)}


def test_template_computes_its_length_from_the_placeholders_first(box: Toolbox) -> None:
    err = refused(box, "template", {"template": "$a" * 1000, "values": {"a": "y" * 1000}})
    assert err.details["requested"] >= 1_000_000
    out = run(box, "template", {"template": "$a-${b} $$ $c $", "values": {"a": "x", "b": 2}})
    assert out == {"text": "x-2 $ $c $"}


def test_template_refuses_a_value_whose_text_would_be_huge(box: Toolbox) -> None:
    bomb = shared_doubling("z" * 10, 40)  # str() of it would be terabytes
    refused(box, "template", {"template": "$v", "values": {"v": bomb}})


def test_template_matches_safe_substitute(box: Toolbox) -> None:
    tpl = "${a}$a$$b $ $1 ${c} $d é"
    values = {"a": [1, "x"], "d": None}
    out = run(box, "template", {"template": tpl, "values": values})
    assert out == {"text": string.Template(tpl).safe_substitute(values)}


def test_json_dump_measures_shared_references_before_encoding(box: Toolbox) -> None:
    refused(box, "json_dump", {"value": shared_doubling("x" * 10, 12), "indent": 16})
    refused(box, "json_dump", {"value": shared_doubling("x" * 1000, 60)})


def test_json_dump_counts_the_indentation_it_would_add(box: Toolbox) -> None:
    deep = shared_doubling(1, 0)
    for _ in range(300):
        deep = [deep]  # 601 bytes compact, about 1.4 MB indented by 16
    err = refused(box, "json_dump", {"value": deep, "indent": 16})
    assert "indented by 16" in err.message
    assert run(box, "json_dump", {"value": deep})["text"] == json.dumps(deep)


@pytest.mark.parametrize("indent", [None, 0, 1, 4])
@pytest.mark.parametrize("sort_keys", [False, True])
def test_json_dump_writes_what_json_dumps_writes(
    box: Toolbox, indent: int | None, sort_keys: bool
) -> None:
    value = {"b": [1, 2.5, {}, [], {"z": None, "a": True}], "a": "é\u2028\"q\"", "c": {}}
    expected = json.dumps(value, indent=indent, sort_keys=sort_keys, ensure_ascii=False)
    args = {"value": value, "indent": indent, "sort_keys": sort_keys}
    assert run(box, "json_dump", args) == {"text": expected}


def test_lines_refuses_a_list_bigger_than_the_cap(box: Toolbox) -> None:
    err = refused(box, "lines", {"text": "\n" * CAP})  # 3 bytes of output per line
    assert err.details["requested"] >= 3 * CAP


@pytest.mark.parametrize(
    "sample", ["", "a", "a\n", "a\r\nb\rc\u2028d\x1ce\n\n", "\r\n\r", "x\r", "one\x85two"]
)
def test_line_and_word_counts_match_splitlines_and_split(box: Toolbox, sample: str) -> None:
    long = sample * 9000 + " word" + "w" * 70_000 + " end"  # past the slice size
    for t in (sample, long):
        assert run(box, "word_count", {"text": t}, cap=10**8) == {
            "words": len(t.split()),
            "lines": len(t.splitlines()),
            "chars": len(t),
        }
        assert run(box, "lines", {"text": t}, cap=10**8)["lines"] == t.splitlines()


def test_regex_groups_that_capture_the_text_at_every_match_are_refused(box: Toolbox) -> None:
    # each empty match's lookbehind group captures all the text before it: quadratic
    err = refused(box, "regex_findall", {"text": "a" * 2000, "pattern": "(?<=(.*))"})
    assert "regex_findall" in err.message


def test_csv_rows_repeating_a_wide_header_are_refused(box: Toolbox) -> None:
    header = ",".join(f"column_{i}_" + "h" * 100 for i in range(50))
    refused(box, "csv_parse", {"text": header + "\n" + "x\n" * 2000})


def test_concat_of_one_long_part_repeated_is_refused(box: Toolbox) -> None:
    refused(box, "concat", {"parts": ["p" * 10_000] * 1000})


@pytest.mark.parametrize(
    ("tool", "module", "worker", "args"),
    [
        ("json_parse", jsontools, "_decode", {"text": "[" + "1," * 100_000 + "1]"}),
        ("word_count", text, "_count", {"text": "w " * 100_000}),
        ("template", text, "_substitute", {"template": "$a " * 50_000, "values": {"a": 1}}),
    ],
)
def test_long_inputs_are_worked_on_in_a_worker_thread(
    box: Toolbox, monkeypatch: pytest.MonkeyPatch, tool: str, module: Any, worker: str,
    args: dict[str, Any],
) -> None:
    threads: list[threading.Thread] = []
    original = getattr(module, worker)

    def spy(*a: Any) -> Any:
        threads.append(threading.current_thread())
        return original(*a)

    monkeypatch.setattr(module, worker, spy)
    run(box, tool, args, cap=10**8)
    assert threads and threads[0] is not threading.main_thread()


def test_tools_that_build_from_long_input_do_not_run_on_the_loop(box: Toolbox) -> None:
    for name in ("json_dump", "csv_parse"):
        tool = box.tools.get(name)
        assert tool is not None and tool.blocking and not tool.is_async
    for name in ("lines", "upper", "word_count", "json_parse", "template"):
        tool = box.tools.get(name)
        assert tool is not None and tool.is_async  # they offload long input themselves
    assert conformance.upper.is_async
