"""Logging can never stall the protocol (issue 12.13): the log writer is bounded and never
blocks, drops and counts lines stderr cannot take, and ``a2e-host stdio`` is quiet by
default. The end-to-end case spawns the real CLI with a stderr pipe nobody reads, as the
public A2E python SDK's subprocess transport does."""

from __future__ import annotations

import io
import json
import os
import threading
from typing import Any

import anyio
import pytest
import structlog

from a2e_host.logs import LogWriter, configure_logging, get_logger, resolve_level
from tests.support.process import CLI, WAIT, HostProcess, open_host

STDIO = [*CLI, "stdio", "--tools", "conformance"]


def notices(text: str) -> list[int]:
    """The counts of every "dropped N log lines" notice in ``text`` (JSON lines)."""
    counts = []
    for line in text.splitlines():
        if line.startswith("{") and '"dropped"' in line:
            record = json.loads(line)
            if str(record.get("event", "")).startswith("dropped "):
                counts.append(int(record["dropped"]))
    return counts


def test_writing_to_a_pipe_nobody_reads_never_blocks_and_counts_what_it_drops() -> None:
    read_end, write_end = os.pipe()
    writer = LogWriter(write_end, max_queued_bytes=16 * 1024)
    line = "x" * 99 + "\n"
    total = 5_000  # 500 KB: far beyond the pipe's buffer and the queue

    def log_all() -> None:
        for _ in range(total):
            writer.write(line)

    logging_thread = threading.Thread(target=log_all, daemon=True)
    logging_thread.start()
    logging_thread.join(timeout=WAIT)
    assert not logging_thread.is_alive(), "a log write blocked on a full pipe"
    assert writer.dropped_total > 0

    received = bytearray()

    def read_all() -> None:
        while chunk := os.read(read_end, 65536):
            received.extend(chunk)

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    assert writer.flush(WAIT)
    os.close(write_end)
    reader.join(timeout=WAIT)
    os.close(read_end)
    text = received.decode()
    written = text.count(line)
    assert sum(notices(text)) == writer.dropped_total
    assert written + writer.dropped_total == total
    assert text.endswith("\n") and writer.dropped_total == total - written


def test_the_notice_comes_where_the_lines_were_lost() -> None:
    read_end, write_end = os.pipe()
    writer = LogWriter(write_end, max_queued_bytes=4096)
    n = 0
    while writer.dropped_total < 10:  # fill the pipe and the queue, then lose ten lines
        writer.write(f"before {n}\n")
        n += 1
    received = bytearray()

    def read_all() -> None:
        while chunk := os.read(read_end, 65536):
            received.extend(chunk)

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    assert writer.flush(WAIT)  # what was queued goes out, then the count of the lost ten
    writer.write("after\n")
    assert writer.flush(WAIT)
    os.close(write_end)
    reader.join(timeout=WAIT)
    os.close(read_end)
    lines = received.decode().splitlines()
    assert json.loads(lines[-2])["dropped"] == 10 and lines[-1] == "after"
    assert lines[:-2] == [f"before {k}" for k in range(n - 10)]


def test_an_in_memory_stream_is_written_at_once() -> None:
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    try:
        get_logger(conn_id="c9").info("hello", n=1)
        record = json.loads(out.getvalue())
        assert (record["event"], record["conn_id"], record["n"]) == ("hello", "c9", 1)
    finally:
        structlog.reset_defaults()


@pytest.mark.parametrize(
    ("level", "auto_level", "effective"),
    [("auto", "warning", "warning"), ("auto", "info", "info"), ("debug", "warning", "debug")],
)
def test_auto_level_means_the_mode_default_and_an_explicit_level_wins(
    level: str, auto_level: str, effective: str
) -> None:
    assert resolve_level(level, auto_level) == effective
    out = io.StringIO()
    configure_logging("json", level, stream=out, auto_level=auto_level)
    try:
        get_logger().info("shown at info")
        assert ("shown at info" in out.getvalue()) is (effective in ("debug", "info"))
    finally:
        structlog.reset_defaults()


def chain(n: int) -> dict[str, Any]:
    return {"type": "chain/req", "id": f"c{n}", "entry_node": "a",
            "nodes": [{"node_id": "a", "kind": "tool", "name": "echo", "input": {"n": n}}]}


@pytest.mark.asyncio
async def test_a_host_whose_stderr_nobody_reads_answers_a_thousand_chains_at_info() -> None:
    chains, in_flight = 1000, 4  # ~450 KB of INFO lines: past a 64 KiB pipe and the queue
    host = await open_host([*STDIO, "--log-level", "info"])
    async with anyio.create_task_group() as tg:
        await host.send({"type": "handshake/req", "id": "h", "agent_caps": ["chains"]})
        assert (await host.receive())["ok"] is True
        answered: dict[str, bool] = {}
        with anyio.fail_after(120):  # today's main stops answering after ~110 chains
            for n in range(in_flight):
                await host.send(chain(n))
            sent = in_flight
            while len(answered) < chains:
                message = await host.receive()
                if message["type"] == "chain/resp":
                    answered[message["req_id"]] = message["success"]
                    if sent < chains:
                        await host.send(chain(sent))
                        sent += 1
        assert answered == {f"c{n}": True for n in range(chains)}
        # only now is stderr read: everything queued comes out, with the count of the rest
        tg.start_soon(host.collect_stderr)
        await host.process.stdin.aclose()  # type: ignore[union-attr]
        assert await host.wait() == 0
    text = bytes(host.stderr).decode()
    events = [json.loads(line).get("event") for line in text.splitlines()
              if line.startswith("{")]
    logged = sum(1 for e in events if not str(e).startswith("dropped "))
    dropped = sum(notices(text))
    assert dropped > 0
    # every line the host logged was either written or counted in a notice
    assert logged + dropped == 2 * chains + 4, (logged, dropped)
    assert events[0] == "connection opened"


@pytest.mark.asyncio
async def test_stdio_logs_only_warnings_by_default_and_info_when_asked() -> None:
    async def run(**env: str) -> bytes:
        host: HostProcess = await open_host(STDIO, **env)
        async with anyio.create_task_group() as tg:
            tg.start_soon(host.collect_stderr)
            await host.send({"type": "handshake/req", "id": "h", "agent_caps": ["chains"]},
                            chain(1))
            assert (await host.receive())["ok"] is True
            while (await host.receive())["type"] != "chain/resp":
                pass
            await host.process.stdin.aclose()  # type: ignore[union-attr]
            assert await host.wait() == 0
        return bytes(host.stderr)

    assert b'"level": "info"' not in await run()
    assert b'"event": "chain started"' in await run(A2E_LOG_LEVEL="info")
