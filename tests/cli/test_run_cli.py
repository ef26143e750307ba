"""``a2e-host run``: output modes, exit codes, --input, and Ctrl-C cancelling cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from a2e_host.commands.run import ChainFileError, read_chain_request
from tests.support.terminal import run_on_terminal

RUN = [sys.executable, "-m", "a2e_host", "run"]

GREET = {
    "entry_node": "up",
    "initial_input": {"word": "file", "suffix": "?"},
    "nodes": [
        {
            "node_id": "up",
            "kind": "tool",
            "name": "upper",
            "input_map": {"text": "input.word"},
            "next_node": "join",
        },
        {
            "node_id": "join",
            "kind": "tool",
            "name": "concat",
            "input_map": {"parts": "[up.output.text, input.suffix]"},
        },
    ],
}


def write(tmp_path: Path, body: dict[str, Any], name: str = "chain.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(body), encoding="utf-8")
    return path


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RUN, *map(str, args)], capture_output=True, text=True, timeout=60, cwd=cwd
    )


def test_plain_output_has_one_line_per_event_then_the_final_output(tmp_path: Path) -> None:
    done = run(write(tmp_path, GREET), "--tools", "conformance")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    events = [line for line in lines if line.startswith("[")]
    assert [int(line[1 : line.index("]")]) for line in events] == [1, 2, 3, 4]
    assert [line.split("]", 1)[1].split()[:2] for line in events] == [
        ["start", "up"],
        ["done", "up"],
        ["start", "join"],
        ["done", "join"],
    ]
    final = json.loads(done.stdout[done.stdout.index("{") :])
    assert final == {"text": "FILE?"}


def test_input_is_merged_over_the_files_initial_input(tmp_path: Path) -> None:
    done = run(
        write(tmp_path, GREET), "--tools", "conformance", "--json", "--input", '{"word": "cli"}'
    )
    assert done.returncode == 0, done.stderr
    response = json.loads(done.stdout)
    assert response["type"] == "chain/resp"
    assert response["final_output"] == {"text": "CLI?"}  # suffix kept from the file


def test_input_from_a_file_with_at_sign(tmp_path: Path) -> None:
    extra = write(tmp_path, {"suffix": "!"}, "input.json")
    done = run(write(tmp_path, GREET), "--tools", "conformance", "--json", "--input", f"@{extra}")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["final_output"] == {"text": "FILE!"}


def test_json_with_events_prints_ndjson_events_before_the_response(tmp_path: Path) -> None:
    done = run(write(tmp_path, GREET), "--tools", "conformance", "--json", "--events")
    assert done.returncode == 0, done.stderr
    messages = [json.loads(line) for line in done.stdout.splitlines()]
    assert [m["type"] for m in messages] == ["chain/event"] * 4 + ["chain/resp"]
    assert [m["seq"] for m in messages[:4]] == [1, 2, 3, 4]
    assert {m["req_id"] for m in messages} == {messages[-1]["req_id"]}


def test_failed_chain_exits_1_with_the_error_on_stderr(tmp_path: Path) -> None:
    body = {
        "entry_node": "boom",
        "nodes": [
            {
                "node_id": "boom",
                "kind": "tool",
                "name": "fail",
                "input": {"message": "disk on fire"},
            },
        ],
    }
    done = run(write(tmp_path, body), "--tools", "conformance")
    assert done.returncode == 1
    assert "chain_node_error" in done.stderr and "disk on fire" in done.stderr
    assert "'boom'" in done.stderr


def test_invalid_chain_exits_2_listing_the_problem(tmp_path: Path) -> None:
    body = {
        "entry_node": "a",
        "nodes": [
            {"node_id": "a", "kind": "tool", "name": "reed_file"},
        ],
    }
    done = run(write(tmp_path, body), "--json")
    assert done.returncode == 2
    response = json.loads(done.stdout)
    assert response["error"]["code"] == "chain_invalid"
    assert response["nodes_run"] == 0


@pytest.mark.parametrize(
    ("make_args", "needle"),
    [
        (lambda tmp: [tmp / "missing.json"], "does not exist"),
        (lambda tmp: [write(tmp, {"nodes": "many"})], "$.nodes"),
        (lambda tmp: [write(tmp, GREET), "--input", "{not json"], "--input is not valid JSON"),
        (lambda tmp: [write(tmp, GREET), "--input", "[1, 2]"], "--input must be a JSON object"),
    ],
    ids=["missing-file", "wrong-field-type", "bad-input-json", "input-not-object"],
)
def test_usage_errors_exit_2_with_one_line_on_stderr(
    tmp_path: Path, make_args: Any, needle: str
) -> None:
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    done = run(*make_args(tmp_path), "--tools", "conformance")
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1
    assert needle in done.stderr


def test_default_tool_packs_are_fs_text_and_json(tmp_path: Path) -> None:
    (tmp_path / "poem.txt").write_text("one two\nthree\n", encoding="utf-8")
    body = {
        "entry_node": "read",
        "initial_input": {"path": "poem.txt"},
        "nodes": [
            {
                "node_id": "read",
                "kind": "tool",
                "name": "read_file",
                "input_map": {"path": "input.path"},
                "next_node": "count",
            },
            {
                "node_id": "count",
                "kind": "tool",
                "name": "word_count",
                "input_map": {"text": "read.output.text"},
                "next_node": "dump",
            },
            {
                "node_id": "dump",
                "kind": "tool",
                "name": "json_dump",
                "input_map": {"value": "count.output"},
                "input": {"sort_keys": True},
            },
        ],
    }
    done = run(write(tmp_path, body), "--json", cwd=tmp_path)  # root = working directory
    assert done.returncode == 0, done.stderr
    final = json.loads(done.stdout)["final_output"]
    assert json.loads(final["text"]) == {"chars": 14, "lines": 2, "words": 3}


def test_ctrl_c_cancels_the_chain_and_prints_the_cancelled_response(tmp_path: Path) -> None:
    body = {
        "entry_node": "nap",
        "nodes": [
            {"node_id": "nap", "kind": "tool", "name": "sleep", "input": {"seconds": 60}},
        ],
    }
    process = subprocess.Popen(
        [*RUN, str(write(tmp_path, body)), "--tools", "conformance", "--json", "--events"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = json.loads(process.stdout.readline())  # blocks until the node started
        assert (first["node_id"], first["phase"]) == ("nap", "start")
        started = time.monotonic()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert time.monotonic() - started < 30  # well before the 60 s sleep would end
    messages = [json.loads(line) for line in out.splitlines()]
    assert [(m["type"], m.get("phase")) for m in messages] == [
        ("chain/event", "error"),
        ("chain/resp", None),
    ]
    assert messages[-1]["error"]["code"] == "cancelled"
    assert process.returncode == 130  # interrupted, as a shell reports Ctrl-C
    assert "cancelling" in err


def test_chain_file_may_omit_the_envelope(tmp_path: Path) -> None:
    request = read_chain_request(write(tmp_path, GREET), '{"extra": 1}')
    assert request.TYPE == "chain/req"
    assert request.session_id == ""
    assert len(request.id) == 32 and request.ts > 0
    assert request.initial_input == {"word": "file", "suffix": "?", "extra": 1}


def test_chain_file_of_another_type_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ChainFileError, match="a chain file is a chain/req body"):
        read_chain_request(write(tmp_path, {"type": "ping"}))


def test_on_a_terminal_the_live_table_is_drawn_then_the_final_output(tmp_path: Path) -> None:
    with (tmp_path / "stderr.txt").open("wb") as errors:
        status, raw = run_on_terminal(
            [*RUN, str(write(tmp_path, GREET)), "--tools", "conformance"],
            env={**os.environ, "COLUMNS": "100"}, stderr=errors)
    assert status == 0, (tmp_path / "stderr.txt").read_text()
    screen = raw.decode("utf-8", "replace")
    assert "✓ done" in screen  # the table's status column
    assert "chain" in screen and "succeeded: 2 nodes" in screen
    assert '"text": "FILE?"' in screen  # the final output, pretty JSON


NAPS = {  # a map of 300 × 0.2 s naps, one at a time: a minute of events unless cancelled
    "entry_node": "naps",
    "initial_input": {"items": list(range(300))},
    "nodes": [
        {"node_id": "naps", "kind": "map", "items_path": "input.items", "map_node": "nap"},
        {"node_id": "nap", "kind": "tool", "name": "sleep", "input": {"seconds": 0.2},
         "input_map": {"value": "item"}},
    ],
}


@pytest.mark.parametrize("mode", [[], ["--json", "--events"]])
def test_a_closed_stdout_cancels_the_chain_and_exits_141_quietly(
    tmp_path: Path, mode: list[str]
) -> None:
    with subprocess.Popen(
        [*RUN, str(write(tmp_path, NAPS)), "--tools", "conformance", *mode],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "A2E_MAX_MAP_CONCURRENCY": "1"},
    ) as process:
        try:
            assert process.stdout is not None and process.stderr is not None
            first = process.stdout.readline()  # the chain is running
            assert "naps" in first
            process.stdout.close()  # `| head -1`: the reader goes away
            closed = time.monotonic()
            err = process.stderr.read()
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
    assert time.monotonic() - closed < 30  # cancelled, well before the minute of naps ends
    assert process.returncode == 141  # 128 + SIGPIPE, as a shell reports `tool | head`
    assert err == ""


def test_a_stdout_closed_before_the_final_output_exits_141_quietly(tmp_path: Path) -> None:
    with subprocess.Popen(
        [*RUN, str(write(tmp_path, GREET)), "--tools", "conformance", "--final"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()  # gone before the final output is written
        err = process.stderr.read()
        process.wait(timeout=60)
    assert process.returncode == 141
    assert err == ""
