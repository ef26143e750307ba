"""The client library's process handles (``client.spawn_proc``) against the real CLI over
stdio and a real WebSocket server (PROTOCOL.md §10)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from a2e_host.client import Client, HostError, SpawnRefused, serve_ws, spawn_stdio
from tests.support.process import STARTUP
from tests.support.procs import PROC_FLAGS, alive, gone, kill_if_alive

pytestmark = pytest.mark.timeout(90)

HOST = [sys.executable, "-m", "a2e_host"]


@asynccontextmanager
async def client_over(transport: str) -> AsyncIterator[Client]:
    limits = {"proc_limit": 2}
    if transport == "stdio":
        async with spawn_stdio([*HOST, "stdio", *PROC_FLAGS], agent_caps=["proc"],
                               limits=limits, stderr="capture",
                               handshake_timeout=STARTUP) as client:
            yield client
    else:
        async with serve_ws(PROC_FLAGS, agent_caps=["proc"], limits=limits,
                            command=[*HOST, "serve", "--port", "0"]) as client:
            yield client


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", ["stdio", "ws"])
async def test_a_process_handle_writes_reads_kills_and_reports_status(transport: str) -> None:
    async with client_over(transport) as client:
        assert client.accepted_caps == ["proc"]
        cat = await client.spawn_proc(["cat"])
        try:
            assert (cat.proc_id, alive(cat.pid)) == ("p1", True)
            written = await cat.write("ping\n")
            assert (written.ok, written.written) == (True, 5)
            first = await anext(cat.events())
            assert (first.kind, first.stream_type, first.data, first.seq) == (
                "output", "stdout", {"text": "ping\n"}, 1)
            status = await cat.status()
            assert (status.proc_id, status.cmd, status.state, status.pid) == (
                "p1", "cat", "running", cat.pid)
            killed = await cat.kill("SIGINT")
            assert (killed.ok, killed.state, killed.exit_code) == (True, "stopped", -2)
            assert cat.exit is None  # the exit event is read from the handle's events
            rest = await cat.read_to_exit()
            assert rest.exit is not None and rest.exit.data["exit_code"] == -2
            assert gone(cat.pid)
        finally:
            kill_if_alive(cat.pid)

        sh = await client.spawn_proc(["sh", "-c", "read x; echo got $x; echo err >&2; exit 4"])
        await sh.write("it\n")
        out = await sh.read_to_exit()
        assert (out.stdout, out.stderr) == ("got it\n", "err\n")
        assert out.exit is not None
        assert (out.exit.data["state"], out.exit.data["exit_code"]) == ("crashed", 4)

        listing = await client.proc_status()
        assert [(p.proc_id, p.state, p.exit_code) for p in listing.procs] == [
            ("p1", "stopped", -2), ("p2", "crashed", 4)]

        with pytest.raises(SpawnRefused) as refused:
            await client.spawn_proc(["ls"])
        assert refused.value.error_code == "proc_denied"

        held = [await client.spawn_proc(["cat"]), await client.spawn_proc(["cat"])]
        try:
            with pytest.raises(HostError) as limit:
                await client.spawn_proc(["cat"])
            assert (limit.value.code, limit.value.detail["limit"]) == ("proc_limit", 2)
            await held[0].close_stdin()
            ended = await held[0].read_to_exit()
            assert ended.exit is not None and ended.exit.data["state"] == "stopped"
            with pytest.raises(HostError) as dead:
                await held[0].write("late")
            assert dead.value.code == "proc_dead"
        finally:
            kill_if_alive(*(h.pid for h in held))
            for handle in held:
                await handle.aclose()


@pytest.mark.asyncio
async def test_read_to_exit_output_shows_exit_code_and_both_streams_in_its_repr() -> None:
    async with client_over("stdio") as client:
        sh = await client.spawn_proc(["sh", "-c", "echo out; echo err >&2; exit 3"])
        out = await sh.read_to_exit()
    assert out.exit_code == 3
    assert repr(out) == "ProcOutput(exit_code=3, stdout='out\\n', stderr='err\\n', events=3)"


def test_a_long_stream_is_clipped_in_the_repr_saying_how_much_was_left_out() -> None:
    from a2e_host.chains.proc_messages import ProcReadEvent
    from a2e_host.client import ProcOutput

    out = ProcOutput([ProcReadEvent(req_id="s", proc_id="p1", seq=1, kind="output",
                                    stream_type="stdout", data={"text": "x" * 250})])
    assert out.exit_code is None
    assert repr(out) == (f"ProcOutput(exit_code=None, stdout='{'x' * 200}… (50 more chars)', "
                         "stderr='', events=1)")
