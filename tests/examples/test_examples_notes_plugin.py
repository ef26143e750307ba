"""examples/notes-plugin: a third-party capability plugin with its own messages, installed
from its own package, driven end to end over stdio and WebSocket by the real CLI.

"Installed" the way an installer would leave it, minus the copying: a ``*.dist-info``
directory whose ``entry_points.txt`` comes from the example's own ``pyproject.toml``, on
``PYTHONPATH`` beside the package's source. The host finds it through the entry-point group
``a2e_host.plugins``, grants its capability, decodes its messages with the core decoder
(schema errors name ``$.field`` paths as core ones do) and routes them to it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect

from tests.support import REPO
from tests.support.dist import install_project
from tests.support.process import CLI

PLUGIN_DIR = REPO / "examples" / "notes-plugin"
WAIT = 60.0

SCRIPT: list[dict[str, Any]] = [
    {"type": "handshake/req", "id": "h", "agent_caps": ["chains", "notes"]},
    {"type": "notes/put", "id": "1", "key": "plan", "text": "read, then count"},
    {"type": "notes/get", "id": "2", "key": "plan"},
    {"type": "notes/get", "id": "3", "key": "other"},
    {"type": "notes/put", "id": "4"},
    {"type": "notes/put", "id": "5", "key": 7},
    {"type": "notes/ack", "id": "6"},
    {"type": "notes/delete", "id": "7", "key": "plan"},
]


def _strip(reply: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in reply.items() if k not in ("id", "ts", "version")}


def check_replies(replies: list[dict[str, Any]]) -> None:
    """The answers to :data:`SCRIPT`, one per message, in order."""
    assert len(replies) == len(SCRIPT), replies
    hello = replies[0]
    assert hello["type"] == "handshake/resp" and hello["ok"] is True
    caps = {c["capability"]: c for c in hello["accepted_caps"]}
    assert sorted(caps) == ["chains", "notes"]
    assert caps["notes"]["metadata"] == {"namespace": "notes/*", "priority": 50, "features": []}
    assert [_strip(r) for r in replies[1:4]] == [
        {"type": "notes/ack", "req_id": "1", "key": "plan", "count": 1},
        {"type": "notes/note", "req_id": "2", "key": "plan", "found": True,
         "text": "read, then count"},
        {"type": "notes/note", "req_id": "3", "key": "other", "found": False, "text": ""},
    ]
    missing, wrong, host_sent, unknown = replies[4:]
    assert (missing["type"], missing["code"], missing["req_id"]) == (
        "error", "schema_violation", "4")
    assert missing["detail"] == {"path": "$.key", "type": "notes/put"}
    assert missing["message"] == "notes/put is missing the required field $.key; add it"
    assert (wrong["code"], wrong["req_id"], wrong["detail"]) == (
        "schema_violation", "5", {"path": "$.key", "type": "notes/put"})
    assert wrong["message"] == "notes/put has an invalid field: $.key: expected `str`, got `int`"
    assert (host_sent["code"], host_sent["req_id"]) == ("invalid_message", "6")
    assert host_sent["message"] == ("'notes/ack' is sent by the host, not by an agent; send a "
                                   "request type such as 'notes/put'")
    assert (unknown["code"], unknown["req_id"]) == ("unknown_type", "7")
    assert "notes/put" in unknown["detail"]["known"]
    assert "notes/delete" not in unknown["detail"]["known"]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment of a host with the example plugin installed (and nothing else new)."""
    site = install_project(tmp_path / "site", PLUGIN_DIR)
    path = [str(site), str(PLUGIN_DIR), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))


def test_the_plugin_serves_its_own_messages_over_stdio(env: dict[str, str]) -> None:
    lines = "".join(json.dumps(m) + "\n" for m in SCRIPT)
    done = subprocess.run([*CLI, "stdio"], input=lines, capture_output=True, text=True,
                          env=env, timeout=WAIT)
    assert done.returncode == 0, done.stderr[-2000:]
    check_replies([json.loads(line) for line in done.stdout.splitlines()])


def test_the_plugin_serves_its_own_messages_over_websocket(env: dict[str, str]) -> None:
    host = subprocess.Popen([*CLI, "serve", "--port", "0"], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True, env=env)
    try:
        assert host.stderr is not None
        url = None
        for _ in range(200):  # bounded: the listening line comes within a few log lines
            line = host.stderr.readline()
            match = re.search(r"a2e-host listening on (ws://127\.0\.0\.1:\d+)", line)
            if match or not line:
                url = match.group(1) if match else None
                break
        assert url, "the server never said where it listens"

        async def talk() -> list[dict[str, Any]]:
            replies = []
            with anyio.fail_after(WAIT):
                async with connect(url, subprotocols=["a2e.v1"]) as ws:  # type: ignore[list-item]
                    for message in SCRIPT:
                        await ws.send(json.dumps(message))
                        replies.append(json.loads(await ws.recv()))
            return replies

        check_replies(anyio.run(talk))
    finally:
        host.send_signal(signal.SIGTERM)
        rest = host.communicate(timeout=WAIT)[1]
    assert host.returncode == 0, rest[-2000:]
    assert "Traceback" not in rest


def test_without_the_plugin_its_messages_are_unknown_types() -> None:
    lines = "".join(json.dumps(m) + "\n" for m in SCRIPT[:2])
    done = subprocess.run([*CLI, "stdio"], input=lines, capture_output=True, text=True,
                          timeout=WAIT)
    hello, put = (json.loads(line) for line in done.stdout.splitlines())
    assert [c["capability"] for c in hello["accepted_caps"]] == ["chains"]
    assert (put["type"], put["code"], put["req_id"]) == ("error", "unknown_type", "1")
