"""``a2e-host graph CHAIN --events FILE`` (mermaid, dot, html): each node's outcome class
and duration from a recorded run; the HTML page escapes what the run holds and stays
bounded however large the run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import msgspec

from a2e_host.chains.messages import ChainNode
from a2e_host.commands.graph_events import read_events
from a2e_host.commands.run_page import render_page
from a2e_host.commands.run_trace import RunTrace

CLI = [sys.executable, "-m", "a2e_host"]
T0 = 1_800_000_000.0

CHAIN: dict[str, Any] = {
    "entry_node": "ok",
    "nodes": [
        {"node_id": "ok", "kind": "tool", "name": "word_count", "next_node": "m"},
        {"node_id": "m", "kind": "map", "items_path": "ok.output.items", "map_node": "t",
         "next_node": "bad"},
        {"node_id": "t", "kind": "tool", "name": "word_count"},
        {"node_id": "bad", "kind": "tool", "name": "read_file", "on_error": "sk",
         "next_node": "cut"},
        {"node_id": "sk", "kind": "tool", "name": "word_count"},
        {"node_id": "cut", "kind": "tool", "name": "word_count", "next_node": "never"},
        {"node_id": "never", "kind": "tool", "name": "word_count"},
    ],
}


class Frames:
    """A recording written frame by frame, ``seq`` stamped as the host stamps it."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def event(self, node_id: str, phase: str, at: float, **fields: Any) -> None:
        frame = {"type": "chain/event", "ts": T0 + at, "kind": "status", "req_id": "r",
                 "data": {}, "seq": len(self.lines) + 1, "node_id": node_id,
                 "phase": phase, "output": None, "error": "", **fields}
        self.lines.append(msgspec.json.encode(frame))

    def response(self, at: float, **fields: Any) -> None:
        frame = {"type": "chain/resp", "ts": T0 + at, "req_id": "r", "success": True,
                 "duration_ms": int(at * 1000), "error": None, **fields}
        self.lines.append(msgspec.json.encode(frame))

    def write(self, path: Path) -> Path:
        path.write_bytes(b"".join(line + b"\n" for line in self.lines))
        return path


def every_outcome() -> Frames:
    """ok done in 250 ms; m's 13 items: 12 done, 1 error; bad fails after 3 attempts;
    sk skipped; cut started and never ended (no chain/resp: the run was cut off)."""
    frames = Frames()
    frames.event("ok", "start", 0.0)
    frames.event("ok", "done", 0.25)
    frames.event("m", "start", 0.25)
    for i in range(13):
        frames.event(f"t[{i}]", "start", 0.3 + i * 0.01)
    for i in range(13):
        if i == 7:
            frames.event("t[7]", "error", 0.5, error="item 7 broke")
        else:
            frames.event(f"t[{i}]", "done", 0.5 + i * 0.01)
    frames.event("m", "done", 0.75)
    frames.event("bad", "start", 0.75)
    frames.event("bad", "error", 1.0, error="file 'x' not found", data={
        "attempts": 3, "errors": [{"attempt": 3, "tool": "read_file", "code": "not_found",
                                   "error": "file 'x' not found"}], "fallback_used": False})
    frames.event("sk", "skip", 1.0)
    frames.event("cut", "start", 1.0)
    return frames


def graph(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "graph", *args], capture_output=True, text=True, timeout=60)


def test_events_file_draws_each_outcome_class_with_durations_and_item_counts(
        tmp_path: Path) -> None:
    chain = tmp_path / "chain.json"
    chain.write_text(json.dumps(CHAIN), encoding="utf-8")
    events = every_outcome().write(tmp_path / "run.ndjson")
    done = graph(str(chain), "--events", str(events))
    assert done.returncode == 0, done.stderr
    lines = [line.strip() for line in done.stdout.splitlines()]
    assert [line for line in lines if line.startswith("class ")] == [
        "class ok,m done", "class t,bad error", "class sk skipped",
        "class cut interrupted", "class never never_started"]
    assert 'ok["ok<br/>tool word_count<br/>done in 250 ms"]' in lines
    assert 'm[["m<br/>map<br/>done in 500 ms"]]' in lines
    assert ('t["t<br/>tool word_count<br/>items: 12 done · 1 error<br/>error in 320 ms"]'
            in lines)
    assert 'bad["bad<br/>tool read_file<br/>error in 250 ms"]' in lines
    assert 'never["never<br/>tool word_count"]' in lines
    dot = graph(str(chain), "--events", str(events), "--format", "dot")
    assert dot.returncode == 0, dot.stderr
    assert ('"cut" [label="cut\\ntool word_count", shape=box, style="filled,dashed", '
            'color="#e67700", fillcolor="#ffec99"];') in dot.stdout


def test_trace_lists_failures_with_code_and_attempts_and_the_chains_own_error() -> None:
    frames = every_outcome()
    frames.response(1.5, success=False, error={
        "code": "timeout", "message": "the chain ran past its 1 s timeout", "node_id": "",
        "retryable": True, "details": {}})
    trace = RunTrace()
    for line in frames.lines:
        trace.add_frame(line)
    assert [(f.node_id, f.code, f.message, f.attempts) for f in trace.failures] == [
        ("t[7]", "", "item 7 broke", 1),
        ("bad", "not_found", "file 'x' not found", 3),
        ("", "timeout", "the chain ran past its 1 s timeout", 1)]
    assert trace.frames == len(frames.lines) - 1 and trace.seq_gaps == 0
    outcomes = trace.outcomes()  # the response was folded: unended nodes are interrupted
    assert outcomes["cut"].outcome == "interrupted" and outcomes["cut"].duration_ms is None
    assert dict(outcomes["t"].items) == {"done": 12, "error": 1}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.text: list[str] = []
        self.attrs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs.extend(name for name, _ in attrs)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


HOSTILE_ID = '<script>alert("id")<img src=x onerror=alert(0)>'  # no "/": a declared id'
HOSTILE_MESSAGE = '</td></table><img src=x onerror=alert(1)><script>alert(2)</script>&amp;'


def test_html_page_shows_hostile_ids_and_messages_as_text() -> None:
    nodes = [ChainNode(node_id=HOSTILE_ID, kind="tool", name="<b>tool</b>",
                       next_node="x\x1b[31m"),
             ChainNode(node_id="x\x1b[31m", kind="tool", name="t")]
    frames = Frames()
    frames.event(HOSTILE_ID, "start", 0.0)
    frames.event(HOSTILE_ID, "error", 0.1, error=HOSTILE_MESSAGE,
                 data={"code": '"><svg onload=alert(3)>'})
    frames.response(0.2, success=False, error={
        "code": "chain_node_error", "message": HOSTILE_MESSAGE, "node_id": HOSTILE_ID})
    trace = RunTrace()
    for line in frames.lines:
        trace.add_frame(line)
    page = render_page(nodes, trace, title="<script>title</script>")
    parsed = _Tags()
    parsed.feed(page)
    assert "script" not in parsed.tags and "img" not in parsed.tags
    assert not [name for name in parsed.attrs if name.startswith("on")]
    assert parsed.tags >= {"svg", "rect", "table"}
    text = "".join(parsed.text)
    assert HOSTILE_ID in text  # shown as the text it is
    assert HOSTILE_MESSAGE in text
    assert '"><svg onload=alert(3)>' in text
    assert "\x1b" not in page and "x\ufffd[31m" in text  # control characters shown, inert
    assert "<script>title</script>" in text


def test_a_map_of_100000_items_renders_a_bounded_page(tmp_path: Path) -> None:
    nodes = [ChainNode(node_id="m", kind="map", items_path="input.xs", map_node="t"),
             ChainNode(node_id="t", kind="tool", name="word_count")]
    path = tmp_path / "big.ndjson"
    seq = 0
    with path.open("wb") as file:
        def emit(node_id: str, phase: str, at: float, error: str = "") -> None:
            nonlocal seq
            seq += 1
            file.write(b'{"type":"chain/event","ts":%.6f,"seq":%d,"node_id":"%s",'
                       b'"phase":"%s","error":"%s","data":{}}\n'
                       % (T0 + at, seq, node_id.encode(), phase.encode(), error.encode()))
        emit("m", "start", 0.0)
        for i in range(100_000):
            emit(f"t[{i}]", "start", i * 1e-4)
            emit(f"t[{i}]", "error" if i % 100 == 0 else "done", i * 1e-4 + 5e-5,
                 f"item {i} failed" if i % 100 == 0 else "")
        emit("m", "error", 10.0, "1000 items failed")
    trace = read_events(path)
    assert dict(trace.outcomes()["t"].items) == {"done": 99_000, "error": 1_000}
    assert len(trace.failures) == 200 and trace.failures_left_out == 801
    page = render_page(nodes, trace, title="big")
    assert len(page) < 150_000
    assert "99,000 done, 1,000 error" in page
    assert "801 more failures left out (the first 200 are listed)." in page
    assert page.count("<tr><td class=\"nid\">") == 200  # the failures table's rows


def test_a_chain_of_1000_nodes_caps_the_diagram_and_the_timeline() -> None:
    nodes = [ChainNode(node_id=f"n{i}", kind="tool", name="word_count") for i in range(1000)]
    frames = Frames()
    for i in range(1000):
        frames.event(f"n{i}", "start", i * 0.001)
        frames.event(f"n{i}", "done", i * 0.001 + 0.0005)
    trace = RunTrace()
    for line in frames.lines:
        trace.add_frame(line)
    page = render_page(nodes, trace, title="wide")
    assert page.count("<g class=\"node done\"") == 400
    assert "600 more nodes not drawn (the first 400 are)." in page
    assert page.count("<tr class=\"done\">") == 500
    assert "500 more rows left out (the first 500 by start are shown)." in page
    assert len(page) < 600_000


def test_events_file_that_is_not_ndjson_frames_is_one_line_naming_the_line(
        tmp_path: Path) -> None:
    chain = tmp_path / "chain.json"
    chain.write_text(json.dumps(CHAIN), encoding="utf-8")
    events = tmp_path / "run.ndjson"
    events.write_text('{"type":"chain/event","seq":1,"node_id":"ok","phase":"start"}\n'
                      '[1, 2]\n', encoding="utf-8")
    done = graph(str(chain), "--events", str(events), "--format", "html")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"a2e-host graph: line 2 of events file {str(events)!r} "
                                  "is not a chain/event or chain/resp (")
    assert done.stderr.count("\n") == 1
    plain = graph(str(chain), "--format", "html")
    assert plain.returncode == 2
    assert "--format html draws a run: add --events FILE" in plain.stderr


def test_a_recorded_failing_run_lists_its_failure_on_the_page(tmp_path: Path) -> None:
    chain = tmp_path / "chain.json"
    chain.write_text(json.dumps({"entry_node": "files", "nodes": [
        {"node_id": "files", "kind": "tool", "name": "read_file",
         "input": {"path": "missing.txt"}, "next_node": "after"},
        {"node_id": "after", "kind": "tool", "name": "word_count", "input": {"text": "x"}},
    ]}), encoding="utf-8")
    record = tmp_path / "run.ndjson"
    run = subprocess.run([*CLI, "run", str(chain), "--json", "--record", str(record)],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    frames = [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]
    assert [(f.get("node_id"), f.get("phase")) for f in frames[:-1]] == [
        ("files", "start"), ("files", "error")]
    message = frames[1]["error"]
    assert message == "read_file: 'missing.txt' does not exist under the root"
    done = graph(str(chain), "--events", str(record), "--format", "html")
    assert done.returncode == 0, done.stderr
    parsed = _Tags()
    parsed.feed(done.stdout)
    text = "".join(parsed.text)
    assert "failed: chain_node_error at node files" in text
    # the failures table: node, code (the response's, which names the node), the
    # event's message, attempts
    assert f"fileschain_node_error{message}1" in text.replace("\n", "")
    assert '<g class="node error" data-node-id="files">' in done.stdout
    assert '<g class="node never_started" data-node-id="after">' in done.stdout


def test_a_stored_run_draws_as_a_page_with_its_kept_failure_code(tmp_path: Path) -> None:
    from a2e_host.errors import ChainFailure
    from a2e_host.store import RunRecord, RunStatus
    from tests.support.run_store import StoredRun, request_bytes, response, write_store

    nodes: list[dict[str, Any]] = [
        {"node_id": "a", "kind": "tool", "name": "noop", "next_node": "b"},
        {"node_id": "b", "kind": "tool", "name": "noop", "next_node": "c"},
        {"node_id": "c", "kind": "tool", "name": "noop"}]
    store = tmp_path / "runs.sqlite3"
    record = RunRecord(run_id="r1", principal="p", req_id="q1", chain_id="c1", created=T0,
                       request=request_bytes(nodes, "a", req_id="q1", chain_id="c1"))
    write_store(store, [StoredRun(record, [
        ("a", "start", {}), ("a", "done", {"output": 1}), ("b", "start", {}),
        ("b", "error", {"error": "<disk> full", "failure": ChainFailure(
            code="tool_error", node_id="b", message="<disk> full")})],
        finish=(RunStatus.FAILED, response("q1", "c1", success=False, error=ChainFailure(
            code="chain_node_error", node_id="b", message="<disk> full"))))])
    done = graph("--run", "r1", "--store", str(store), "--format", "html")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("<!DOCTYPE html>")
    assert ("<tr><td class=\"nid\">b</td><td><code>tool_error</code></td>"
            "<td class=\"msg\">&lt;disk&gt; full</td><td>1</td><td></td></tr>") in done.stdout
    outcomes = dict(re.findall(r'<g class="node (\w+)" data-node-id="(\w+)"', done.stdout))
    assert outcomes == {"done": "a", "error": "b", "never_started": "c"}
