"""Each node's outcome folded from a stored run's frames (``graph --run``'s colours)."""

from __future__ import annotations

from collections import Counter

import pytest

from a2e_host.commands.run_outcomes import NodeOutcome, OutcomeFold

INTERRUPTED = b'{"type":"chain/event","data":{"code":"interrupted"},"phase":"error"}'
FAILED = b'{"type":"chain/event","data":{"code":"tool_error"},"phase":"error"}'


KEPT_INTERRUPTED = b'{"code":"interrupted","message":"m","node_id":"a"}'


def fold(frames: list[tuple[str, str, bytes]], running: bool) -> dict[str, NodeOutcome]:
    folding = OutcomeFold()
    for node_id, phase, frame in frames:
        folding.add(node_id, phase, frame)
    return folding.outcomes(run_running=running)


def test_an_error_whose_kept_failure_says_interrupted_is_interrupted() -> None:
    folding = OutcomeFold()
    folding.add("a", "start")
    folding.add("a", "error", b'{"type":"chain/event","data":{"resumed":true}}',
                KEPT_INTERRUPTED)
    folding.add("b", "start")
    folding.add("b", "error", INTERRUPTED, b'{"code":"chain_node_error"}')
    assert folding.outcomes(run_running=False) == {
        "a": NodeOutcome("interrupted"), "b": NodeOutcome("error")}


@pytest.mark.parametrize(
    ("frames", "running", "expected"),
    [
        ([("a", "start", b""), ("a", "done", b"")], False, {"a": "done"}),
        ([("a", "skip", b"")], False, {"a": "skipped"}),
        ([("a", "start", b""), ("a", "error", FAILED)], False, {"a": "error"}),
        ([("a", "start", b""), ("a", "error", b"")], False, {"a": "error"}),
        ([("a", "start", b""), ("a", "error", INTERRUPTED)], False, {"a": "interrupted"}),
        ([("a", "start", b"")], True, {"a": "running"}),
        ([("a", "start", b"")], False, {"a": "interrupted"}),
        # a retried node's progress events are phase start; one terminal event ends it
        ([("a", "start", b""), ("a", "start", b""), ("a", "done", b"")], False, {"a": "done"}),
        # a resumed node: start before the restart, its terminal event after it
        ([("a", "start", b""), ("b", "start", b""), ("a", "done", b""),
          ("b", "done", b"")], False, {"a": "done", "b": "done"}),
        # a skill's inner nodes belong to the skill node
        ([("s", "start", b""), ("s/x", "start", b""), ("s/x", "error", FAILED),
          ("s", "done", b"")], False, {"s": "done"}),
        # the chain/resp (no node) and unknown phases are ignored
        ([("", "", b""), ("a", "weird", b"")], False, {}),
    ],
)
def test_a_declared_nodes_outcome_is_its_last_phase(
        frames: list[tuple[str, str, bytes]], running: bool, expected: dict[str, str]) -> None:
    assert {k: v.outcome for k, v in fold(frames, running).items()} == expected


def test_map_items_are_counted_under_their_template_and_the_worst_wins() -> None:
    frames = [("m", "start", b"")]
    frames += [(f"t[{i}]", "start", b"") for i in range(6)]
    frames += [("t[0]", "done", b""), ("t[1]", "done", b""), ("t[2]", "skip", b""),
               ("t[3]", "error", FAILED), ("t[4]", "error", INTERRUPTED)]
    live = fold(frames, running=True)
    assert live["m"] == NodeOutcome("running")
    assert live["t"] == NodeOutcome("running", Counter(
        {"done": 2, "skipped": 1, "error": 1, "interrupted": 1, "running": 1}))
    ended = fold([*frames, ("t[5]", "done", b""), ("m", "error", b"")], running=False)
    assert ended["t"] == NodeOutcome("interrupted", Counter(
        {"done": 3, "skipped": 1, "error": 1, "interrupted": 1}))
    assert ended["m"] == NodeOutcome("error")


def test_a_template_whose_items_all_ended_well_is_done_and_counts_stay_small() -> None:
    folding = OutcomeFold()
    for i in range(100_000):
        folding.add(f"t[{i}]", "start")
        folding.add(f"t[{i}]", "done")
    (template,) = folding.outcomes(run_running=False).items()
    assert template == ("t", NodeOutcome("done", Counter({"done": 100_000})))
    assert not folding._items["t"].open  # nothing kept per item once it ended
