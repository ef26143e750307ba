"""An installed tool pack whose entry point cannot be imported.

"Installed" as an installer would leave it: a ``*.dist-info`` whose ``entry_points.txt``
registers ``bad = "a2e_nosuchmodule:PACK"`` in group ``a2e_host.tools``, on the
``PYTHONPATH`` of a real ``a2e-host`` subprocess. Packs are loaded by name, so the broken
one matters only when it is enabled; then the start stops with one line naming it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from a2e_host.config import HostConfig
from a2e_host.tools import Tool, ToolPack, ToolPackError, load_tools
from tests.support.dist import install_dist

CHAIN = {
    "entry_node": "parse",
    "nodes": [{"node_id": "parse", "kind": "tool", "name": "json_parse",
               "input": {"text": "[1, 2]"}}],
}
HANDSHAKE = {"type": "handshake/req", "id": "h", "version": "1.0", "ts": 1,
             "agent_id": "t", "agent_caps": ["chains"]}


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A site directory holding one distribution with a broken ``a2e_host.tools`` pack."""
    return install_dist(tmp_path / "site", "a2e-badpack", "0.1",
                        {"a2e_host.tools": {"bad": "a2e_nosuchmodule:PACK"}})


def cli(site: Path, *args: str, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(site))
    env.pop("A2E_TOOLS", None)
    return subprocess.run(
        [sys.executable, "-m", "a2e_host", *args], input=stdin, capture_output=True,
        text=True, timeout=60, env=env, cwd=cwd,
    )


def test_a_broken_pack_that_is_not_enabled_does_not_stop_run(site: Path, tmp_path: Path) -> None:
    (tmp_path / "good.json").write_text(json.dumps(CHAIN))
    done = cli(site, "run", "good.json", "--final", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"value": [1, 2]}
    assert done.stderr == ""


def test_a_broken_pack_that_is_enabled_stops_run_with_one_line_naming_it(
    site: Path, tmp_path: Path
) -> None:
    (tmp_path / "good.json").write_text(json.dumps(CHAIN))
    done = cli(site, "run", "good.json", "--tools", "+bad", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "a2e-host run: configuration error: plugin 'chains': tool pack 'bad' "
        "(a2e_nosuchmodule:PACK) cannot be loaded: ModuleNotFoundError: No module named "
        "'a2e_nosuchmodule'"
    ]


def test_tools_all_lists_a_broken_pack_with_its_one_line_reason(
    site: Path, tmp_path: Path
) -> None:
    done = cli(site, "tools", "--all", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("  bad ")]
    assert rows == [["bad", "not", "enabled", "broken:", "ModuleNotFoundError:", "No",
                     "module", "named", "'a2e_nosuchmodule'"]]
    as_json = cli(site, "tools", "--all", "--json", cwd=tmp_path)
    packs = {p["name"]: p for p in json.loads(as_json.stdout)["packs"]}
    assert packs["bad"]["error"] == "ModuleNotFoundError: No module named 'a2e_nosuchmodule'"
    assert packs["fs"]["error"] == "" and packs["fs"]["enabled"] is True


def test_stdio_serves_chains_beside_a_broken_pack_that_is_not_enabled(
    site: Path, tmp_path: Path
) -> None:
    done = cli(site, "stdio", cwd=tmp_path, stdin=json.dumps(HANDSHAKE) + "\n")
    assert done.returncode == 0, done.stderr
    resp = json.loads(done.stdout.splitlines()[0])
    assert resp["type"] == "handshake/resp", resp
    assert [cap["capability"] for cap in resp["accepted_caps"]] == ["chains"]


def test_stdio_with_the_broken_pack_enabled_refuses_to_start(site: Path, tmp_path: Path) -> None:
    done = cli(site, "stdio", "--tools", "bad", cwd=tmp_path, stdin=json.dumps(HANDSHAKE) + "\n")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "a2e-host: configuration error: plugin 'chains': tool pack 'bad' "
        "(a2e_nosuchmodule:PACK) cannot be loaded: ModuleNotFoundError: No module named "
        "'a2e_nosuchmodule'"
    ]


def test_only_the_enabled_packs_are_imported(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(site))
    assert load_tools(HostConfig(tools=("json",))).names() == [
        "csv_parse", "json_dump", "json_parse", "json_value"]
    with pytest.raises(ToolPackError, match=r"^tool pack 'bad' \(a2e_nosuchmodule:PACK\)"):
        load_tools(HostConfig(tools=("json", "bad")))


def test_a_pack_whose_factory_fails_is_named_in_one_line() -> None:
    def explode(config: HostConfig) -> list[Tool]:
        raise RuntimeError("no licence file\nsearched: /etc, ~")

    packs = {"boom": ToolPack("boom", "", explode)}
    with pytest.raises(ToolPackError) as caught:
        load_tools(HostConfig(tools=("boom",)), packs=packs)
    assert str(caught.value) == (
        "tool pack 'boom' failed to build its tools: RuntimeError: no licence file")


def test_tools_without_all_imports_only_the_enabled_packs(site: Path, tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from a2e_host.commands.tools import tools_main\n"
        "code = tools_main(json_out=True, config_path=None, overrides={'tools': ('json',)})\n"
        "packs = [m for m in sys.modules if m.startswith('a2e_toolpacks.')\n"
        "         and not m.rpartition('.')[2].startswith('_')]\n"
        "print(code, sorted(packs), file=sys.stderr)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(site))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, env=env, cwd=tmp_path)
    assert done.stderr.strip() == "0 ['a2e_toolpacks.jsontools']"
    assert [p["name"] for p in json.loads(done.stdout)["packs"]] == ["json"]
