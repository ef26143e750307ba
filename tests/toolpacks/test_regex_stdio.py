"""Issue 12.4 over the real stdio host: a backtracking regex with chain ``timeout: 1``
is answered on time, and the host answers a ping while it runs."""

from __future__ import annotations

import time

import anyio
import pytest

from tests.support.process import CLI
from tests.support.requests import chain, error_of, tool
from tests.support.stdio import stdio_host


@pytest.mark.asyncio
async def test_a_backtracking_regex_ends_with_the_chain_timeout_and_pings_keep_answering() -> None:
    hostile = tool("rx", "regex_findall", input={"text": "a" * 40 + "!", "pattern": "(a|a)+$"})
    async with stdio_host(argv=[*CLI, "stdio", "--tools", "text"]) as client:
        started = time.monotonic()
        await client.send(chain("r", [hostile], timeout=1), {"type": "ping", "id": "p"})
        replies: list[dict[str, object]] = []
        with anyio.fail_after(15):
            while len(replies) < 2:
                replies.append(await client.reply())
        elapsed = time.monotonic() - started
        assert [m["type"] for m in replies] == ["pong", "chain/resp"], replies
        err = error_of(replies[1])  # type: ignore[arg-type]
        assert err["code"] in ("timeout", "chain_node_error"), err
        assert elapsed < 8, f"answered after {elapsed:.1f} s (Python's re: 17 s)"
        await client.assert_alive("after")
