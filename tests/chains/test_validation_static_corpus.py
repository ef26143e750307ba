"""Chains sure to fail at run time are refused before any node runs (PROTOCOL.md §4 static
checks), by validation and on the wire.

The corpus is ``tests/chains/static_failures/*.json``: each file holds ``doc`` (why the chain
must fail), ``chain`` (a ``chain/req`` body for a host with the ``conformance``, ``fs``,
``text`` and ``json`` packs) and ``errors``, the exact problems it must be refused with
(``code``, ``node_id``, ``field``, and ``expected`` / ``inferred`` where types are involved),
in the order they are reported. Many chains start with a ``write_file`` node, so a chain that
ran anything would leave ``ran.txt`` under the host's root.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from a2e_host.chains.messages import ChainRequest, chain_codec
from a2e_host.chains.toolbox import Toolbox
from a2e_host.chains.validation import validate_chain
from a2e_host.config import HostConfig
from a2e_host.exceptions import ChainInvalid
from a2e_host.limits import Limits, SessionLimits
from tests.support.process import CLI
from tests.support.stdio import stdio_host

CORPUS = Path(__file__).parent / "static_failures"
FILES = sorted(CORPUS.glob("*.json"))
PACKS = ["conformance", "fs", "text", "json"]
SHAPE = ("code", "node_id", "field", "expected", "inferred")


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def request_of(chain: dict[str, Any]) -> ChainRequest:
    message = chain_codec.decode(msgspec.json.encode({**chain, "type": "chain/req"}))
    assert isinstance(message, ChainRequest)
    return message


def shape(problems: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: p[k] for k in SHAPE if k in p} for p in problems]


@pytest.fixture(scope="module")
def toolbox(tmp_path_factory: pytest.TempPathFactory) -> Toolbox:
    root = tmp_path_factory.mktemp("root")
    return Toolbox.from_config(HostConfig(tools=PACKS, root=str(root)))


def test_the_corpus_holds_at_least_twenty_chains_each_with_its_problems() -> None:
    assert len(FILES) >= 20
    for path in FILES:
        case = load(path)
        assert case["doc"] and case["errors"], path.name
        assert all(e["code"] == "chain_invalid" for e in case["errors"]), path.name


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_each_sure_failure_is_refused_with_exactly_its_problems(
    path: Path, toolbox: Toolbox
) -> None:
    case = load(path)
    with pytest.raises(ChainInvalid) as info:
        validate_chain(request_of(case["chain"]), toolbox, SessionLimits(Limits()),
                       granted=frozenset({"chains"}))
    assert info.value.code == "chain_invalid"
    assert shape(info.value.details["errors"]) == case["errors"]
    for found in info.value.details["errors"]:
        assert found["message"] and found["hint"]  # one sentence each, never empty


def test_the_issue_chains_name_what_to_fix(toolbox: Toolbox) -> None:
    first = {p.stem: load(p) for p in FILES}
    messages = {}
    for name in ("01_add_one_and_no_b", "02_read_file_pth", "03_string_output_into_integer"):
        with pytest.raises(ChainInvalid) as info:
            validate_chain(request_of(first[name]["chain"]), toolbox, SessionLimits(Limits()),
                           granted=frozenset({"chains"}))
        messages[name] = [(p["message"], p["hint"]) for p in info.value.details["errors"]]
    assert messages == {
        "01_add_one_and_no_b": [
            ("tool 'add' requires input field 'b', which neither input nor input_map gives",
             "add 'b' to input (a number) or to input_map (an expression giving one)"),
            ("input field 'a' of tool 'add' must be a number, but input gives string 'one'",
             "change input.a to a number"),
        ],
        "02_read_file_pth": [
            ("tool 'read_file' has no input field 'pth'; did you mean 'path'? ('path' is "
             "required and nothing gives it)", "rename 'pth' to 'path'"),
        ],
        "03_string_output_into_integer": [
            ("input field 'bytes' of tool 'big' must be an integer, but 'r.output.text' is a "
             "string", "read a field that holds a number, or convert it with to_number(...)"),
        ],
    }


def test_the_corpus_is_refused_on_the_wire_before_any_node_runs(tmp_path: Path) -> None:
    anyio.run(refused_on_the_wire, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no write_file ever ran


async def refused_on_the_wire(root: Path) -> None:
    argv = [*CLI, "stdio", "--tools", ",".join(PACKS), "--root", str(root)]
    async with stdio_host(argv=argv) as client:
        for n, path in enumerate(FILES):
            case = load(path)
            events, resp = await client.run({**case["chain"], "type": "chain/req",
                                             "id": f"r{n}", "session_id": ""})
            assert events == [], path.name
            assert (resp["type"], resp["success"], resp["nodes_run"]) == (
                "chain/resp", False, 0), path.name
            assert resp["error"]["code"] == "chain_invalid", path.name
            assert shape(resp["error"]["details"]["errors"]) == case["errors"], path.name
