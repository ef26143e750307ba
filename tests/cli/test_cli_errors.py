"""The ``a2e-host`` command line as a user meets it: one line and exit 2 for every usage or
configuration mistake (never a traceback), clean help, ``--version``, comma lists, and a
ceiling refusal that says how to raise the ceiling. Each case spawns the real CLI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.process import CLI

UPPER = {
    "entry_node": "up",
    "initial_input": {"word": "cli"},
    "nodes": [
        {"node_id": "up", "kind": "tool", "name": "upper", "input_map": {"text": "input.word"},
         "next_node": "count"},
        {"node_id": "count", "kind": "tool", "name": "word_count",
         "input_map": {"text": "up.output.text"}},
    ],
}


pytestmark = pytest.mark.usefixtures("no_config_from_environment")


def cli(*args: str | Path, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *map(str, args)], capture_output=True, text=True, timeout=60, cwd=cwd,
        stdin=subprocess.DEVNULL, env={**os.environ, **env},
    )


def write(tmp_path: Path, body: dict[str, Any], name: str = "chain.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(body), encoding="utf-8")
    return path


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--tools", "nosuch"], "unknown tool pack 'nosuch'"),
        (["--allow-proc", "nosuchexe-a2e"], "'nosuchexe-a2e' is not an executable on PATH"),
        (["--skills", "/nonexistent-a2e"], "/nonexistent-a2e"),
    ],
    ids=["unknown-pack", "missing-executable", "missing-skills-dir"],
)
def test_run_with_a_configuration_the_host_refuses_prints_one_line_and_exits_2(
    tmp_path: Path, flags: list[str], needle: str
) -> None:
    done = cli("run", write(tmp_path, UPPER), *flags)
    assert done.returncode == 2
    assert done.stdout == ""
    line = one_line(done)
    assert line.startswith("a2e-host run: configuration error: ")
    assert needle in line


def test_serve_on_a_port_in_use_says_so_in_one_line_and_exits_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli("serve", "--port", str(port), "--log-format", "json")
    assert done.returncode == 2
    assert one_line(done) == (
        f"a2e-host: port {port} is in use; pick another with --port (0 picks a free one)"
    )


def test_comma_separated_tool_packs_work_like_the_environment_variable(tmp_path: Path) -> None:
    chain = write(tmp_path, UPPER)
    by_flag = cli("run", chain, "--final", "--tools", "conformance,text")
    by_env = cli("run", chain, "--final", A2E_TOOLS="conformance,text")
    assert by_flag.returncode == 0, by_flag.stderr
    assert by_env.returncode == 0, by_env.stderr
    assert json.loads(by_flag.stdout) == json.loads(by_env.stdout) == {
        "words": 1, "lines": 1, "chars": 3,
    }


def test_a_pack_missing_from_a_comma_list_is_not_enabled(tmp_path: Path) -> None:
    done = cli("run", write(tmp_path, UPPER), "--final", "--tools", "conformance,json")
    assert done.returncode == 2
    assert "unknown tool 'word_count'" in done.stderr


def test_a_flag_given_a_value_it_does_not_take_is_one_line_naming_the_command(
    tmp_path: Path,
) -> None:
    done = cli("run", write(tmp_path, UPPER), "--json", "true")
    assert done.returncode == 2
    assert one_line(done) == (
        "a2e-host run: unrecognized arguments: true (see 'a2e-host run --help')"
    )


@pytest.mark.parametrize(
    "args",
    [["bogus"], ["serve", "--port", "70000"], ["run"], ["stdio", "--log-level", "loud"]],
    ids=["unknown-command", "bad-port", "missing-chain", "bad-choice"],
)
def test_usage_errors_are_one_line_with_exit_2(args: list[str]) -> None:
    done = cli(*args)
    assert done.returncode == 2
    assert "see 'a2e-host" in one_line(done)


@pytest.mark.parametrize("command", ["", "serve", "stdio", "run", "validate", "tools"])
def test_help_shows_plain_metavars_and_h_is_help(command: str) -> None:
    args = [command] if command else []
    long, short = cli(*args, "--help"), cli(*args, "-h")
    assert long.returncode == short.returncode == 0
    assert long.stdout == short.stdout
    assert "usage: a2e-host" in long.stdout
    for noise in ("<bool>", "<str>", "<path>", "list[", "{chain}"):
        assert noise not in long.stdout


def test_run_help_names_the_chain_file_and_flags_take_no_values() -> None:
    text = cli("run", "--help").stdout
    assert "CHAIN.json" in text
    assert "--json " in text and "--final " in text and "--json JSON" not in text


def test_version_prints_the_package_version() -> None:
    from a2e_host import __version__

    for flag in ("--version", "-V"):
        done = cli(flag)
        assert done.returncode == 0
        assert done.stdout.startswith(f"a2e-host {__version__} ")


def test_no_command_prints_the_help_and_exits_2() -> None:
    done = cli()
    assert done.returncode == 2
    assert "commands:" in done.stderr and "run" in done.stderr


TWO_NODES = {
    "entry_node": "a",
    "nodes": [
        {"node_id": "a", "kind": "tool", "name": "upper", "input": {"text": "x"},
         "next_node": "b"},
        {"node_id": "b", "kind": "tool", "name": "upper", "input": {"text": "y"}},
    ],
}


def test_a_ceiling_refusal_in_run_says_how_to_raise_the_ceiling(tmp_path: Path) -> None:
    done = cli("run", write(tmp_path, TWO_NODES), "--tools", "conformance", A2E_MAX_NODES="1")
    assert done.returncode == 2
    assert "chain_limit" in done.stderr
    assert "A2E_MAX_NODES=2" in done.stderr
    assert "'max_nodes = 2' under [limits]" in done.stderr


def test_a_ceiling_refusal_in_validate_says_how_to_raise_the_ceiling(tmp_path: Path) -> None:
    done = cli("validate", write(tmp_path, TWO_NODES), "--tools", "conformance",
               A2E_MAX_NODES="1")
    assert done.returncode == 1
    assert "A2E_MAX_NODES=2" in done.stdout and "[limits]" in done.stdout


def test_sigterm_during_run_cancels_the_chain_and_exits_143(tmp_path: Path) -> None:
    import signal

    body = {"entry_node": "nap", "nodes": [
        {"node_id": "nap", "kind": "tool", "name": "sleep", "input": {"seconds": 60}}]}
    process = subprocess.Popen(
        [*CLI, "run", str(write(tmp_path, body)), "--tools", "conformance", "--json",
         "--events"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stdout is not None
        first = json.loads(process.stdout.readline())  # the node has started
        assert (first["node_id"], first["phase"]) == ("nap", "start")
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 128 + signal.SIGTERM
    assert json.loads(out.splitlines()[-1])["error"]["code"] == "cancelled"
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "args",
    [["run", "CHAIN", "--tool", "fs"], ["validate", "CHAIN", "--tool", "fs"],
     ["tools", "--tool", "fs"], ["stdio", "--log-lev", "debug"], ["serve", "--po", "0"]],
    ids=["run", "validate", "tools", "stdio", "serve"],
)
def test_an_abbreviated_flag_is_refused_not_taken_for_the_full_one(
    tmp_path: Path, args: list[str]
) -> None:
    chain = str(write(tmp_path, UPPER))
    done = cli(*[chain if a == "CHAIN" else a for a in args])
    assert done.returncode == 2
    assert f"unrecognized arguments: {args[-2]} {args[-1]}" in one_line(done)
    assert done.stdout == ""


def test_log_level_auto_is_accepted_and_means_warning_for_run_and_stdio(
    tmp_path: Path,
) -> None:
    ran = cli("run", write(tmp_path, UPPER), "--final", "--tools", "+conformance",
              "--log-level", "auto", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == {"words": 1, "lines": 1, "chars": 3}
    assert ran.stderr == ""  # no INFO lines
    served = cli("stdio", "--log-level", "auto")  # stdin is empty: serve nothing, exit
    assert served.returncode == 0, served.stderr
    assert served.stderr == ""


def test_an_unknown_tool_names_the_installed_pack_that_provides_it(tmp_path: Path) -> None:
    done = cli("run", write(tmp_path, UPPER), cwd=tmp_path)  # upper is in 'conformance'
    assert done.returncode == 2
    assert done.stdout == ""
    assert ("  - up.name: unknown tool 'upper'; it is in the 'conformance' pack, which is "
            "not enabled (fix: enable it with --tools +conformance") in done.stderr
    checked = cli("validate", write(tmp_path, UPPER), "--json", cwd=tmp_path)
    problem = json.loads(checked.stdout)["errors"][0]
    assert problem["hint"].startswith("enable it with --tools +conformance")
