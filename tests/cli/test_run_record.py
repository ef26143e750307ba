"""``a2e-host run --record FILE``: each frame as one NDJSON line, as sent; the real CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "a2e_host"]

CHAIN = {
    "chain_id": "rec",
    "entry_node": "a",
    "nodes": [
        {"node_id": "a", "kind": "tool", "name": "word_count", "input": {"text": "one two"},
         "next_node": "b"},
        {"node_id": "b", "kind": "tool", "name": "word_count",
         "input_map": {"text": "join(' ', ['x', to_string(a.output.words)])"}},
    ],
}


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60,
                          cwd=cwd)


def chain_file(tmp_path: Path) -> Path:
    path = tmp_path / "chain.json"
    path.write_text(json.dumps(CHAIN), encoding="utf-8")
    return path


def frames(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_record_holds_every_frame_byte_for_byte_as_the_wire_sends_it(tmp_path: Path) -> None:
    record = tmp_path / "run.ndjson"
    done = cli("run", str(chain_file(tmp_path)), "--json", "--events", "--record",
               str(record), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # --json --events prints each frame's wire encoding: the record is the same bytes
    assert record.read_text(encoding="utf-8") == done.stdout
    lines = frames(record)
    assert [(f["type"], f["node_id"], f["phase"]) for f in lines[:-1]] == [
        ("chain/event", "a", "start"), ("chain/event", "a", "done"),
        ("chain/event", "b", "start"), ("chain/event", "b", "done")]
    assert [f["seq"] for f in lines[:-1]] == [1, 2, 3, 4]  # gapless, from 1
    assert lines[1]["output"] == {"words": 2, "lines": 1, "chars": 7}
    last = lines[-1]
    assert last["type"] == "chain/resp" and last["success"] is True
    assert last["final_output"] == {"words": 2, "lines": 1, "chars": 3}
    assert {f["req_id"] for f in lines} == {last["req_id"]}


def test_record_refuses_an_existing_file_unless_forced(tmp_path: Path) -> None:
    chain = chain_file(tmp_path)
    record = tmp_path / "run.ndjson"
    record.write_text("keep me\n", encoding="utf-8")
    refused = cli("run", str(chain), "--final", "--record", str(record), cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr == (f"a2e-host run: --record file {str(record)!r} exists; pass "
                              "--force to overwrite it, or name another file\n")
    assert refused.stdout == ""  # refused before the chain ran
    assert record.read_text(encoding="utf-8") == "keep me\n"
    forced = cli("run", str(chain), "--final", "--record", str(record), "--force",
                 cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    # --final prints the final output alone, yet the events are recorded all the same
    assert json.loads(forced.stdout) == {"words": 2, "lines": 1, "chars": 3}
    lines = frames(record)
    assert [f["seq"] for f in lines[:-1]] == [1, 2, 3, 4]
    assert lines[-1]["type"] == "chain/resp" and lines[-1]["success"] is True


def test_record_never_follows_a_symbolic_link(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("precious\n", encoding="utf-8")
    link = tmp_path / "run.ndjson"
    os.symlink(target, link)
    done = cli("run", str(chain_file(tmp_path)), "--record", str(link), "--force",
               cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (f"a2e-host run: --record file {str(link)!r} is a symbolic link; "
                           "name the file itself\n")
    assert target.read_text(encoding="utf-8") == "precious\n"


def test_force_without_record_is_a_usage_error(tmp_path: Path) -> None:
    done = cli("run", str(chain_file(tmp_path)), "--force", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == ("a2e-host run: --force goes with --record FILE "
                           "(see 'a2e-host run --help')\n")


def test_record_is_written_as_frames_arrive_and_ends_with_the_cancelled_response(
        tmp_path: Path) -> None:
    chain = tmp_path / "nap.json"
    chain.write_text(json.dumps({"entry_node": "nap", "nodes": [
        {"node_id": "nap", "kind": "tool", "name": "sleep", "input": {"seconds": 60}}]}),
        encoding="utf-8")
    record = tmp_path / "run.ndjson"
    process = subprocess.Popen(
        [*CLI, "run", str(chain), "--tools", "conformance", "--json", "--events",
         "--record", str(record)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, cwd=tmp_path)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()  # blocks until the node started
        # the record was written (and flushed) before the line was printed
        assert record.read_text(encoding="utf-8") == first
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130
    assert record.read_text(encoding="utf-8") == first + rest
    lines = frames(record)
    assert [(f["type"], f.get("phase")) for f in lines] == [
        ("chain/event", "start"), ("chain/event", "error"), ("chain/resp", None)]
    assert [f["seq"] for f in lines[:-1]] == [1, 2]
    assert lines[-1]["error"]["code"] == "cancelled"


def test_a_record_that_cannot_be_written_to_the_end_is_said_and_still_draws(
        tmp_path: Path) -> None:
    import resource

    def small_files() -> None:  # a full disk, as far as the record goes: EFBIG at 600 B
        resource.setrlimit(resource.RLIMIT_FSIZE, (600, 600))

    chain = chain_file(tmp_path)
    record = tmp_path / "run.ndjson"
    done = subprocess.run([*CLI, "run", str(chain), "--final", "--record", str(record)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          preexec_fn=small_files)
    assert done.returncode == 1  # the chain succeeded; its record did not
    assert json.loads(done.stdout) == {"words": 2, "lines": 1, "chars": 3}
    assert done.stderr == (f"a2e-host run: --record file {str(record)!r} is incomplete: "
                           "writing it failed after 2 lines (File too large)\n")
    written = record.read_bytes()
    assert len(written) == 600 and written.count(b"\n") == 2  # a third line, half written
    drawn = cli("graph", str(chain), "--events", str(record), cwd=tmp_path)
    assert drawn.returncode == 0, drawn.stderr
    assert drawn.stderr == (f"a2e-host graph: warning: line 3 of events file {str(record)!r} "
                            "is cut off (the recording stopped while writing it); drawn "
                            "without it\n")
    assert [line.strip() for line in drawn.stdout.splitlines()
            if line.strip().startswith("class ")] == ["class a done", "class b never_started"]
