"""``a2e-host run``'s displays, on their own: which one a run gets, and what the JSON and
final-output ones write (the whole command is driven in test_run_cli.py)."""

from __future__ import annotations

import io
import json
import sys

import pytest

from a2e_host.chains.messages import ChainEvent, ChainNode, ChainRequest, ChainResponse
from a2e_host.commands.run_display import (
    FinalDisplay,
    JsonDisplay,
    LiveDisplay,
    PlainDisplay,
    open_display,
)

REQUEST = ChainRequest(
    chain_id="demo", entry_node="a",
    nodes=[ChainNode(node_id="a", kind="tool", name="echo")],
)
EVENT = ChainEvent(req_id="r", seq=1, node_id="a", phase="end", output={"x": 1})
RESPONSE = ChainResponse(req_id="r", chain_id="demo", success=True, final_output={"x": 1})


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("final_only", "json_out", "tty", "expected"),
    [
        (True, True, True, FinalDisplay),  # --final wins over --json and a terminal
        (False, True, True, JsonDisplay),
        (False, False, True, LiveDisplay),
        (False, False, False, PlainDisplay),
    ],
)
def test_the_display_is_chosen_by_the_flags_then_the_terminal(
    monkeypatch: pytest.MonkeyPatch, final_only: bool, json_out: bool, tty: bool,
    expected: type,
) -> None:
    monkeypatch.setattr(sys, "stdout", Terminal() if tty else io.StringIO())
    display = open_display(REQUEST, (), final_only=final_only, json_out=json_out, events=False)
    assert type(display) is expected


@pytest.mark.parametrize("events", [False, True])
def test_json_writes_the_response_as_one_line_after_the_events_only_when_asked(
    events: bool,
) -> None:
    out = io.StringIO()
    display = JsonDisplay(out, events)
    display.event(EVENT)
    display.response(RESPONSE)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["type"] for line in lines] == (
        ["chain/event", "chain/resp"] if events else ["chain/resp"]
    )
    assert lines[-1]["final_output"] == {"x": 1}


def test_final_writes_only_the_final_output_as_one_json_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    display = open_display(REQUEST, (), final_only=True, json_out=False, events=False)
    display.event(EVENT)
    display.response(RESPONSE)
    assert out.getvalue() == '{"x":1}\n'
