"""A secret value never shows in part where text is cut or written in pieces (README
"Secrets"): a process's output cut at its byte cap, and the line-by-line writers of
``run``'s stdout, the host's stderr and stdio MCP servers' stderr given a value that holds
newlines (a PEM key)."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from typing import Any

import pytest
from a2e_mcp.errlog import errlog

from a2e_host import secrets
from a2e_host.chains.proc import _Capture
from a2e_host.commands.run_streams import RedactingStdout
from a2e_host.logs import StderrProxy
from a2e_host.redaction import PendingText, Redactor

LONG = "sk-live-" + "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKL"  # 56 characters
PEM = ("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n"
       "bK9w0BAQEFAASCBKcwggSjAgEAAoIBAQ\n-----END PRIVATE KEY-----")


@pytest.fixture
def registered() -> Iterator[None]:
    token = secrets.register({"LONG": LONG, "PEM": PEM})
    try:
        yield
    finally:
        secrets.unregister(token)


def _fragments(text: str, value: str, size: int = 8) -> list[str]:
    """Every piece of ``value`` of ``size`` characters that is in ``text``."""
    return [value[i:i + size] for i in range(len(value) - size + 1)
            if value[i:i + size] in text]


async def _captured(data: bytes, cap: int) -> _Capture:
    async def chunks() -> Any:
        for start in range(0, len(data), 7):
            yield data[start:start + 7]

    capture = _Capture(cap)
    await capture.drain(chunks())  # type: ignore[arg-type]
    return capture


@pytest.mark.asyncio
@pytest.mark.usefixtures("registered")
@pytest.mark.parametrize("cap", [30, 60, 100, 150, 171, 200, 219])
async def test_output_cut_at_its_cap_never_ends_in_a_values_head(cap: int) -> None:
    """A placeholder shorter than the value made the redacted text shorter, so the head
    of a value kept past the cap slid inside it: 4 values and a cap of 100 ended in the
    value's first 44 characters."""
    capture = await _captured(f"{LONG}\n".encode() * 4, cap)
    kept = capture.text()
    assert capture.truncated is True
    assert _fragments(kept, LONG) == [], kept
    whole, rest = divmod(cap, len(LONG) + 1)  # values (and newlines) before the cap
    expected = "«secret:LONG»\n" * whole + ("«secret:LONG»" if rest else "")
    assert kept == expected.encode()[:cap].decode("utf-8", "ignore")


@pytest.mark.asyncio
@pytest.mark.usefixtures("registered")
async def test_output_under_its_cap_is_redacted_whole() -> None:
    capture = await _captured(f"a {LONG} b".encode(), 1000)
    assert capture.truncated is False
    assert capture.text() == "a «secret:LONG» b"


@pytest.mark.usefixtures("registered")
def test_run_stdout_redacts_a_value_holding_newlines() -> None:
    """Each write let go of the text up to its last newline, so a PEM key printed with
    ``print`` was redacted in pieces that never matched: every line of it showed."""
    buffer = io.StringIO()
    out = RedactingStdout(buffer)
    print(PEM, file=out)
    print(f"again {PEM} here", file=out)
    out.write(PEM[:20])
    out.write(PEM[20:])
    out.flush()
    assert buffer.getvalue() == ("«secret:PEM»\nagain «secret:PEM» here\n«secret:PEM»")
    assert _fragments(buffer.getvalue(), PEM) == []


class _Lines:
    """A stand-in log writer: what reaches it, in order."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> None:
        self.parts.append(text)


@pytest.mark.usefixtures("registered")
def test_host_stderr_redacts_a_value_holding_newlines() -> None:
    writer = _Lines()
    proxy = StderrProxy(writer, io.StringIO())  # type: ignore[arg-type]
    print(PEM, file=proxy)
    proxy.write("x\n" + PEM[:40])
    proxy.write(PEM[40:] + "\n")
    proxy.flush()
    seen = "".join(writer.parts)
    assert seen == "«secret:PEM»\nx\n«secret:PEM»\n"
    assert _fragments(seen, PEM) == []


def test_text_without_a_newline_is_not_kept_without_bound() -> None:
    """A stream that never ended a line was kept whole in memory until flushed."""
    redactor = Redactor({"LONG": LONG})
    pending = PendingText(lambda: redactor, limit=1000)
    out = "".join(pending.write("y" * 100) for _ in range(100))
    assert 9000 <= len(out) <= 10000 and set(out) == {"y"}
    out = pending.write("z" * 2000 + LONG[:30])
    assert out.endswith("z") and LONG[:8] not in out  # the value's head waits
    assert pending.write(LONG[30:]) == ""
    assert pending.flush() == "«secret:LONG»"


@pytest.mark.usefixtures("registered")
def test_an_mcp_servers_stderr_redacts_a_value_holding_newlines(
    capfd: pytest.CaptureFixture[str],
) -> None:
    pipe = errlog()
    pipe.write(f"whole:\n{PEM}\n")
    pipe.write(f"split:\n{PEM[:33]}")  # past the key's first newline
    pipe.flush()
    seen = ""
    deadline = time.monotonic() + 10
    while "split:" not in seen and time.monotonic() < deadline:  # its read is done
        seen += capfd.readouterr().err
        time.sleep(0.01)
    pipe.write(PEM[33:] + " done\n")
    pipe.flush()
    while "done" not in seen and time.monotonic() < deadline:
        seen += capfd.readouterr().err
        time.sleep(0.01)
    assert "whole:\n«secret:PEM»\nsplit:\n«secret:PEM» done\n" in seen
    assert _fragments(seen, PEM) == []
