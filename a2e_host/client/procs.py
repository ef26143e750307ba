"""Processes on the host, as the client sees them: :class:`ProcHandle` (PROTOCOL.md §10).

Layer: client (anyio). ``await client.spawn_proc(["cat"])`` sends ``proc/spawn/req`` and
returns a handle once the host answered; the process's ``proc/read/event`` frames carry
the spawn request's id, so they are routed to the handle like a chain's events to its
run. Like :mod:`.chains`, it knows its client only through a protocol
(:class:`ProcClient`) and never imports :mod:`.session`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

import anyio

from ..chains.proc_messages import (
    ProcKillRequest,
    ProcKillResponse,
    ProcReadEvent,
    ProcSpawnRequest,
    ProcSpawnResponse,
    ProcStatus,
    ProcStatusRequest,
    ProcStatusResponse,
    ProcWriteRequest,
    ProcWriteResponse,
)
from ..messages import ErrorMessage, Message
from .errors import ClientError, ConnectionLost, HostError

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = ["ProcClient", "ProcHandle", "ProcOutput", "SpawnRefused", "spawn"]


class ProcClient(Protocol):
    """What a :class:`ProcHandle` uses of its client (:class:`~a2e_host.client.Client`)."""

    def _open_route(
        self, req_id: str
    ) -> tuple[MemoryObjectSendStream[Message], MemoryObjectReceiveStream[Message]]: ...

    def _close_route(self, req_id: str) -> None: ...

    async def _send(self, message: Message) -> None: ...

    async def _request(self, message: Message, wait_timeout: float) -> Message: ...


class SpawnRefused(ClientError):
    """The host answered ``proc/spawn/resp`` with ``ok`` false.

    Attributes:
        response: the :class:`~a2e_host.chains.proc_messages.ProcSpawnResponse`.
        error_code: its ``error_code`` (``proc_denied``, ``invalid_input``, ``spawn_failed``).
    """

    def __init__(self, response: ProcSpawnResponse) -> None:
        super().__init__(f"the host did not start the process: {response.error} "
                         f"({response.error_code or 'no code'})")
        self.response = response
        self.error_code = response.error_code


class ProcOutput:
    """What :meth:`ProcHandle.read_to_exit` collected.

    Attributes:
        stdout / stderr: the text of every ``output`` event of that stream, joined.
        exit: the ``exit`` event (its ``data`` has ``state``, ``exit_code``, ``dropped``).
        exit_code: that event's ``exit_code``, None when it carries none.
        events: every event, in ``seq`` order.

    Its repr shows the exit code, both streams (each clipped to 200 characters) and the
    event count: ``ProcOutput(exit_code=0, stdout='1 2 3\\n', stderr='', events=2)``.
    """

    def __init__(self, events: list[ProcReadEvent]) -> None:
        self.events = events
        self.stdout = "".join(e.data.get("text", "") for e in events
                              if e.kind == "output" and e.stream_type == "stdout")
        self.stderr = "".join(e.data.get("text", "") for e in events
                              if e.kind == "output" and e.stream_type == "stderr")
        self.exit = events[-1] if events and events[-1].kind == "exit" else None

    @property
    def exit_code(self) -> int | None:
        """The ``exit`` event's ``exit_code`` (negative: ended by that signal), else None."""
        code = self.exit.data.get("exit_code") if self.exit is not None else None
        return code if isinstance(code, int) else None

    def __repr__(self) -> str:
        return (f"ProcOutput(exit_code={self.exit_code!r}, stdout={_clip(self.stdout)!r}, "
                f"stderr={_clip(self.stderr)!r}, events={len(self.events)})")


def _clip(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters for a repr, saying how much was left out."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more chars)"


class ProcHandle:
    """One process the host runs for this session.

    Attributes:
        proc_id / pid: from ``proc/spawn/resp``.
        req_id: the spawn request's id (the ``req_id`` of the process's events).
        response: the ``proc/spawn/resp``.
        exit: the ``exit`` event once read, else None.
    """

    def __init__(self, client: ProcClient, response: ProcSpawnResponse,
                 receive: MemoryObjectReceiveStream[Message], wait_timeout: float) -> None:
        self.client = client
        self.response = response
        self.proc_id = response.proc_id
        self.pid = response.pid
        self.req_id = response.req_id
        self.exit: ProcReadEvent | None = None
        self._receive = receive
        self._wait_timeout = wait_timeout

    async def write(self, data: str, *, eof: bool = False) -> ProcWriteResponse:
        """Write ``data`` to the process's stdin (then close it when ``eof``); returns
        once the host wrote it (``ok`` false, with ``error``, when stdin is closed).

        Raises:
            HostError: ``unknown_proc``, ``proc_dead``, ``busy``.
            TimeoutError / ConnectionLost: as for any request.
        """
        reply = await self.client._request(
            ProcWriteRequest(proc_id=self.proc_id, data=data, eof=eof), self._wait_timeout)
        assert isinstance(reply, ProcWriteResponse)
        return reply

    async def close_stdin(self) -> ProcWriteResponse:
        """Close the process's stdin (``proc/write/req`` with ``eof``)."""
        return await self.write("", eof=True)

    async def kill(self, signal: str = "SIGTERM") -> ProcKillResponse:
        """End the process and its tree (``proc/kill/req``); returns once it is gone.

        Raises:
            HostError: ``unknown_proc``, ``proc_dead`` (it had ended already).
        """
        reply = await self.client._request(
            ProcKillRequest(proc_id=self.proc_id, signal=signal), self._wait_timeout)
        assert isinstance(reply, ProcKillResponse)
        return reply

    async def status(self) -> ProcStatus:
        """The process's :class:`~a2e_host.chains.proc_messages.ProcStatus`."""
        reply = await self.client._request(ProcStatusRequest(proc_id=self.proc_id),
                                           self._wait_timeout)
        assert isinstance(reply, ProcStatusResponse) and reply.procs
        return reply.procs[0]

    async def events(self, *, receive_timeout: float | None = None
                     ) -> AsyncIterator[ProcReadEvent]:
        """The process's ``proc/read/event`` frames as they arrive, up to and including
        its ``exit`` event.

        Raises:
            TimeoutError: nothing arrived for ``receive_timeout`` seconds (default: the
                handle's wait timeout).
            ConnectionLost: the connection ended first.
        """
        wait = self._wait_timeout if receive_timeout is None else receive_timeout
        while self.exit is None:
            try:
                with anyio.fail_after(wait):
                    message = await self._receive.receive()
            except TimeoutError:
                raise TimeoutError(
                    f"no event of process {self.proc_id} within {wait:g} s") from None
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                raise ConnectionLost(
                    f"the connection closed before process {self.proc_id} ended") from None
            if isinstance(message, ErrorMessage):
                raise HostError(message)
            if not isinstance(message, ProcReadEvent):
                continue
            if message.kind == "exit":
                self.exit = message
                self._close()
            yield message

    async def read_to_exit(self, *, receive_timeout: float | None = None) -> ProcOutput:
        """Every remaining event up to the ``exit`` event, collected."""
        return ProcOutput([e async for e in self.events(receive_timeout=receive_timeout)])

    def _close(self) -> None:
        self.client._close_route(self.req_id)
        self._receive.close()

    async def aclose(self) -> None:
        """Stop listening to the process's events (the process keeps running). Call it
        for a handle whose events are not read to the ``exit`` event."""
        self._close()


async def spawn(
    client: ProcClient, cmd: list[str], *, cwd: str = "", env: dict[str, str] | None = None,
    stdin_mode: str = "pipe", timeout: int = 0,  # noqa: ASYNC109 - the wire field, host-side
    session_id: str = "", wait_timeout: float = 30.0,
) -> ProcHandle:
    """Send ``proc/spawn/req`` and return the handle of the started process.

    Args:
        cmd / cwd / env / stdin_mode: as the request's fields (PROTOCOL.md §10).
        timeout: int seconds the host lets the process run (0: the session's
            ``max_timeout``).
        wait_timeout: float seconds to wait for each answer of the host.

    Raises:
        SpawnRefused: ``ok`` false (not allowed, bad input, the system refused).
        HostError: ``proc_limit``, ``busy``, ``capability_missing`` …
        TimeoutError / ConnectionLost: no answer in ``wait_timeout`` seconds / the
            connection ended.
    """
    request = ProcSpawnRequest(session_id=session_id, cmd=list(cmd), cwd=cwd,
                               env=dict(env or {}), stdin_mode=stdin_mode, timeout=timeout)
    _, receive = client._open_route(request.id)

    def closed() -> None:
        client._close_route(request.id)
        receive.close()

    try:
        await client._send(request)
        with anyio.fail_after(wait_timeout):
            reply = await receive.receive()
    except TimeoutError:
        closed()
        raise TimeoutError(f"no proc/spawn/resp within {wait_timeout:g} s") from None
    except (anyio.EndOfStream, anyio.ClosedResourceError):
        closed()
        raise ConnectionLost("the connection closed before the proc/spawn/resp") from None
    except BaseException:
        closed()
        raise
    if isinstance(reply, ErrorMessage):
        closed()
        raise HostError(reply)
    assert isinstance(reply, ProcSpawnResponse)
    if not reply.ok:
        closed()
        raise SpawnRefused(reply)
    return ProcHandle(client, reply, receive, wait_timeout)
