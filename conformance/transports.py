"""Client transports: stdio (a spawned host process) and WebSocket.

Layer: I/O (asyncio). Knows framing only (PROTOCOL.md §1), not the protocol.

Both expose the same small interface, :class:`Connection`: ``send_text``,
``send_bytes``, ``send_text_bytes``, ``receive`` (the next :class:`Frame`, or ``None``
once the host has closed), ``closed_code`` and ``aclose``. Each incoming frame is
decoded once; a frame that is not a JSON object is kept with its ``fault`` so the
runner can report a framing violation instead of crashing.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import shlex
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

__all__ = ["Frame", "Connection", "StdioConnection", "WebSocketConnection", "SUBPROTOCOL",
           "MAX_FRAME_BYTES"]

SUBPROTOCOL = "a2e.v1"
MAX_FRAME_BYTES = 64 * 2**20
"""The largest frame the kit reads (4 x PROTOCOL.md §6's default ``max_message_bytes``);
a longer one is reported as a fault frame and skipped, so a host answering huge frames
costs the runner bounded memory, never a crash."""


@dataclass(frozen=True)
class Frame:
    """One message from the host: its raw text, the decoded object, or why not."""

    raw: str
    message: dict[str, Any] | None
    fault: str = ""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _decode(raw: str) -> Frame:
    """Decode strictly: RFC 8259 JSON only (no NaN / Infinity, PROTOCOL.md §8)."""
    try:
        message = json.loads(raw, parse_constant=_reject_constant)
    except ValueError as exc:
        return Frame(raw, None, f"not JSON ({exc})")
    if not isinstance(message, dict):
        return Frame(raw, None, "not a JSON object")
    return Frame(raw, message)


async def _discard_line(stream: asyncio.StreamReader) -> None:
    """Read and drop the rest of an over-long line, up to and with its newline."""
    while True:
        try:
            await stream.readuntil(b"\n")
            return
        except asyncio.LimitOverrunError as over:
            await stream.readexactly(over.consumed)
        except asyncio.IncompleteReadError:
            return


class Connection(abc.ABC):
    """The interface both transports implement (see the module docstring)."""

    kind = "?"

    def __init__(self) -> None:
        self._frames: asyncio.Queue[Frame | None] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None

    @abc.abstractmethod
    async def send_text(self, text: str) -> None:
        """Send one message, as one WebSocket text frame or one stdio line."""
        ...

    @abc.abstractmethod
    async def send_bytes(self, data: bytes) -> None:
        """Send raw bytes: a WebSocket binary frame, or one stdio line."""
        ...

    async def send_text_bytes(self, data: bytes) -> None:
        """Send raw bytes as a text frame (WebSocket) or line (stdio), unvalidated."""
        await self.send_bytes(data)

    async def receive(self) -> Frame | None:
        """The next frame, or None when the host closed (and for every later call)."""
        frame = await self._frames.get()
        if frame is None:
            self._frames.put_nowait(None)
        return frame

    @abc.abstractmethod
    def closed_code(self) -> int | None:
        """WebSocket close code, or the stdio process's exit status; None if open."""
        ...

    @property
    def subprotocol(self) -> str | None:
        return None

    def diagnostics(self) -> str:
        """Text worth showing when a case fails (e.g. the host's stderr tail)."""
        return ""

    @abc.abstractmethod
    async def close_sending(self) -> None:
        """Act as a client that goes away: stdio closes stdin (EOF) but keeps reading
        stdout; WebSocket closes the connection (code 1000)."""
        ...

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Close the connection (and stop the host process over stdio)."""


class StdioConnection(Connection):
    """A host process speaking NDJSON on stdin/stdout (PROTOCOL.md §1).

    Args (to :meth:`open`):
        command: the shell-like command line, split with :func:`shlex.split`.
        stderr: ``"capture"`` keeps the host's stderr for failure reports,
            ``"pass"`` lets it through to ours, ``"drop"`` discards it.
    """

    kind = "stdio"

    def __init__(self, process: asyncio.subprocess.Process, capture: bool) -> None:
        super().__init__()
        self._process = process
        self._stderr: list[bytes] = []
        self._tasks = [asyncio.create_task(self._read_stdout())]
        if capture:
            self._tasks.append(asyncio.create_task(self._read_stderr()))

    @classmethod
    async def open(cls, command: str, stderr: str = "capture") -> StdioConnection:
        target = {"capture": asyncio.subprocess.PIPE, "pass": None,
                  "drop": asyncio.subprocess.DEVNULL}[stderr]
        process = await asyncio.create_subprocess_exec(
            *shlex.split(command), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=target, limit=MAX_FRAME_BYTES,
        )
        return cls(process, capture=stderr == "capture")

    async def _read_stdout(self) -> None:
        stdout = self._process.stdout
        assert stdout is not None
        try:
            while True:
                try:
                    line = await stdout.readuntil(b"\n")
                except asyncio.IncompleteReadError as eof:
                    if eof.partial:
                        self._put_line(eof.partial)
                    break
                except asyncio.LimitOverrunError as over:
                    self._frames.put_nowait(Frame(
                        "", None, f"a line over {MAX_FRAME_BYTES} bytes (the kit's frame "
                                  f"bound); skipped"))
                    await stdout.readexactly(over.consumed)
                    await _discard_line(stdout)
                    continue
                self._put_line(line)
        except (ValueError, OSError, asyncio.IncompleteReadError) as exc:  # broken pipe
            self._frames.put_nowait(Frame("", None, f"stdout unreadable: {exc}"))
        finally:
            self._frames.put_nowait(None)

    def _put_line(self, line: bytes) -> None:
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            self._frames.put_nowait(Frame(repr(line[:200]), None, "stdout is not UTF-8"))
            return
        if not text.endswith("\n"):
            self._frames.put_nowait(Frame(text, None, "line not ended by \\n"))
            return
        self._frames.put_nowait(_decode(text[:-1]))

    async def _read_stderr(self) -> None:
        assert self._process.stderr is not None
        while chunk := await self._process.stderr.read(65536):
            self._stderr.append(chunk)
            if len(self._stderr) > 2000:
                del self._stderr[:1000]

    async def _write(self, data: bytes) -> None:
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(data)
            await self._process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the host is gone; receive() will report the close

    async def send_text(self, text: str) -> None:
        await self._write(text.encode("utf-8") + b"\n")

    async def send_bytes(self, data: bytes) -> None:
        await self._write(data + b"\n")

    def closed_code(self) -> int | None:
        return self._process.returncode

    def diagnostics(self) -> str:
        tail = b"".join(self._stderr).decode("utf-8", "replace").splitlines()[-25:]
        return "\n".join(["host stderr (tail):", *tail]) if tail else ""

    async def close_sending(self) -> None:
        if self._process.stdin is not None and not self._process.stdin.is_closing():
            self._process.stdin.close()

    async def aclose(self) -> None:
        """Close stdin (EOF = client gone), wait up to 3 s, then kill our process."""
        if self._process.stdin is not None and not self._process.stdin.is_closing():
            self._process.stdin.close()
        try:
            await asyncio.wait_for(self._process.wait(), 3.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
            await self._process.wait()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 1.0)


class WebSocketConnection(Connection):
    """A WebSocket client offering subprotocol ``a2e.v1`` (PROTOCOL.md §1)."""

    kind = "ws"

    def __init__(self, ws: ClientConnection) -> None:
        super().__init__()
        self._ws = ws
        self._task = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, url: str) -> WebSocketConnection:
        ws = await connect(url, subprotocols=[SUBPROTOCOL], max_size=MAX_FRAME_BYTES,  # type: ignore[list-item]
                           ping_interval=None, open_timeout=10, close_timeout=2)
        return cls(ws)

    async def _read(self) -> None:
        try:
            async for data in self._ws:
                if isinstance(data, bytes):
                    self._frames.put_nowait(Frame(repr(data[:200]), None,
                                                  "binary frame from the host"))
                else:
                    self._frames.put_nowait(_decode(data))
        except ConnectionClosed as closed:
            if (closed.sent is not None and closed.sent.code == 1009
                    and closed.rcvd_then_sent is not True):  # we closed it: too big
                self._frames.put_nowait(Frame("", None, f"a frame over {MAX_FRAME_BYTES} "
                                                        f"bytes (the kit's frame bound)"))
        finally:
            self._frames.put_nowait(None)

    async def send_text(self, text: str) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self._ws.send(text)

    async def send_bytes(self, data: bytes) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self._ws.send(data)

    async def send_text_bytes(self, data: bytes) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self._ws.send(data, text=True)

    def closed_code(self) -> int | None:
        if self._ws.close_code is None and self._task.done():
            return 1006
        return self._ws.close_code

    @property
    def subprotocol(self) -> str | None:
        return self._ws.subprotocol

    async def close_sending(self) -> None:
        with contextlib.suppress(Exception):
            await self._ws.close()

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self._ws.close()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(self._task, 2.0)


