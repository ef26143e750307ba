"""``a2e-host graph --events`` given events files made by hand or by an attacker: each is
read in bounded time and memory and is either drawn or refused with one line, never a
traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import msgspec

from a2e_host.commands.graph_events import read_events
from a2e_host.commands.run_trace import RunTrace

CLI = [sys.executable, "-m", "a2e_host"]
CHAIN = {"entry_node": "a", "nodes": [
    {"node_id": "a", "kind": "tool", "name": "word_count", "input": {"text": "x"},
     "next_node": "b"},
    {"node_id": "b", "kind": "tool", "name": "word_count", "input": {"text": "y"}}]}


def event(seq: int, node_id: str, phase: str, ts: float = 1_800_000_000.0, **fields: object
          ) -> bytes:
    return msgspec.json.encode({"type": "chain/event", "seq": seq, "ts": ts,
                                "node_id": node_id, "phase": phase, **fields})


def graph(tmp_path: Path, lines: list[bytes], *args: str) -> subprocess.CompletedProcess[str]:
    chain = tmp_path / "chain.json"
    chain.write_text(json.dumps(CHAIN), encoding="utf-8")
    events = tmp_path / "run.ndjson"
    events.write_bytes(b"".join(line + b"\n" for line in lines))
    return subprocess.run([*CLI, "graph", str(chain), "--events", str(events), *args],
                          capture_output=True, text=True, timeout=60)


def test_deeply_nested_json_in_an_event_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    for field in (b"data", b"other"):  # a field the fold reads, and one it skips
        line = b'{"type":"chain/event","seq":1,"ts":1,"node_id":"a","phase":"start","%s":%s}' % (
            field, deep)
        done = graph(tmp_path, [line], "--format", "html")
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        assert done.stderr == (
            "a2e-host graph: line 1 of events file "
            f"{str(tmp_path / 'run.ndjson')!r} is not a chain/event or chain/resp (its JSON "
            "is nested too deeply); pass the NDJSON file 'a2e-host run --record' wrote\n")


def test_a_large_data_or_error_field_costs_its_bytes_not_a_python_object_per_element(
        ) -> None:
    many = b"[" + b"[]," * 700_000 + b"[]]"  # 2 MB of JSON: 700,001 lists if decoded
    lines = [
        event(1, "a", "start").replace(b'"phase":"start"', b'"phase":"start","data":' + many),
        event(2, "a", "error", error="boom").replace(
            b'"error":"boom"', b'"error":"boom","data":{"attempts":2,"errors":' + many + b"}"),
        msgspec.json.encode({"type": "chain/resp", "ts": 1_800_000_001.0, "success": False,
                             "error": {"code": "chain_node_error", "message": "m",
                                       "node_id": "a"}})[:-1] + b',"details":' + many + b"}",
    ]
    trace = RunTrace()
    tracemalloc.start()
    try:
        for line in lines:
            trace.add_frame(line)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024, f"{peak:,} bytes to fold three 2 MB lines"
    # a data too large to be a host's is not read for attempts; the failure stays
    assert [(f.node_id, f.code, f.message, f.attempts) for f in trace.failures] == [
        ("a", "chain_node_error", "boom", 1)]
    assert trace.end is not None and trace.end.code == "chain_node_error"


def test_a_failures_message_is_kept_cut_so_many_long_messages_stay_small(
        tmp_path: Path) -> None:
    path = tmp_path / "run.ndjson"
    with path.open("wb") as file:
        for i in range(50):
            file.write(event(i + 1, f"t[{i}]", "error", error="x" * 1_000_000) + b"\n")
    trace = read_events(path)
    assert len(trace.failures) == 50
    assert {len(f.message) for f in trace.failures} == {4096}


def test_events_of_another_chain_are_drawn_with_a_warning_naming_the_first_unknown_node(
        tmp_path: Path) -> None:
    lines = [event(1, "a", "start"), event(2, "a", "done"),
             event(3, "other[0]", "start"), event(4, "other[0]", "error", error="x"),
             event(5, "zzz", "skip")]
    done = graph(tmp_path, lines, "--format", "html")
    assert done.returncode == 0
    assert done.stderr == (
        f"a2e-host graph: warning: events file {str(tmp_path / 'run.ndjson')!r} names 2 "
        f"nodes that {str(tmp_path / 'chain.json')!r} does not declare (first: 'other'); "
        "draw it on the chain file it was recorded from\n")
    assert ("<p class=\"warn\"><b>The events name 2 nodes this chain does not declare</b> "
            "(first: <code>other</code>)") in done.stdout
    same = graph(tmp_path, lines[:2])
    assert same.returncode == 0 and same.stderr == ""


BIDI_ID = "admin\u202egnp.exe\u2066x\u2069\u2028y\u200f"
FORMATTING = "\u202e\u2066\u2069\u2028\u200f"


def test_bidi_overrides_and_line_separators_in_ids_and_messages_are_shown_not_obeyed(
        tmp_path: Path) -> None:
    chain = tmp_path / "chain.json"
    chain.write_text(json.dumps({"entry_node": BIDI_ID, "nodes": [
        {"node_id": BIDI_ID, "kind": "tool", "name": "word_count", "input": {"text": "x"}}]}),
        encoding="utf-8")
    events = tmp_path / "run.ndjson"
    events.write_bytes(event(1, BIDI_ID, "start") + b"\n" + event(
        2, BIDI_ID, "error", error="rm -rf \u202e/ fi\u2028done") + b"\n")
    for format in ("html", "mermaid", "dot"):
        done = subprocess.run([*CLI, "graph", str(chain), "--events", str(events),
                               "--format", format], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        assert not set(done.stdout) & set(FORMATTING), format
    page = subprocess.run([*CLI, "graph", str(chain), "--events", str(events), "--format",
                           "html"], capture_output=True, text=True, timeout=60).stdout
    assert "admin\ufffdgnp.exe\ufffdx\ufffd\ufffdy\ufffd" in page
    assert "rm -rf \ufffd/ fi\ufffddone" in page


def test_events_out_of_order_repeated_ends_and_two_responses_are_said_on_the_page(
        ) -> None:
    from a2e_host.chains.messages import ChainNode
    from a2e_host.commands.run_page import render_page

    response = msgspec.json.encode({"type": "chain/resp", "ts": 1_800_000_009.0,
                                    "success": True})
    trace = RunTrace()
    for line in (event(1, "a", "start"), event(3, "a", "done"), event(2, "b", "start"),
                 event(4, "a", "error", error="late"), event(5, "b", "done"),
                 response, response):
        trace.add_frame(line)
    # 1, 3: a gap; 2: out of order; 4 after 2: a gap again
    assert (trace.seq_gaps, trace.seq_disorder, trace.repeated_ends, trace.responses) == (
        2, 1, 1, 2)
    page = render_page([ChainNode(node_id="a", kind="tool", name="x"),
                        ChainNode(node_id="b", kind="tool", name="x")], trace, title="t")
    assert ("<b>1 events out of seq order, 1 nodes ended twice, 2 responses: this is not a "
            "record as the host writes it, and what is drawn may be wrong</b>") in page
    clean = RunTrace()
    for line in (event(1, "a", "start"), event(2, "a", "done"), response):
        clean.add_frame(line)
    assert (clean.seq_gaps, clean.seq_disorder, clean.repeated_ends, clean.responses) == (
        0, 0, 0, 1)


def test_a_single_line_that_is_not_a_frame_is_refused_even_without_a_newline(
        tmp_path: Path) -> None:
    chain = tmp_path / "chain.json"
    chain.write_text(json.dumps(CHAIN), encoding="utf-8")
    events = tmp_path / "photo.jpg"
    events.write_bytes(b"\xff\xd8\xff\xe0 not json at all")
    done = subprocess.run([*CLI, "graph", str(chain), "--events", str(events)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"a2e-host graph: line 1 of events file {str(events)!r} "
                                  "is not a chain/event or chain/resp (")
