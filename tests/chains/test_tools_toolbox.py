"""Toolbox: the catalog validation reads and the executors the scheduler calls."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

from a2e_host.chains.messages import ChainNode
from a2e_host.chains.nodes import NodeContext
from a2e_host.chains.toolbox import Toolbox
from a2e_host.commands.tools import tools_main
from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError

CTX = NodeContext(node_id="n", chain_id="c", req_id="r")


def test_catalog_lists_tools_and_suggests() -> None:
    box = Toolbox.from_config(HostConfig(tools=("conformance",)))
    assert "add" in box.tool_names() and box.skill_names() == []
    assert box.suggest_tool("addd") == ["add"]


def test_tool_executor_invokes_the_named_tool() -> None:
    box = Toolbox.from_config(HostConfig(tools=("conformance",)))
    node = ChainNode(node_id="n", kind="tool", name="add")
    assert anyio.run(box.executors["tool"], node, {"a": 1, "b": 2}, CTX) == {"sum": 3}


def test_unknown_tool_at_run_time_is_a_node_error() -> None:
    box = Toolbox.from_config(HostConfig())
    node = ChainNode(node_id="n", kind="tool", name="ghost")
    with pytest.raises(NodeError, match="unknown tool 'ghost' in node 'n'"):
        anyio.run(box.executors["tool"], node, {}, CTX)


def test_proc_executor_and_static_check(tmp_path: Path) -> None:
    box = Toolbox.from_config(HostConfig(allow_proc=(sys.executable,), root=str(tmp_path)))
    node = ChainNode(node_id="p", kind="proc", input={"argv": ["sh"]})
    assert box.check_proc(node) is not None
    args = {"argv": [sys.executable, "-c", "print('hi')"]}
    out = anyio.run(box.executors["proc"], node, args, CTX)
    assert (out["exit_code"], out["stdout"]) == (0, "hi\n")


def test_tools_command_json_lists_tools_skills_and_allowlist(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = tools_main(
        json_out=True, config_path=None, overrides={"tools": ("bench",), "allow_proc": ("sh",)}
    )
    assert code == 0
    info = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in info["tools"]] == ["noop", "sleep_ms"]
    assert info["tools"][1]["input_schema"]["required"] == ["ms"]
    assert info["skills"] == []
    assert [a["name"] for a in info["proc"]["allow"]] == ["sh"]


def test_tools_command_unknown_pack_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert tools_main(json_out=False, config_path=None, overrides={"tools": ("nope",)}) == 2
    assert "unknown tool pack 'nope'" in capsys.readouterr().err


def test_packs_not_enabled_are_imported_only_when_an_unknown_tool_needs_the_hint() -> None:
    import subprocess

    script = (
        "import sys\n"
        "from a2e_host.config import HostConfig\n"
        "from a2e_host.chains.toolbox import Toolbox\n"
        "box = Toolbox.from_config(HostConfig(tools=('json',)))\n"
        "before = 'a2e_toolpacks.conformance' in sys.modules\n"
        "found = [box.pack_providing('upper'), box.pack_providing('word_count'),\n"
        "         box.pack_providing('json_parse'), box.pack_providing('nosuch')]\n"
        "print(before, found, 'a2e_toolpacks.conformance' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "False ['conformance', 'text', None, None] True"
