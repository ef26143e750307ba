"""The ``proc`` capability on the wire (PROTOCOL.md §10), the same over stdio and WebSocket:
:class:`ProcWire` sends raw requests and sorts what comes back (read events per process,
replies per request), checking every ``proc/*`` message and ``error`` against the public
SDK's models as it arrives."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from tests.support.process import WAIT
from tests.support.sdk import assert_sdk_accepts

#: Flags of a host that allows ``cat`` and ``sh`` (resolved on PATH at start).
PROC_FLAGS = ["--allow-proc", "cat", "--allow-proc", "sh"]
#: A shell line that starts a ``setsid`` grandchild and prints its pid, then sleeps.
ESCAPE = "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!; exec sleep 300"


class ProcWire:
    """One handshaken connection speaking ``proc/*`` as raw JSON objects.

    Args:
        send: sends one message (a dict).
        receive: the next message (a dict), bounded by the caller's transport.
    """

    def __init__(self, send: Callable[[dict[str, Any]], Awaitable[None]],
                 receive: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        self._send = send
        self._receive = receive
        self.events: dict[str, list[dict[str, Any]]] = {}  # spawn req_id → read events
        self.replies: dict[str, dict[str, Any]] = {}  # req_id → the reply
        self._n = 0

    def new_id(self, tag: str) -> str:
        self._n += 1
        return f"{tag}-{self._n}"

    async def _take(self) -> None:
        message = await self._receive()
        if message["type"].startswith("proc/") or message["type"] == "error":
            assert_sdk_accepts(message)
        if message["type"] == "proc/read/event":
            self.events.setdefault(message["req_id"], []).append(message)
        else:
            self.replies[message.get("req_id", "")] = message

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send ``message`` (its ``id`` filled in when missing); its reply."""
        message = {"id": self.new_id(message["type"].split("/")[1]), **message}
        await self._send(message)
        with anyio.fail_after(WAIT):
            while message["id"] not in self.replies:
                await self._take()
        return self.replies.pop(message["id"])

    async def spawn(self, cmd: list[str], **fields: Any) -> dict[str, Any]:
        """``proc/spawn/req``; its reply (``proc/spawn/resp`` or ``error``), with the
        request's id as ``req_id``."""
        return await self.request({"type": "proc/spawn/req", "cmd": cmd, **fields})

    async def until_exit(self, spawn_id: str) -> list[dict[str, Any]]:
        """Every read event of the process started by ``spawn_id``, its ``exit`` last."""
        with anyio.fail_after(WAIT):
            while not self.events.get(spawn_id) or self.events[spawn_id][-1]["kind"] != "exit":
                await self._take()
        return self.events[spawn_id]

    async def until_output(self, spawn_id: str, text: str) -> list[dict[str, Any]]:
        """Read until the process's stdout so far ends with ``text``; its events."""
        with anyio.fail_after(WAIT):
            while not stdout_of(self.events.get(spawn_id, [])).endswith(text):
                await self._take()
        return self.events[spawn_id]


def stdout_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["data"]["text"] for e in events
                   if e["kind"] == "output" and e["stream_type"] == "stdout")


def proc_entry(handshake: dict[str, Any]) -> dict[str, Any]:
    """The ``proc`` entry of a ``handshake/resp``."""
    return next(c for c in handshake["accepted_caps"] if c["capability"] == "proc")


def gone(pid: int, within: float = 10.0) -> bool:
    """True once no process ``pid`` exists, zombies included (bounded retry: trees are
    reaped asynchronously)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def kill_if_alive(*pids: int) -> None:
    """Clean up after a failed assertion, so a test never leaves a process behind."""
    for pid in pids:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


async def cat_round_trip(wire: ProcWire) -> None:
    """Spawn ``cat``, write to it and read the echo, ask its status, close its stdin: it
    ends ``stopped`` with exit code 0; then a second ``cat`` is killed (``stopped``,
    -15), ``sh -c 'exit 3'`` crashes, ``sleep`` past its timeout is ``timedout``. Exact
    values, every message decoded by the SDK's models on arrival."""
    spawned = await wire.spawn(["cat"])
    spawn_id = spawned["req_id"]
    assert {k: spawned[k] for k in ("type", "proc_id", "ok", "error", "error_code")} == {
        "type": "proc/spawn/resp", "proc_id": "p1", "ok": True, "error": "", "error_code": ""}
    pid = spawned["pid"]
    assert pid > 0 and alive(pid)
    try:
        written = await wire.request({"type": "proc/write/req", "proc_id": "p1",
                                      "data": "hello\n"})
        assert {k: written[k] for k in ("type", "proc_id", "ok", "pid", "error", "written")} == {
            "type": "proc/write/resp", "proc_id": "p1", "ok": True, "pid": pid, "error": "",
            "written": 6}
        events = await wire.until_output(spawn_id, "hello\n")
        assert [(e["kind"], e["stream_type"], e["data"], e["seq"], e["proc_id"])
                for e in events] == [("output", "stdout", {"text": "hello\n"}, 1, "p1")]
        status = await wire.request({"type": "proc/status/req", "proc_id": "p1"})
        assert (status["type"], status["proc_id"], status["status"], status["error"]) == (
            "proc/status/resp", "p1", "running", "")
        [listed] = status["procs"]
        assert {k: listed[k] for k in ("proc_id", "cmd", "state", "pid", "exit_code")} == {
            "proc_id": "p1", "cmd": "cat", "state": "running", "pid": pid, "exit_code": None}
        closed = await wire.request({"type": "proc/write/req", "proc_id": "p1",
                                     "data": "bye", "eof": True})
        assert (closed["ok"], closed["written"]) == (True, 3)
        events = await wire.until_exit(spawn_id)
        assert stdout_of(events) == "hello\nbye"
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        end = events[-1]
        assert (end["kind"], end["stream_type"], end["proc_id"]) == ("exit", "", "p1")
        assert {k: end["data"][k] for k in ("state", "exit_code", "dropped")} == {
            "state": "stopped", "exit_code": 0, "dropped": {"stdout": 0, "stderr": 0}}
        assert gone(pid)
        after = await wire.request({"type": "proc/status/req", "proc_id": "p1"})
        assert (after["status"], after["procs"][0]["exit_code"]) == ("stopped", 0)
        dead = await wire.request({"type": "proc/write/req", "proc_id": "p1", "data": "x"})
        assert (dead["type"], dead["code"], dead["detail"]) == (
            "error", "proc_dead", {"proc_id": "p1", "state": "stopped", "exit_code": 0})
    finally:
        kill_if_alive(pid)

    second = await wire.spawn(["cat"])
    try:
        killed = await wire.request({"type": "proc/kill/req", "proc_id": "p2"})
        assert {k: killed[k] for k in ("type", "ok", "state", "proc_id", "exit_code")} == {
            "type": "proc/kill/resp", "ok": True, "state": "stopped", "proc_id": "p2",
            "exit_code": -15}
        # the exit event came first: the kill answers once the tree is gone
        assert wire.events[second["req_id"]][-1]["data"]["state"] == "stopped"
        assert gone(second["pid"], within=0.5)
    finally:
        kill_if_alive(second["pid"])

    crash = await wire.spawn(["sh", "-c", "echo oops >&2; exit 3"])
    events = await wire.until_exit(crash["req_id"])
    assert [(e["kind"], e["stream_type"], e["data"].get("text")) for e in events[:-1]] == [
        ("output", "stderr", "oops\n")]
    assert (events[-1]["data"]["state"], events[-1]["data"]["exit_code"]) == ("crashed", 3)
    status = await wire.request({"type": "proc/status/req", "proc_id": "p3"})
    assert (status["status"], status["error"]) == ("crashed", "process 'sh' exited with code 3")

    slow = await wire.spawn(["sh", "-c", "exec sleep 30"], timeout=1)
    try:
        events = await wire.until_exit(slow["req_id"])
        assert {k: events[-1]["data"][k] for k in ("state", "exit_code")} == {
            "state": "timedout", "exit_code": -15}, events
        assert gone(slow["pid"])
    finally:
        kill_if_alive(slow["pid"])
    every = await wire.request({"type": "proc/status/req", "proc_id": ""})
    assert (every["proc_id"], every["status"], every["error"]) == ("", "", "")
    assert [(p["proc_id"], p["state"], p["exit_code"]) for p in every["procs"]] == [
        ("p1", "stopped", 0), ("p2", "stopped", -15), ("p3", "crashed", 3),
        ("p4", "timedout", -15)]
