"""A proc node's whole process tree ends with it, ``setsid`` escapes included (issue
12.10): on the proc's timeout, on cancel, when the child exits first, when the client
disconnects, and when the tree kills its own supervisor."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from websockets.asyncio.client import connect

from a2e_host.chains.proc import ProcPolicy, run_proc
from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError, NodeTimeout
from tests.support.process import CLI, STARTUP, WAIT, open_host
from tests.support.ws import receive


def policy(root: Path) -> ProcPolicy:
    return ProcPolicy.from_config(HostConfig(allow_proc=("sh",), root=str(root)))


def gone(pid: int, within: float = 5.0) -> bool:
    """True once no process ``pid`` exists, zombies included (bounded retry: the tree is
    reaped asynchronously)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


def kill_if_alive(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


async def wait_for_file(path: Path) -> int:
    name = str(path)
    with anyio.fail_after(WAIT):
        while not os.path.exists(name):  # noqa: ASYNC110, ASYNC240 - no event for a file
            await anyio.sleep(0.01)
    with open(name) as f:  # noqa: ASYNC230 - a few bytes, already written
        return int(f.read())


ESCAPE = "setsid sleep 300 & echo $! > pid.tmp && mv pid.tmp pid"


def test_a_setsid_grandchild_dies_on_the_proc_timeout(tmp_path: Path) -> None:
    args = {"argv": ["sh", "-c", f"{ESCAPE}; sleep 60"], "timeout": 1}
    with pytest.raises(NodeTimeout, match="timed out after 1 s"):
        anyio.run(run_proc, args, policy(tmp_path))
    pid = int((tmp_path / "pid").read_text())
    try:
        assert gone(pid), f"setsid'd process {pid} survived the proc timeout"
    finally:
        kill_if_alive(pid)


def test_a_setsid_grandchild_dies_when_the_caller_is_cancelled(tmp_path: Path) -> None:
    args = {"argv": ["sh", "-c", f"{ESCAPE}; sleep 60"]}

    async def main() -> int:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_proc, args, policy(tmp_path))
            pid = await wait_for_file(tmp_path / "pid")
            os.kill(pid, 0)  # alive while the node runs
            tg.cancel_scope.cancel()
        return pid

    pid = anyio.run(main)
    try:
        assert gone(pid), f"setsid'd process {pid} survived the cancel"
    finally:
        kill_if_alive(pid)


def test_an_orphan_left_by_a_child_that_exited_first_dies_with_the_node(tmp_path: Path) -> None:
    """The shell exits at once; its setsid'd, detached background job (no pipe held) is
    re-parented: to the supervisor, which ends it when the node ends."""
    script = "setsid sh -c 'sleep 300' >/dev/null 2>&1 </dev/null & echo $! > pid"
    out = anyio.run(run_proc, {"argv": ["sh", "-c", script]}, policy(tmp_path))
    assert out["exit_code"] == 0
    pid = int((tmp_path / "pid").read_text())
    try:
        assert gone(pid), f"orphan {pid} outlived its node"
    finally:
        kill_if_alive(pid)


def test_a_double_forked_daemon_dies_with_the_node(tmp_path: Path) -> None:
    script = (
        "( setsid sh -c 'sleep 300 & echo $! > pid.tmp; mv pid.tmp pid' & ) "
        ">/dev/null 2>&1; while [ ! -e pid ]; do sleep 0.01; done"
    )
    anyio.run(run_proc, {"argv": ["sh", "-c", script], "timeout": 30}, policy(tmp_path))
    pid = int((tmp_path / "pid").read_text())
    try:
        assert gone(pid), f"daemon {pid} outlived its node"
    finally:
        kill_if_alive(pid)


def test_a_tree_that_kills_its_supervisor_still_loses_its_process_group(
    tmp_path: Path,
) -> None:
    script = "sleep 300 & echo $! > pid; kill -9 $PPID; sleep 300"
    started = time.monotonic()
    with pytest.raises(NodeError, match="lost its supervisor"):
        anyio.run(run_proc, {"argv": ["sh", "-c", script], "timeout": 60}, policy(tmp_path))
    assert time.monotonic() - started < 30
    pid = int((tmp_path / "pid").read_text())
    try:
        assert gone(pid), f"group member {pid} survived"
    finally:
        kill_if_alive(pid)


@pytest.mark.asyncio
async def test_a_setsid_grandchild_dies_when_the_client_disconnects(tmp_path: Path) -> None:
    async with anyio.create_task_group() as tg:
        host = await open_host(
            [*CLI, "serve", "--port", "0", "--allow-proc", "sh", "--root", str(tmp_path)]
        )
        tg.start_soon(host.collect_stderr)
        with anyio.fail_after(STARTUP):
            found = await host.wait_stderr(r"a2e-host listening on (ws://127\.0\.0\.1:\d+)")
        ws = await connect(found.group(1))
        await ws.send(json.dumps(
            {"type": "handshake/req", "id": "h", "agent_caps": ["chains", "proc"]}
        ))
        assert (await receive(ws))["ok"]
        node = {"node_id": "p", "kind": "proc",
                "input": {"argv": ["sh", "-c", f"{ESCAPE}; sleep 60"]}}
        await ws.send(json.dumps({"type": "chain/req", "id": "c", "chain_id": "c",
                                  "entry_node": "p", "nodes": [node]}))
        assert (await receive(ws))["phase"] == "start"
        pid = await wait_for_file(tmp_path / "pid")
        os.kill(pid, 0)
        ws.transport.abort()
        try:
            alive = not await anyio.to_thread.run_sync(gone, pid)
        finally:
            kill_if_alive(pid)
        host.process.send_signal(signal.SIGTERM)
        code = await host.wait()
        tg.cancel_scope.cancel()
    assert not alive, f"setsid'd process {pid} outlived the client"
    assert code == 0, host.stderr[-2000:]


HOST_THAT_DIES = r"""
import sys, anyio
from a2e_host.config import HostConfig
from a2e_host.chains.proc import ProcPolicy, run_proc
policy = ProcPolicy.from_config(HostConfig(allow_proc=("sh",), root=sys.argv[1]))
anyio.run(run_proc, {"argv": ["sh", "-c", sys.argv[2]]}, policy)
"""


def test_a_setsid_grandchild_dies_when_the_host_itself_is_killed(tmp_path: Path) -> None:
    """SIGKILL leaves the host no time to clean up: the supervisor sees its socket close
    and ends the tree on its own."""
    host = subprocess.Popen(
        [sys.executable, "-c", HOST_THAT_DIES, str(tmp_path), f"{ESCAPE}; sleep 60"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "pid").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        pid = int((tmp_path / "pid").read_text())
        os.kill(pid, 0)
        host.kill()
        host.wait(30)
        try:
            assert gone(pid), f"setsid'd process {pid} outlived the killed host"
        finally:
            kill_if_alive(pid)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait(30)
