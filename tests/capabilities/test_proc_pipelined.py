"""A piped script of ``proc/*`` requests (``cat requests.ndjson | a2e-host stdio``) need
not wait for ``proc/spawn/resp``: a write, status or kill naming a process that is still
starting waits for its start, and one naming a process whose start failed is answered
with why (PROTOCOL.md §10). The real CLI, its stdin a real file."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.process import CLI
from tests.support.sdk import assert_sdk_accepts

pytestmark = pytest.mark.timeout(90)


def run_piped(tmp_path: Path, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    script = tmp_path / "requests.ndjson"
    script.write_text("".join(json.dumps(r) + "\n" for r in requests), "utf-8")
    with script.open("rb") as stdin:
        done = subprocess.run([*CLI, "stdio", "--allow-proc", "wc", "--root", str(tmp_path)],
                              stdin=stdin, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    return [json.loads(line) for line in done.stdout.splitlines()]


HANDSHAKE = {"type": "handshake/req", "id": "h1", "agent_caps": ["proc"]}


def test_a_piped_script_writes_to_a_process_without_waiting_for_its_spawn(
        tmp_path: Path) -> None:
    out = run_piped(tmp_path, [
        HANDSHAKE,
        {"type": "proc/spawn/req", "id": "s1", "cmd": ["wc", "-w"]},
        {"type": "proc/write/req", "id": "w1", "proc_id": "p1", "data": "one two three\n"},
        {"type": "proc/status/req", "id": "st1", "proc_id": "p1"},
        {"type": "proc/write/req", "id": "w2", "proc_id": "p1", "data": "four\n",
         "eof": True},
    ])
    for message in out:
        assert_sdk_accepts(message)
    assert [m["type"] for m in out if m["type"] == "error"] == []
    by_req = {m["req_id"]: m for m in out if m["type"] != "proc/read/event"}
    assert (by_req["s1"]["ok"], by_req["s1"]["proc_id"]) == (True, "p1")
    assert (by_req["w1"]["ok"], by_req["w1"]["written"]) == (True, 14)
    assert (by_req["w2"]["ok"], by_req["w2"]["written"]) == (True, 5)
    assert (by_req["st1"]["status"], by_req["st1"]["procs"][0]["state"]) == (
        "running", "running")
    types = [m.get("req_id") for m in out]
    assert types.index("s1") < types.index("w1") < types.index("w2")
    events = [m for m in out if m["type"] == "proc/read/event"]
    assert [(e["kind"], e["data"].get("text"), e["data"].get("exit_code")) for e in events] == [
        ("output", "4\n", None), ("exit", None, 0)]


def test_a_request_for_a_process_whose_start_failed_says_why(tmp_path: Path) -> None:
    out = run_piped(tmp_path, [
        HANDSHAKE,
        {"type": "proc/spawn/req", "id": "s1", "cmd": ["wc"], "cwd": "no/such/dir"},
        {"type": "proc/write/req", "id": "w1", "proc_id": "p1", "data": "x"},
        {"type": "proc/kill/req", "id": "k1", "proc_id": "p1"},
        {"type": "proc/status/req", "id": "st1", "proc_id": "p1"},
    ])
    spawn = next(m for m in out if m.get("req_id") == "s1")
    assert (spawn["ok"], spawn["error_code"], spawn["error"]) == (
        False, "invalid_input", "cwd 'no/such/dir' is not a directory under the root")
    why = ("process 'p1' did not start: cwd 'no/such/dir' is not a directory under the "
           "root (invalid_input); its proc/spawn/resp (ok false) says so, and nothing was "
           "sent to it")
    errors = {m["req_id"]: m for m in out if m["type"] == "error"}
    assert sorted(errors) == ["k1", "st1", "w1"]
    for error in errors.values():
        assert (error["code"], error["message"]) == ("unknown_proc", why)
        assert_sdk_accepts(error)
