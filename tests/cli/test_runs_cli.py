"""``a2e-host runs list|show`` and ``a2e-host graph --run`` read a run store file: the
CLI's own ``main`` (in this process; spawned for the tests of its environment) on a store
written through the store's own API with known runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from a2e_host.errors import ChainFailure
from a2e_host.store import RunRecord, RunStatus
from tests.support.cli_inprocess import run_cli
from tests.support.run_store import StoredRun, request_bytes, response, write_store

CLI = [sys.executable, "-m", "a2e_host"]
T0 = 1764617400.0  # 2025-12-01 19:30:00Z

NODES = [
    {"node_id": "a", "kind": "tool", "name": "noop", "next_node": "chk"},
    {"node_id": "chk", "kind": "branch", "condition": "a.output", "true_node": "yes",
     "false_node": "no"},
    {"node_id": "yes", "kind": "tool", "name": "noop", "next_node": "m"},
    {"node_id": "no", "kind": "tool", "name": "noop"},
    {"node_id": "m", "kind": "map", "items_path": "input.items", "map_node": "t"},
    {"node_id": "t", "kind": "tool", "name": "noop", "input_map": {"x": "item"}},
]
OK_EVENTS = [
    ("a", "start", {}), ("a", "done", {"output": 1}),
    ("chk", "start", {}), ("chk", "done", {"output": {"condition": True, "taken": "yes"}}),
    ("no", "skip", {}),
    ("yes", "start", {}), ("yes", "done", {"output": "y"}),
    ("m", "start", {}),
    ("t[0]", "start", {}), ("t[1]", "start", {}), ("t[0]", "done", {"output": 0}),
    ("t[1]", "error", {"error": "boom", "data": {"code": "tool_error"}}),
    ("t[2]", "start", {}), ("t[2]", "done", {"output": 2}),
    ("m", "done", {"output": [0, None, 2]}),
]
LINE = [
    {"node_id": "a", "kind": "tool", "name": "noop", "next_node": "b"},
    {"node_id": "b", "kind": "tool", "name": "slow", "next_node": "c"},
    {"node_id": "c", "kind": "tool", "name": "noop"},
]


def _record(run_id: str, principal: str, chain_id: str, req_id: str, created: float,
            nodes: list[dict[str, object]], entry: str, **kw: object) -> RunRecord:
    return RunRecord(run_id=run_id, principal=principal, req_id=req_id, chain_id=chain_id,
                     created=created, request=request_bytes(nodes, entry, req_id=req_id,
                                                            chain_id=chain_id), **kw)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("store") / "runs.sqlite3"
    ok_resp = response("req-1", "c-ok", success=True, final_output=[0, None, 2],
                       duration_ms=250, nodes_run=5)
    fail_resp = response("req-2", "c-fail", success=False, duration_ms=75_000, nodes_run=2,
                         error=ChainFailure(code="chain_node_error", node_id="b",
                                            message="tool 'slow' failed: disk full"))
    write_store(path, [
        StoredRun(_record("r-old", "alice", "c-old", "req-0", T0 - 3600, LINE, "a",
                          status=RunStatus.SUCCEEDED, updated=T0 - 3599, retention_until=T0,
                          response=response("req-0", "c-old", success=True)),
                  [("a", "start", {}), ("a", "done", {"output": 1})]),
        StoredRun(_record("r-ok", "alice", "c-ok", "req-1", T0, NODES, "a",
                          status=RunStatus.SUCCEEDED, updated=T0 + 0.25, response=ok_resp,
                          last_seq=len(OK_EVENTS)), OK_EVENTS),
        StoredRun(_record("r-fail", "bob", "c-fail", "req-2", T0 + 60, LINE, "a",
                          status=RunStatus.FAILED, updated=T0 + 135, response=fail_resp,
                          last_seq=4),
                  [("a", "start", {}), ("a", "done", {"output": 1}), ("b", "start", {}),
                   ("b", "error", {"error": "tool 'slow' failed: disk full"})]),
        StoredRun(_record("r-cut", "alice", "c-cut", "req-3", T0 + 120, LINE, "a",
                          deadline=T0 + 420),
                  [("a", "start", {}), ("a", "done", {"output": 1}), ("b", "start", {}),
                   ("c", "start", {}),
                   ("c", "error", {"error": "interrupted by a restart",
                                   "data": {"resumed": True},
                                   "failure": ChainFailure(code="interrupted", node_id="c")})],
                  finish=(RunStatus.INTERRUPTED, response("req-3", "c-cut", success=False))),
        StoredRun(_record("r-live", "carol", "", "req-4", time.time() - 5, LINE, "a"),
                  [("a", "start", {}), ("a", "done", {"output": 1}), ("b", "start", {})]),
    ], prune_at=T0 + 1)
    return path


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``a2e-host *args``: in this process (:func:`run_cli`), or spawned with ``env`` as
    its whole environment (the tests of where the store's path comes from)."""
    if env is None:
        return run_cli(*args)
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, env=env)


def test_runs_list_prints_every_run_newest_first_with_exact_columns(store: Path) -> None:
    done = cli("runs", "list", "--store", str(store))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["RUN", "STATUS", "CHAIN", "REQ", "CREATED", "DURATION",
                                "PRINCIPAL"]
    rows = [line.split() for line in lines[1:]]
    assert [r[0] for r in rows] == ["r-live", "r-cut", "r-fail", "r-ok", "r-old"]
    assert rows[1][:3] == ["r-cut", "interrupted", "c-cut"]
    assert rows[2] == ["r-fail", "failed", "c-fail", "req-2", "2025-12-01", "19:31:00Z",
                       "1m15s", "bob"]
    assert rows[3] == ["r-ok", "succeeded", "c-ok", "req-1", "2025-12-01", "19:30:00Z",
                       "0.25s", "alice"]
    live = rows[0]
    assert live[:4] == ["r-live", "running", "-", "req-4"] and live[-1] == "carol"
    assert re.fullmatch(r"\d+\.\d\ds\+", live[6]), live  # so far, while running
    assert 5.0 <= float(live[6].rstrip("s+")) < 60.0
    assert rows[4][:2] == ["r-old", "expired"]
    assert len(lines) == 6  # no cursor line: the list is complete


def test_runs_list_status_filter_shows_only_that_status(store: Path) -> None:
    done = cli("runs", "list", "--store", str(store), "--status", "failed")
    assert done.returncode == 0, done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines()] == ["RUN", "r-fail"]
    none = cli("runs", "list", "--store", str(store), "--status", "timeout")
    assert (none.returncode, none.stdout.strip()) == (
        0, f"no runs with status timeout in {str(store)!r}")


@pytest.mark.parametrize("flags", [
    ["--status", "failed,interrupted"],
    ["--status", "interrupted", "--status", "failed"],
    ["--status", "failed", "--status", "interrupted,failed"],
    ["--failed"],
])
def test_runs_list_lists_runs_in_any_of_several_statuses(store: Path, flags: list[str]) -> None:
    done = cli("runs", "list", "--store", str(store), *flags)
    assert done.returncode == 0, done.stderr
    assert [line.split()[:2] for line in done.stdout.splitlines()[1:]] == [
        ["r-cut", "interrupted"], ["r-fail", "failed"]]


def test_runs_list_with_several_statuses_names_them_all(store: Path) -> None:
    none = cli("runs", "list", "--store", str(store), "--status", "timeout",
               "--status", "cancelled")
    assert (none.returncode, none.stdout.strip()) == (
        0, f"no runs with status cancelled or timeout in {str(store)!r}")
    first = cli("runs", "list", "--store", str(store), "--failed", "--limit", "1")
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == (
        f"(more runs: a2e-host runs list --store {store} --status "
        "failed,cancelled,timeout,interrupted,budget_exhausted --cursor r4)")
    rest = cli("runs", "list", "--store", str(store), "--failed", "--cursor", "r4")
    assert [line.split()[0] for line in rest.stdout.splitlines()] == ["RUN", "r-fail"]
    bad = cli("runs", "list", "--store", str(store), "--status", "failed,oops")
    assert bad.returncode == 2
    assert bad.stderr.startswith("a2e-host runs list: unknown --status 'oops'; use one of:")


def test_runs_list_pages_through_the_store_with_its_cursor(store: Path) -> None:
    first = cli("runs", "list", "--store", str(store), "--limit", "3")
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert [line.split()[0] for line in lines[1:4]] == ["r-live", "r-cut", "r-fail"]
    more = re.fullmatch(r"\(more runs: a2e-host runs list --store (\S+) --cursor (\S+)\)",
                        lines[4])
    assert more is not None and more.group(1) == str(store), lines
    rest = cli("runs", "list", "--store", str(store), "--cursor", more.group(2), "--json")
    assert rest.returncode == 0, rest.stderr
    body = json.loads(rest.stdout)
    assert [r["run_id"] for r in body["runs"]] == ["r-ok", "r-old"]
    assert body["next_cursor"] is None


def test_runs_list_json_gives_each_record_without_request_or_response(store: Path) -> None:
    done = cli("runs", "list", "--store", str(store), "--status", "succeeded", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"runs": [{
        "run_id": "r-ok", "status": "succeeded", "chain_id": "c-ok", "req_id": "req-1",
        "principal": "alice", "created": T0, "updated": T0 + 0.25, "duration_s": 0.25,
        "last_seq": 15, "deadline": None, "idempotency_key": None,
        "retention_until": None}], "next_cursor": None}


def test_runs_show_prints_the_record_and_a_response_summary(store: Path) -> None:
    done = cli("runs", "show", "r-fail", "--store", str(store))
    assert done.returncode == 0, done.stderr
    fields = dict(re.split(r":\s+", line, maxsplit=1) for line in done.stdout.splitlines())
    assert fields["run"] == "r-fail" and fields["status"] == "failed"
    assert (fields["chain"], fields["req"], fields["principal"]) == ("c-fail", "req-2", "bob")
    assert fields["created"] == "2025-12-01 19:31:00Z"
    assert fields["updated"] == "2025-12-01 19:32:15Z"
    assert (fields["duration"], fields["last seq"]) == ("1m15s", "4")
    assert fields["response"] == ("failed (chain_node_error) at node 'b' in 75000 ms, 2 nodes "
                                  "run: tool 'slow' failed: disk full")
    assert "events" not in fields


def test_runs_show_events_prints_each_stored_frame_as_one_line(store: Path) -> None:
    done = cli("runs", "show", "r-ok", "--events", "--store", str(store))
    assert done.returncode == 0, done.stderr
    head, events = done.stdout.split("events:\n")
    assert "response:        succeeded in 250 ms, 5 nodes run; final_output: [0,null,2]" in head
    lines = [line.split(None, 3) for line in events.splitlines()]
    assert [(int(seq), node, phase) for seq, node, phase, *_ in lines] == [
        (i, node, phase) for i, (node, phase, _) in enumerate(OK_EVENTS, start=1)]
    assert lines[1][3] == "output: 1"
    assert lines[3][3] == 'output: {"condition":true,"taken":"yes"}'
    assert lines[11][3] == "error [tool_error]: boom"


def test_runs_show_events_name_a_kept_failures_code_and_a_resumed_event(store: Path) -> None:
    done = cli("runs", "show", "r-cut", "--events", "--store", str(store))
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1].split(None, 3)
    assert last == ["5", "c", "error",
                    "error [interrupted]: interrupted by a restart  (resumed)"]


def test_runs_show_events_after_and_limit_page_within_the_log(store: Path) -> None:
    done = cli("runs", "show", "r-ok", "--events", "--after", "10", "--limit", "3",
               "--store", str(store))
    assert done.returncode == 0, done.stderr
    events = done.stdout.split("events:\n")[1].splitlines()
    assert [int(line.split()[0]) for line in events] == [11, 12, 13]


def test_runs_show_json_events_are_the_stored_frames_verbatim(store: Path) -> None:
    done = cli("runs", "show", "r-fail", "--events", "--json", "--store", str(store))
    assert done.returncode == 0, done.stderr
    first, *frames = (json.loads(line) for line in done.stdout.splitlines())
    assert first["run"]["run_id"] == "r-fail" and first["run"]["status"] == "failed"
    assert first["response"]["error"]["code"] == "chain_node_error"
    assert [(f["type"], f["seq"], f["node_id"], f["phase"]) for f in frames] == [
        ("chain/event", 1, "a", "start"), ("chain/event", 2, "a", "done"),
        ("chain/event", 3, "b", "start"), ("chain/event", 4, "b", "error")]
    assert frames[3]["error"] == "tool 'slow' failed: disk full"


def test_unknown_run_is_one_line_naming_it_and_exit_1(store: Path) -> None:
    for argv in (["runs", "show", "nope"], ["graph", "--run", "nope"]):
        done = cli(*argv, "--store", str(store))
        assert done.returncode == 1, argv
        assert done.stdout == ""
        assert done.stderr.count("\n") == 1 and "no run 'nope' in" in done.stderr, argv


def test_expired_run_is_one_line_saying_its_events_were_pruned_and_exit_1(
        store: Path) -> None:
    for argv in (["runs", "show", "r-old", "--events"], ["graph", "--run", "r-old"]):
        done = cli(*argv, "--store", str(store))
        assert (done.returncode, done.stdout) == (1, ""), argv
        assert done.stderr.endswith(
            "run 'r-old' has expired: its retention ended and its events and response were "
            "pruned (only its record is left, shown by 'a2e-host runs list')\n")
        assert done.stderr.count("\n") == 1


def test_missing_store_is_one_line_and_exit_2(tmp_path: Path) -> None:
    gone = tmp_path / "nowhere.sqlite3"
    for argv in (["runs", "list"], ["runs", "show", "r-ok"], ["graph", "--run", "r-ok"]):
        done = cli(*argv, "--store", str(gone))
        assert done.returncode == 2, argv
        assert done.stderr.strip().endswith(f"run store {str(gone)!r} does not exist; check "
                                            "the path given to --store (or A2E_STORE)")
        assert done.stderr.count("\n") == 1
    assert not gone.exists()  # reading never creates a store


def test_no_store_named_says_how_to_name_one(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("A2E_STORE", "A2E_CONFIG")}
    done = cli("runs", "list", env=env)
    assert done.returncode == 2
    assert done.stderr == ("a2e-host runs list: no run store named: pass --store PATH (the "
                           "file 'a2e-host serve --store' writes), or set A2E_STORE\n")


def test_store_from_the_environment_is_read(store: Path) -> None:
    env = dict(os.environ, A2E_STORE=str(store))
    done = cli("runs", "list", "--status", "succeeded", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1].split()[0] == "r-ok"


def test_store_from_the_config_file_is_read(store: Path, tmp_path: Path) -> None:
    config = tmp_path / "host.toml"
    config.write_text(f'[store]\npath = "{store}"\n', encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "A2E_STORE"}
    done = cli("runs", "list", "--status", "failed", "-c", str(config), env=env)
    assert done.returncode == 0, done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines()] == ["RUN", "r-fail"]


def test_a_file_that_is_not_a_store_is_refused_in_one_line(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.txt"
    bogus.write_text("not a database, just text\n" * 100)
    done = cli("runs", "list", "--store", str(bogus))
    assert done.returncode == 2
    assert done.stderr.startswith(f"a2e-host runs list: cannot read run store {str(bogus)!r}")
    assert done.stderr.count("\n") == 1


def test_unknown_status_lists_the_statuses(store: Path) -> None:
    done = cli("runs", "list", "--store", str(store), "--status", "done")
    assert done.returncode == 2
    assert done.stderr == (
        "a2e-host runs list: unknown --status 'done'; use one of: running, succeeded, "
        "failed, cancelled, timeout, interrupted, budget_exhausted, expired (several: "
        "--status failed,interrupted, or --failed for every unsuccessful one)\n")


def test_graph_run_colours_each_node_by_its_outcome(store: Path) -> None:
    done = cli("graph", "--run", "r-ok", "--store", str(store))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    classes = {line.split()[2]: line.split()[1].split(",")
               for line in lines if line.strip().startswith("class ")}
    assert classes == {"done": ["a", "chk", "yes", "m"], "error": ["t"], "skipped": ["no"]}
    defs = [line.split()[1] for line in lines if line.strip().startswith("classDef ")]
    assert defs == ["done", "error", "skipped", "running", "interrupted", "never_started"]
    template = next(line for line in lines if line.strip().startswith('t["'))
    assert "items: 2 done · 1 error" in template


def test_graph_run_shows_unended_nodes_running_or_interrupted(store: Path) -> None:
    live = cli("graph", "--run", "r-live", "--store", str(store))
    assert live.returncode == 0, live.stderr
    assert [line.strip() for line in live.stdout.splitlines()
            if line.strip().startswith("class ")] == ["class a done", "class b running",
                                                       "class c never_started"]
    cut = cli("graph", "--run", "r-cut", "--store", str(store))
    assert cut.returncode == 0, cut.stderr
    assert [line.strip() for line in cut.stdout.splitlines()
            if line.strip().startswith("class ")] == ["class a done", "class b,c interrupted"]


def test_graph_run_in_dot_fills_nodes_with_their_outcome_colour(store: Path) -> None:
    done = cli("graph", "--run", "r-fail", "--store", str(store), "--format", "dot")
    assert done.returncode == 0, done.stderr
    fills = dict(re.findall(r'^\s+"(\w+)" \[.*fillcolor="(#\w+)"\];$', done.stdout, re.M))
    assert fills == {"a": "#d3f9d8", "b": "#ffc9c9", "c": "#ffffff"}  # c: never started


def test_graph_needs_either_a_file_or_a_run() -> None:
    done = cli("graph")
    assert done.returncode == 2
    assert done.stderr == ("a2e-host graph: give either CHAIN.json or --run RUN (see "
                           "'a2e-host graph --help')\n")


def test_control_characters_from_a_stored_request_are_shown_escaped(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    sneaky = [{"node_id": "a\x1b[2J", "kind": "tool", "name": "noop"}]
    write_store(path, [StoredRun(
        _record("r-esc", "eve\x07", "c", "q", T0, sneaky, "a\x1b[2J",
                status=RunStatus.FAILED, updated=T0 + 1,
                response=response("q", "c", success=False)),
        [("a\x1b[2J", "start", {}), ("a\x1b[2J", "error", {"error": "bad\x9b31m"})])])
    for argv in (["runs", "list"], ["runs", "show", "r-esc", "--events"],
                 ["graph", "--run", "r-esc"]):
        done = cli(*argv, "--store", str(path))
        assert done.returncode == 0, (argv, done.stderr)
        assert not any(c in done.stdout for c in "\x1b\x07\x9b"), argv
    shown = cli("runs", "show", "r-esc", "--events", "--store", str(path)).stdout
    assert "principal:       eve\\x07" in shown
    assert shown.splitlines()[-1].split() == ["2", "a\\x1b[2J", "error", "error:", "bad\\x9b31m"]
