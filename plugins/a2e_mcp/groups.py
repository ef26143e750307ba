"""What the host adds to the official SDK's ``stdio_client`` around a server it spawns:
its process group stopped whole, and its output lines bounded.

Layer: plugin (os signals, byte streams; no MCP framing: the SDK still reads and parses
every line). Source: PROTOCOL.md §12.

* **Process group.** The SDK starts a server in a new session (its process group is its
  pid), closes its stdin when the connection ends and kills the whole group only when the
  server itself has not exited within two seconds. A server that exits at once but left
  children behind (a wrapper such as ``npx`` or ``uvx`` whose child ignores the closed
  stdin, a server that forked a worker) would leave them running for ever: the link
  records the group of each server it starts (:func:`recording`) and kills what is left
  of it once the SDK let go of the server (:func:`kill_groups`).
* **Line bound.** The SDK collects a stdout line in memory until its newline, however long
  (and copies it again for each chunk read). A line longer than ``max_line_bytes`` (the
  host's ``max_message_bytes``: nothing longer could be answered anyway) ends the
  server's output there: the SDK sees the connection close, the calls in flight fail, the
  server is stopped and restarted, and :attr:`Spawns.overflow` says why.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from typing import Any

import anyio
import anyio.abc

__all__ = ["Spawns", "kill_groups", "recording"]

_spawned: ContextVar[Spawns | None] = ContextVar("a2e_mcp_spawned", default=None)
_MARK = "_a2e_records_groups"


class Spawns:
    """The servers started within one :func:`recording` block.

    Args:
        max_line_bytes: the longest stdout line (bytes, newline excluded) a server may
            write.

    Attributes:
        pids: the pid (= process group) of each server started.
        overflow: why a server's output was cut (``""``: it was not).
    """

    def __init__(self, max_line_bytes: int) -> None:
        self.max_line_bytes = max_line_bytes
        self.pids: list[int] = []
        self.overflow = ""


class _BoundedLines(anyio.abc.ByteReceiveStream):
    """A server's stdout that ends (``EndOfStream``) once a line passes the bound."""

    def __init__(self, inner: anyio.abc.ByteReceiveStream, spawns: Spawns) -> None:
        self._inner = inner
        self._spawns = spawns
        self._open_line = 0  # bytes of the line being read, so far
        self._cut = False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._cut:
            raise anyio.EndOfStream
        data = await self._inner.receive(max_bytes)
        newline = data.rfind(b"\n")
        self._open_line = (self._open_line + len(data) if newline < 0
                           else len(data) - newline - 1)
        if self._open_line > self._spawns.max_line_bytes:
            self._cut = True
            self._spawns.overflow = (
                f"wrote a line longer than {self._spawns.max_line_bytes} bytes "
                "([limits] max_message_bytes)")
            raise anyio.EndOfStream
        return data

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Bounded(anyio.abc.Process):
    """The SDK's server process, its stdout bounded by line (everything else as is)."""

    def __init__(self, inner: anyio.abc.Process, spawns: Spawns) -> None:
        self._inner = inner
        self._process = getattr(inner, "_process", None)  # what the SDK's cleanup closes
        assert inner.stdout is not None
        self._stdout = _BoundedLines(inner.stdout, spawns)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def wait(self) -> int:
        return await self._inner.wait()

    def terminate(self) -> None:
        self._inner.terminate()

    def kill(self) -> None:
        self._inner.kill()

    def send_signal(self, signal: int) -> None:  # type: ignore[override]
        self._inner.send_signal(signal)  # type: ignore[arg-type]

    @property
    def pid(self) -> int:
        return self._inner.pid

    @property
    def returncode(self) -> int | None:
        return self._inner.returncode

    @property
    def stdin(self) -> anyio.abc.ByteSendStream | None:
        return self._inner.stdin

    @property
    def stdout(self) -> anyio.abc.ByteReceiveStream:
        return self._stdout

    @property
    def stderr(self) -> anyio.abc.ByteReceiveStream | None:
        return self._inner.stderr


def _install() -> None:
    """Wrap the SDK's spawn (once); a SDK without it leaves groups and lines to itself."""
    import mcp.client.stdio as stdio

    spawn = getattr(stdio, "_create_platform_compatible_process", None)
    if spawn is None or getattr(spawn, _MARK, False):
        return

    async def recorded_spawn(*args: Any, **kwargs: Any) -> Any:
        process = await spawn(*args, **kwargs)
        spawns = _spawned.get()
        if spawns is None or not isinstance(process, anyio.abc.Process):
            return process
        spawns.pids.append(process.pid)
        return _Bounded(process, spawns) if process.stdout is not None else process

    setattr(recorded_spawn, _MARK, True)
    stdio._create_platform_compatible_process = recorded_spawn


@contextmanager
def recording(spawns: Spawns) -> Iterator[None]:
    """Within the block, each stdio server the SDK starts in this task is recorded in
    ``spawns`` and has its output lines bounded."""
    _install()
    token = _spawned.set(spawns)
    try:
        yield
    finally:
        _spawned.reset(token)


def kill_groups(spawns: Spawns) -> None:
    """SIGKILL whatever is left of the process groups of ``spawns`` (the servers
    themselves were stopped by the SDK already: these are the children they left)."""
    if not hasattr(os, "killpg"):  # pragma: no cover - Windows: the SDK's job object
        return
    for pid in spawns.pids:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    spawns.pids.clear()
