"""``a2e-host mcp --port``: with a token configured, every HTTP request must present it as
``Authorization: Bearer`` and runs as that token's principal; with none, only a loopback
``--host`` is served."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import anyio
import httpx2 as httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.support import REPO
from tests.support.process import host_env

ARGS = ["-m", "a2e_host", "mcp", "--tools", "conformance", "--log-level", "info"]
WAIT = 30.0
"""Generous bound, seconds, on anything a test waits for (a loaded 2-core box)."""
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"}}}
HEADERS = {"accept": "application/json, text/event-stream",
           "content-type": "application/json", "mcp-protocol-version": "2025-11-25"}


@pytest.mark.asyncio
async def test_http_mcp_needs_the_bearer_token_and_runs_as_its_principal(
        tmp_path: Path) -> None:
    config = tmp_path / "host.toml"
    config.write_text('[auth.tokens]\nalice = "alice-secret-token"\nbob = "bob-secret-token"\n'
                      '[auth.tool_grants]\nbob = ["echo"]\n')
    process = await anyio.open_process(
        [sys.executable, *ARGS, "--config", str(config), "--port", "0"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        cwd=REPO, env=host_env())
    assert process.stderr is not None
    try:
        seen = b""
        with anyio.fail_after(WAIT):
            while not (found := re.search(rb"listening on (http://\S+/mcp)", seen)):
                seen += await process.stderr.receive()
        url = found.group(1).decode()
        async with httpx.AsyncClient(timeout=WAIT, headers=HEADERS) as http:
            none = await http.post(url, json=INIT)
            wrong = await http.post(url, json=INIT,
                                    headers={"authorization": "Bearer alice-secret-tokeX"})
        assert (none.status_code, wrong.status_code) == (401, 401)
        assert "Authorization: Bearer" in none.json()["message"]
        chain = {"nodes": [{"node_id": "u", "kind": "tool", "name": "upper",
                            "input": {"text": "web"}}], "entry_node": "u"}
        answers = {}
        for who in ("alice", "bob"):
            async with httpx.AsyncClient(
                    timeout=WAIT,
                    headers={"authorization": f"Bearer {who}-secret-token"}) as http, \
                    streamable_http_client(url, http_client=http) as (read, write, *_), \
                    ClientSession(read, write) as session:
                with anyio.fail_after(WAIT):
                    await session.initialize()
                    answers[who] = await session.call_tool("run_chain", chain)
        alice, bob = answers["alice"], answers["bob"]
        assert alice.structured_content is not None
        assert alice.structured_content["final_output"] == {"text": "WEB"}
        # bob's grant allows only echo: his session is bob's, not the first configured one
        assert bob.is_error, bob
        assert "upper" in str(bob.structured_content or bob.content)
    finally:
        process.terminate()
        with anyio.fail_after(WAIT):
            await process.wait()


def test_http_mcp_on_a_network_address_without_a_token_is_refused() -> None:
    done = subprocess.run([sys.executable, *ARGS, "--port", "0", "--host", "0.0.0.0"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          cwd=REPO, env=host_env(), timeout=WAIT)
    assert done.returncode == 2, done.stderr
    assert "no authentication" in done.stderr and "auth_token" in done.stderr, done.stderr
    assert "listening" not in done.stderr
