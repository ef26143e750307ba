"""examples/agent_ws.py: a WebSocket agent that streams one chain and cancels another."""

from __future__ import annotations

import subprocess
import sys

from tests.support import REPO

SCRIPT = REPO / "examples" / "agent_ws.py"


def test_agent_script_streams_events_and_cancels_the_long_chain() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stderr + done.stdout
    lines = done.stdout.splitlines()
    assert lines[0].startswith("server ws://127.0.0.1:")
    assert lines[1].startswith("handshake session=") and "caps=chains" in lines[1]
    assert "chain/cancel" in lines[1]
    events = [line.split(maxsplit=4)[1:] for line in lines if line.startswith("event ")]
    assert [e[:3] for e in events] == [
        ["1", "start", "sum"], ["2", "done", "sum"],
        ["3", "start", "shout"], ["4", "done", "shout"],
        ["5", "start", "greet"], ["6", "done", "greet"],
    ]
    assert events[1][3] == '{"sum":5}'
    assert 'response success=true nodes_run=3 final_output={"text":"HELLO, AGENT!"}' in lines
    long = [line for line in lines if line.startswith("long ")]
    assert long[1:4] == ["long event 1 start nap", "long cancel sent", "long event 2 error nap"]
    assert long[4].startswith("long response success=false code=cancelled duration_ms=")
    assert int(long[4].rsplit("=", 1)[1]) < 30_000  # cancelled, not slept out
    assert lines[-1] == "server stopped 0"
