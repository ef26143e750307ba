"""ChainProgress: the state behind ``a2e-host run``'s live table and plain lines."""

from __future__ import annotations

import pytest
from rich.console import Console

from a2e_host.chains.messages import ChainEvent, ChainNode, ChainRequest, ChainResponse
from a2e_host.errors import ChainFailure
from a2e_host.progress import ChainProgress, format_duration

REQUEST = ChainRequest(
    chain_id="demo",
    entry_node="list",
    initial_input={"names": ["a", "b", "c"]},
    nodes=[
        ChainNode(node_id="list", kind="tool", name="echo", input_map={"names": "input.names"},
                  next_node="each"),
        ChainNode(node_id="each", kind="map", items_path="list.output.names", map_node="shout"),
        ChainNode(node_id="shout", kind="tool", name="upper", input_map={"text": "item"}),
    ],
)


HOST = 1000.0  # the host's clock runs this far ahead of the caller's in these tests


def event(seq: int, node_id: str, phase: str, output: object = None, error: str = "",
          *, at: float = 0.0) -> ChainEvent:
    """An event the host stamped at ``at`` on the caller's clock (``ts`` = ``HOST + at``)."""
    return ChainEvent(req_id="r", seq=seq, node_id=node_id, phase=phase, output=output,
                      error=error, ts=HOST + at)


def test_map_total_is_computed_from_items_path_when_the_map_starts() -> None:
    progress = ChainProgress(REQUEST, now=0.0)
    progress.feed(event(1, "list", "start", at=0.0), 0.0)
    progress.feed(event(2, "list", "done", {"names": ["a", "b", "c"]}, at=0.5), 0.5)
    progress.feed(event(3, "each", "start", at=0.5), 0.5)
    each = progress.nodes["each"]
    assert each.items_total == 3
    progress.feed(event(4, "shout[0]", "start", at=0.6), 0.6)
    progress.feed(event(5, "shout[0]", "done", {"text": "A"}, at=0.7), 0.7)
    progress.feed(event(6, "shout[2]", "start", at=0.7), 0.7)
    progress.feed(event(7, "shout[2]", "error", error="boom", at=0.8), 0.8)
    assert (each.items_started, each.items_done, each.items_failed) == (2, 1, 1)
    assert "shout" not in progress.nodes  # a template shows through its map
    assert progress.nodes["list"].duration(HOST + 9.0) == 0.5
    assert each.duration(HOST + 1.0) == 0.5  # still running: measured to now


def test_map_total_unknown_when_items_path_cannot_be_evaluated_yet() -> None:
    progress = ChainProgress(REQUEST, now=0.0)
    progress.feed(event(1, "each", "start", at=0.0), 0.0)  # list's output never seen
    assert progress.nodes["each"].items_total is None
    progress.feed(event(2, "each", "done", [{"text": "A"}, {"text": "B"}], at=1.0), 1.0)
    assert progress.nodes["each"].items_total == 2


def test_plain_lines_name_phase_node_kind_and_error() -> None:
    progress = ChainProgress(REQUEST, now=0.0)
    start = event(1, "list", "start", at=0.0)
    progress.feed(start, 0.0)
    assert progress.plain_line(start, 0.0) == "[  1] start list (tool echo)"
    failed = event(2, "list", "error", error="echo exploded", at=0.25)
    progress.feed(failed, 0.25)
    assert progress.plain_line(failed, 0.25) == "[  2] error list  250 ms  error: echo exploded"


def test_rendered_table_shows_statuses_and_the_items_bar() -> None:
    progress = ChainProgress(REQUEST, now=0.0)
    for seq, (node_id, phase, output) in enumerate(
        [("list", "start", None), ("list", "done", {"names": ["a", "b"]}), ("each", "start", None),
         ("shout[0]", "start", None), ("shout[0]", "done", {"text": "A"})],
        start=1,
    ):
        progress.feed(event(seq, node_id, phase, output, at=float(seq)), float(seq))
    console = Console(width=100, record=True, color_system=None)
    console.print(progress.render(6.0))
    text = console.export_text()
    assert "✓ done" in text and "▶ running" in text
    assert "1/2" in text
    progress.finish(ChainResponse(req_id="r", chain_id="demo", success=True, nodes_run=2,
                                  duration_ms=42), 7.0)
    assert progress.summary() == "chain demo succeeded: 2 nodes in 42 ms"


def test_failure_summary_names_code_and_node() -> None:
    progress = ChainProgress(REQUEST, now=0.0)
    progress.finish(ChainResponse(req_id="r", chain_id="demo", success=False, error=ChainFailure(
        code="chain_node_error", message="upper: 'text' is required", node_id="each",
    )), 1.0)
    assert progress.summary() == (
        "chain demo failed (chain_node_error) at node 'each': upper: 'text' is required"
    )


def test_durations_read_in_sensible_units() -> None:
    assert [format_duration(s) for s in (None, 0.004, 2.5, 125.0)] == [
        "", "4 ms", "2.50 s", "2 min 05.0 s",
    ]


@pytest.mark.parametrize(("nodes_run", "said"), [(1, "1 node"), (0, "0 nodes"), (3, "3 nodes")])
def test_the_summary_counts_nodes_in_good_grammar(nodes_run: int, said: str) -> None:
    progress = ChainProgress(REQUEST, now=0.0)
    progress.finish(ChainResponse(req_id="r", chain_id="demo", success=True,
                                  nodes_run=nodes_run, duration_ms=5), 1.0)
    assert progress.summary() == f"chain demo succeeded: {said} in 5 ms"


def test_a_node_s_attempts_are_lines_of_their_own_not_new_starts() -> None:
    progress = ChainProgress(REQUEST, now=0.0)
    progress.feed(event(1, "list", "start", at=0.0), 0.0)
    retried = ChainEvent(req_id="r", seq=2, node_id="list", phase="start", kind="progress",
                         data={"attempt": 1, "of": 3, "error": "busy", "code": "x",
                               "retry_in_s": 0.5}, ts=HOST + 0.4)
    progress.feed(retried, 0.4)
    assert progress.nodes["list"].started == HOST
    assert progress.plain_line(retried, 0.4) == "[  2] retry list  attempt 1/3 failed: busy"
    progress.feed(event(3, "each", "start", at=1.0), 1.0)
    progress.feed(event(4, "shout[0]", "start", at=1.0), 1.0)
    item_retry = ChainEvent(req_id="r", seq=5, node_id="shout[0]", phase="start",
                            kind="progress", data={"attempt": 1, "of": 2}, ts=HOST + 1.1)
    progress.feed(item_retry, 1.1)
    assert progress.nodes["each"].items_started == 1


def test_a_fallback_and_what_recovery_did_are_said_on_the_node_s_lines() -> None:
    progress = ChainProgress(REQUEST, now=0.0)
    progress.feed(event(1, "list", "start", at=0.0), 0.0)
    switch = ChainEvent(req_id="r", seq=2, node_id="list", phase="start", kind="progress",
                        data={"attempt": 2, "of": 2, "error": "busy", "fallback": "ls"})
    assert progress.plain_line(switch, 0.1) == (
        "[  2] fallback list -> ls  attempt 2/2 failed: busy")
    done = ChainEvent(req_id="r", seq=3, node_id="list", phase="done",
                      data={"attempts": 2, "errors": [], "fallback_used": True, "tool": "ls"},
                      ts=HOST + 0.5)
    progress.feed(done, 0.5)
    assert progress.plain_line(done, 0.5).endswith("  via fallback ls  (2 attempts)")
    hit = ChainEvent(req_id="r", seq=3, node_id="list", phase="done",
                     data={"attempts": 0, "errors": [], "fallback_used": False, "cache": "hit"})
    assert progress.plain_line(hit, 0.5).endswith("  cache hit")


def test_node_durations_are_the_hosts_not_when_the_events_were_read() -> None:
    progress = ChainProgress(REQUEST, now=0.0)
    progress.feed(event(1, "list", "start", at=0.0), 0.0)
    late = event(2, "list", "done", {"names": ["a"]}, at=0.5)
    progress.feed(late, 3.0)  # read 2.5 s after the host sent it (a slow reader)
    assert progress.plain_line(late, 3.0) == "[  2] done  list  500 ms"
    progress.feed(event(3, "each", "start", at=0.6), 3.0)
    # running: the caller's clock maps onto the host's by the smallest delay seen (0 s)
    assert progress.nodes["each"].duration(HOST + 4.0) == pytest.approx(3.4)
    console = Console(width=100, record=True, color_system=None)
    console.print(progress.render(4.0))
    assert "3.40 s" in console.export_text()
    progress.finish(ChainResponse(req_id="r", chain_id="demo", success=True, nodes_run=2,
                                  duration_ms=700), 5.0)
    assert progress.summary() == "chain demo succeeded: 2 nodes in 700 ms"
