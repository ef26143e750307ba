"""An agent that goes away from the real ``a2e-host stdio`` (PROTOCOL.md §1, §8): the
host notices its stdin and stdout closing mid-chain and exits 0 at once, not when the
running tool would have ended."""

from __future__ import annotations

import os
import subprocess

import anyio
import pytest

from tests.support import REPO
from tests.support.process import HostProcess, host_env
from tests.support.requests import sleeper
from tests.support.stdio import STDIO


@pytest.mark.asyncio
async def test_client_closing_stdin_and_stdout_mid_chain_ends_the_host_before_the_tool() -> None:
    read_end, write_end = os.pipe()  # our own pipe, so that its reader can really be closed
    process = await anyio.open_process(
        STDIO, stdin=subprocess.PIPE, stdout=write_end, stderr=subprocess.PIPE,
        cwd=REPO, env=host_env(A2E_LOG_LEVEL="info"),
    )
    os.close(write_end)
    host = HostProcess(process)
    async with anyio.create_task_group() as tg:
        tg.start_soon(host.collect_stderr)
        await host.send({"type": "handshake/req", "id": "h", "agent_caps": ["chains"]},
                        sleeper("w", 600))
        with anyio.fail_after(15):
            seen = b""
            while b'"phase":"start"' not in seen:
                seen += await anyio.to_thread.run_sync(os.read, read_end, 65536)
        os.close(read_end)
        assert process.stdin is not None
        await process.stdin.aclose()
        assert await host.wait() == 0  # bounded by WAIT, far below the tool's 600 s
    assert b"peer gone" in host.stderr
    assert b"Traceback" not in host.stderr
