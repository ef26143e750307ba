"""The local commands and their configuration: ``run`` with the README's own TOML (which
sets ``auth_token``), ``validate`` and ``run`` agreeing on proc nodes, ``--tools +PACK``,
``tools --all`` and ``run --final``. Each case spawns the real CLI."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from a2e_host.commands.common import load_command_config
from a2e_host.commands.run import read_chain_request
from tests.support import REPO
from tests.support.process import CLI

README = REPO / "README.md"

needs_wc = pytest.mark.skipif(shutil.which("wc") is None, reason="needs the wc executable")


pytestmark = pytest.mark.usefixtures("no_config_from_environment")


def cli(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=60,
                          cwd=cwd, stdin=subprocess.DEVNULL)


def write(path: Path, body: dict[str, Any]) -> Path:
    path.write_text(json.dumps(body), encoding="utf-8")
    return path


# a proc node whose argv comes from input_map: nothing refuses it before it runs except
# the capability check, which is where validate and run used to disagree
COUNT_LINES = {
    "entry_node": "wc",
    "initial_input": {"file": "poem.txt"},
    "nodes": [
        {"node_id": "wc", "kind": "proc",
         "input_map": {"argv": "[`\"wc\"`, `\"-l\"`, input.file]"}, "next_node": "first"},
        {"node_id": "first", "kind": "tool", "name": "regex_findall",
         "input": {"pattern": "^\\s*(\\d+)"}, "input_map": {"text": "wc.output.stdout"}},
    ],
}


def readme_toml() -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(r"## Configuration.*?```toml\n(.*?)```", text, re.S)
    assert match, "README has a TOML block under ## Configuration"
    return match.group(1)


@needs_wc
def test_run_with_the_readme_toml_which_sets_an_auth_token_succeeds(tmp_path: Path) -> None:
    toml = readme_toml()
    assert "auth_token" in toml  # the case the issue met
    config = tmp_path / "a2e.toml"
    config.write_text(toml, encoding="utf-8")
    (tmp_path / "poem.txt").write_text("one\ntwo\nthree\n", encoding="utf-8")
    done = cli("run", write(tmp_path / "chain.json", COUNT_LINES), "--config", config,
               "--json", cwd=tmp_path)
    assert "auth_failed" not in done.stderr
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["final_output"]["groups"] == [["3"]]


@needs_wc
def test_validate_and_run_both_refuse_a_proc_node_without_allow_proc(tmp_path: Path) -> None:
    (tmp_path / "poem.txt").write_text("a\n", encoding="utf-8")
    chain = write(tmp_path / "chain.json", COUNT_LINES)
    validated = cli("validate", chain, cwd=tmp_path)
    ran = cli("run", chain, cwd=tmp_path)
    assert validated.returncode == 1, validated.stdout
    assert ran.returncode == 2, ran.stderr
    for text in (validated.stdout, ran.stderr):
        assert "node 'wc'" in text or "wc.kind" in text
        assert "--allow-proc NAME" in text  # the command-line fix, not the wire's


@needs_wc
def test_validate_and_run_both_accept_it_with_allow_proc(tmp_path: Path) -> None:
    (tmp_path / "poem.txt").write_text("a\nb\n", encoding="utf-8")
    chain = write(tmp_path / "chain.json", COUNT_LINES)
    validated = cli("validate", chain, "--allow-proc", "wc", cwd=tmp_path)
    ran = cli("run", chain, "--allow-proc", "wc", "--final", cwd=tmp_path)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["groups"] == [["2"]]


def test_plus_pack_adds_to_the_default_packs(tmp_path: Path) -> None:
    body = {
        "entry_node": "up",
        "nodes": [
            {"node_id": "up", "kind": "tool", "name": "upper", "input": {"text": "a b"},
             "next_node": "count"},
            {"node_id": "count", "kind": "tool", "name": "word_count",  # default pack text
             "input_map": {"text": "up.output.text"}},
        ],
    }
    done = cli("run", write(tmp_path / "chain.json", body), "--tools", "+conformance",
               "--final")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"words": 2, "lines": 1, "chars": 3}


def test_plus_pack_adds_to_the_configured_packs_not_the_defaults() -> None:
    config = load_command_config(None, {"tools": ("+bench",)}, local_defaults=True,
                                 environ={"A2E_TOOLS": "conformance"})
    assert config.tools == ("conformance", "bench")
    served = load_command_config(None, {"tools": ("+bench",)}, local_defaults=False,
                                 environ={})
    assert served.tools == ("bench",)
    replaced = load_command_config(None, {"tools": ("json",)}, local_defaults=True, environ={})
    assert replaced.tools == ("json",)
    defaults = load_command_config(None, {}, local_defaults=True, environ={})
    assert defaults.tools == ("fs", "text", "json")


def test_tools_all_lists_installed_packs_that_are_not_enabled() -> None:
    text = cli("tools", "--all")
    assert text.returncode == 0, text.stderr
    rows = {line.split()[0]: line for line in text.stdout.splitlines()
            if re.match(r"^  (bench|conformance|fs|json|text) ", line)}
    assert "not enabled" in rows["conformance"] and "not enabled" in rows["bench"]
    assert " enabled " in rows["fs"] and "not enabled" not in rows["fs"]
    assert "--tools +NAME" in text.stdout
    plain = cli("tools")
    assert "conformance" not in plain.stdout and "bench" not in plain.stdout
    assert "tools --all" in plain.stdout or "--all lists" in plain.stdout


def test_tools_all_as_json_marks_each_pack() -> None:
    done = cli("tools", "--all", "--json", "--tools", "conformance")
    packs = {p["name"]: p for p in json.loads(done.stdout)["packs"]}
    assert packs["conformance"]["enabled"] is True
    assert packs["fs"]["enabled"] is False
    assert "read_file" in packs["fs"]["tools"]
    assert {p["error"] for p in packs.values()} == {""}


def test_final_prints_only_the_final_output_as_one_json_line(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x " * 5000, encoding="utf-8")
    body = {
        "entry_node": "read",
        "nodes": [
            {"node_id": "read", "kind": "tool", "name": "read_file", "input": {"path": "a.txt"},
             "next_node": "count"},
            {"node_id": "count", "kind": "tool", "name": "word_count",
             "input_map": {"text": "read.output.text"}},
        ],
    }
    done = cli("run", write(tmp_path / "chain.json", body), "--final", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1
    assert json.loads(done.stdout) == {"words": 5000, "lines": 1, "chars": 10000}


def test_final_failure_goes_to_stderr_with_nothing_on_stdout(tmp_path: Path) -> None:
    body = {"entry_node": "boom", "nodes": [
        {"node_id": "boom", "kind": "tool", "name": "fail", "input": {"message": "no"}}]}
    done = cli("run", write(tmp_path / "chain.json", body), "--final", "--tools", "conformance")
    assert done.returncode == 1
    assert done.stdout == ""
    assert "chain_node_error" in done.stderr and "'boom'" in done.stderr


def test_final_and_json_exclude_each_other_and_events_needs_json(tmp_path: Path) -> None:
    chain = write(tmp_path / "chain.json", {"entry_node": "a", "nodes": []})
    both = cli("run", chain, "--final", "--json")
    events = cli("run", chain, "--events")
    assert both.returncode == events.returncode == 2
    assert "not allowed with argument" in both.stderr
    assert "--events goes with --json" in events.stderr


def test_extra_request_fields_are_set_and_unknown_ones_dropped(tmp_path: Path) -> None:
    chain = write(tmp_path / "chain.json", {"entry_node": "a", "timeout": 9, "nodes": [
        {"node_id": "a", "kind": "tool", "name": "upper", "input": {"text": "x"}}]})
    request = read_chain_request(chain, extra={"timeout": 7, "no_such_field_here": 1})
    assert request.timeout == 7
    assert not hasattr(request, "no_such_field_here")
