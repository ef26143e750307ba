"""The client itself: :class:`Client` (one handshaken connection) and :func:`open_client`.

Layer: client (anyio). It speaks whole messages through a :class:`MessageStream`; the
modules next to it adapt WebSocket, stdio and the in-process host to one.

Imports run one way: :mod:`.errors` and :mod:`.chains` below this module; the transports
(:mod:`.websocket`, :mod:`.stdio`, :mod:`.memory`) and :mod:`.server` above it, so it
imports none of them. It knows the server a :func:`~a2e_host.client.serve_ws` client was
started with only as a :class:`RunningServer`.

Theory of operation: one background reader task per client receives every incoming
message and routes it by ``req_id`` to the memory object stream of the request waiting
for it (a chain run, a ping, the handshake), so several chains can run concurrently on
one client. Those per-request streams are unbounded: a run nobody iterates keeps its
events in memory until it is closed (:meth:`ChainRun.aclose`). When the connection ends,
every waiter gets :class:`ConnectionLost`. A message no waiter claims is kept in
:attr:`Client.unrouted` (the last 100).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..chains.messages import (
    ChainAccepted,
    ChainCancel,
    ChainDetached,
    ChainNode,
    ChainRequest,
    ChainResponse,
)
from ..chains.proc_messages import ProcStatusRequest, ProcStatusResponse
from ..chains.run_messages import RunGetResponse, RunListResponse
from ..chains.skill_messages import SkillDefinition
from ..exceptions import A2EError
from ..messages import (
    ErrorMessage,
    HandshakeRequest,
    HandshakeResponse,
    Message,
    Ping,
    Pong,
    Shutdown,
)
from ..tools.messages import ToolCallResponse, ToolDefinition, ToolListResponse
from .chains import RESPONSE_GRACE, ChainRun
from .errors import ConnectionLost, HandshakeFailed, HostError, unwrap_group
from .procs import ProcHandle
from .procs import spawn as spawn_proc
from .runs import alias_route, attach, detach, get_run, list_runs
from .skills import SkillCall, discover_skills, skill_call_request
from .streams import MessageStream
from .tools import ToolCall, list_tools, tool_call

if TYPE_CHECKING:
    from anyio.abc import Process

__all__ = ["DEFAULT_AGENT_CAPS", "Client", "MessageStream", "RunningServer", "open_client"]

DEFAULT_AGENT_CAPS: tuple[str, ...] = ("chains", "tools", "proc", "skill")
"""Capabilities asked for when the caller names none (PROTOCOL.md §2)."""


class RunningServer(Protocol):
    """A host server the client was started with, as :attr:`Client.server` shows it;
    :class:`~a2e_host.client.WsServer` is one."""

    @property
    def url(self) -> str:
        """Where it listens, e.g. ``ws://127.0.0.1:40419``."""

    @property
    def process(self) -> Process:
        """Its child process."""

    @property
    def stderr_lines(self) -> deque[str]:
        """Its last stderr lines (its log) when captured."""

    @property
    def returncode(self) -> int | None:
        """Its exit status once it has stopped, else None."""

    def connect(self, **kwargs: Any) -> AbstractAsyncContextManager[Client]:
        """Another client connected to it."""


class Client:
    """A handshaken connection to an A2E host. Build one with :func:`connect_ws`,
    :func:`spawn_stdio`, :func:`connect_memory` or :func:`open_client`.

    Attributes:
        session_id: from ``handshake/resp``.
        handshake: the :class:`~a2e_host.messages.HandshakeResponse`.
        accepted_caps: capability names the host granted.
        features: *extensions* the ``chains`` capability speaks (e.g. ``["chain/cancel"]``).
        limits: the session's effective ceilings (PROTOCOL.md §6), from the ``chains`` metadata.
        max_parallel: chains in flight per session the host allows.
        transport: the underlying :class:`MessageStream` (e.g. :class:`StdioStream`).
        unrouted: the last 100 messages no waiter claimed: the ``error`` answering a
            ``chain/cancel`` sent after its chain ended (:meth:`cancel` does not wait for
            one), an ``error`` without ``req_id``, a message of a request already closed.
        url: the WebSocket URL (:func:`connect_ws`, :func:`serve_ws`), else ``""``.
        server: the :class:`WsServer` (a :class:`RunningServer`) a :func:`serve_ws`
            client was started with, else None; it stays readable after the block
            (``client.server.returncode``).
    """

    def __init__(self, stream: MessageStream) -> None:
        self.transport = stream
        self.session_id = ""
        self.handshake: HandshakeResponse | None = None
        self.accepted_caps: list[str] = []
        self.features: list[str] = []
        self.limits: dict[str, int] = {}
        self.max_parallel = 0
        self.unrouted: deque[Message] = deque(maxlen=100)
        self.url = ""
        self.server: RunningServer | None = None
        self._routes: dict[str, MemoryObjectSendStream[Message]] = {}
        self._closed = False
        self._closed_reason = ""
        self._handshake_id = ""
        self._send_lock = anyio.Lock()

    # -- requests --------------------------------------------------------------

    def run_chain(
        self,
        nodes: Sequence[ChainNode | dict[str, Any]],
        entry_node: str,
        *,
        initial_input: dict[str, Any] | None = None,
        streaming: bool = True,
        timeout: int | None = None,
        chain_id: str = "",
        correlation_id: str = "",
        receive_timeout: float | None = None,
        durable: bool = False,
        idempotency_key: str = "",
        retention: int = 0,
    ) -> ChainRun:
        """Run a chain (seed ``chain/req``); iterate the result for its events and response.

        Args:
            nodes: the chain's nodes, Structs or ``ChainNode``-shaped dicts.
            entry_node: node_id of the entry root.
            initial_input: the context's ``input`` (default ``{}``).
            streaming: ask for ``chain/event`` frames.
            timeout: the chain's wall-clock limit, int seconds; None (left out) is
                ``min(300, max_timeout)`` of the session (PROTOCOL.md §5).
            chain_id: default: 8 hex digits.
            correlation_id: ties the chain to an agent turn.
            receive_timeout: seconds to wait for any one message; default ``timeout`` + 30.
            durable / idempotency_key / retention: *extensions* (PROTOCOL.md §5 Durable
                runs): a run recorded by the host that outlives this connection; its
                ``run_id`` is :attr:`ChainRun.run_id` once accepted.

        Returns:
            A :class:`ChainRun` (async iterator of ChainEvent, then the ChainResponse).

        Raises:
            msgspec.ValidationError: a node dict has a field of the wrong type.
        """
        request = ChainRequest(
            session_id=self.session_id,
            chain_id=chain_id,
            nodes=[n if isinstance(n, ChainNode) else msgspec.convert(n, ChainNode) for n in nodes],
            entry_node=entry_node,
            initial_input=dict(initial_input or {}),
            correlation_id=correlation_id,
            streaming=streaming,
            durable=durable,
            idempotency_key=idempotency_key,
            retention=retention,
        )
        if timeout is not None:
            request.timeout = timeout
        return self.send_request(request, receive_timeout=receive_timeout)

    def send_request(
        self, request: ChainRequest, *, receive_timeout: float | None = None
    ) -> ChainRun:
        """Like :meth:`run_chain` for a prepared request (its ``session_id`` is filled in,
        and a left-out ``timeout`` becomes ``min(300, max_timeout)`` of the session, since
        an encoded request always carries the field)."""
        if not request.session_id:
            request.session_id = self.session_id
        if request.timeout_omitted and "max_timeout" in self.limits:
            request.timeout = request.timeout_within(self.limits["max_timeout"])
        if receive_timeout is None:
            receive_timeout = max(request.timeout, 1) + RESPONSE_GRACE
        return ChainRun(self, request, receive_timeout)

    async def list_tools(
        self,
        *,
        query: str = "",
        filter_tags: Sequence[str] = (),
        filter_kind: str = "",
        include_deferred: bool = False,
        wait_timeout: float = 30.0,
    ) -> list[ToolDefinition]:
        """The host's tools (``tool/list/req``; see :func:`a2e_host.client.tools.list_tools`)."""
        return await list_tools(self, query=query, filter_tags=filter_tags,
                                filter_kind=filter_kind, include_deferred=include_deferred,
                                wait_timeout=wait_timeout)

    def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        streaming: bool = True,
        timeout: int | None = None,
        correlation_id: str = "",
        receive_timeout: float | None = None,
    ) -> ToolCall:
        """Call tool ``name`` directly (``tool/call/req``); iterate the result for its
        events and response, or ``await call.result()`` for its
        :class:`~a2e_host.tools.messages.ToolResult` (the whole response is then the
        call's ``.response``; a :class:`~a2e_host.client.tools.ToolCall`).

        Args:
            name: the tool.
            arguments: its input (default ``{}``).
            streaming: receive its reports as ``tool/event`` while it runs.
            timeout: int seconds; None (left out) is ``min(30, max_timeout)``.
            correlation_id: ties the call to an agent turn.
            receive_timeout: seconds to wait for any one message; default timeout + 30.
        """
        return tool_call(self, name, arguments, streaming=streaming, timeout=timeout,
                         correlation_id=correlation_id, receive_timeout=receive_timeout)

    async def discover_skills(
        self, *, tags: Sequence[str] = (), categories: Sequence[str] = ()
    ) -> list[SkillDefinition]:
        """Every skill version the host serves, with version and lifecycle
        (``skill/discover/req``, PROTOCOL.md §9); see :func:`.skills.discover_skills`."""
        return await discover_skills(self, tags=tags, categories=categories)

    def call_skill(
        self, name: str, arguments: dict[str, Any] | None = None, *,
        timeout: int | None = None, streaming: bool = True, correlation_id: str = "",
    ) -> SkillCall:
        """Call skill ``name`` (``name`` or ``name@version``) with ``arguments``
        (``skill/call/req``, PROTOCOL.md §9); iterate the result for its events and
        response, or ``await client.call_skill(…).result()`` for its
        :class:`~a2e_host.chains.skill_messages.SkillResult` (the whole response is
        then the call's ``.response``)."""
        return SkillCall(self, skill_call_request(
            name, arguments, timeout=timeout, streaming=streaming,
            correlation_id=correlation_id, session_id=self.session_id))

    async def spawn_proc(self, cmd: Sequence[str], **options: Any) -> ProcHandle:
        """Start a process on the host (``proc/spawn/req``, PROTOCOL.md §10); see
        :func:`.procs.spawn` for ``cwd``, ``env``, ``stdin_mode``, ``timeout``,
        ``wait_timeout`` and what it raises."""
        return await spawn_proc(self, list(cmd), session_id=self.session_id, **options)

    async def proc_status(self, proc_id: str = "", *, wait_timeout: float = 10.0
                          ) -> ProcStatusResponse:
        """``proc/status/req``: one process (``procs`` has it), or every process of the
        session (``proc_id`` ``""``)."""
        reply = await self._request(ProcStatusRequest(proc_id=proc_id), wait_timeout)
        assert isinstance(reply, ProcStatusResponse)
        return reply

    async def cancel(self, req_id: str) -> None:
        """Send ``chain/cancel`` for a running chain (PROTOCOL.md §5, *extension*).

        The chain's run then ends with a response whose error code is ``cancelled``.
        """
        await self._send(ChainCancel(session_id=self.session_id, req_id=req_id))

    def attach(self, run_id: str, since_seq: int = 0, *, req_id: str = "") -> ChainRun:
        """Stream a durable run from ``since_seq`` (``chain/attach``); see
        :func:`a2e_host.client.runs.attach`."""
        return attach(self, run_id, since_seq, req_id=req_id)

    async def detach(self, run_id: str) -> ChainDetached:
        """Stop streaming a durable run here (``chain/detach``); it runs on."""
        return await detach(self, run_id)

    async def cancel_run(self, run_id: str) -> None:
        """Cancel a durable run of this principal from any connection (``chain/cancel``
        with ``run_id``)."""
        await self._send(ChainCancel(session_id=self.session_id, run_id=run_id))

    async def list_runs(self, *, status: str = "", cursor: str = "", limit: int = 50
                        ) -> RunListResponse:
        """A page of this principal's durable runs (``run/list``; the session must have
        asked for the ``runs`` capability: ``agent_caps=[..., "runs"]``)."""
        return await list_runs(self, status=status, cursor=cursor, limit=limit)

    async def get_run(self, run_id: str, *, events: bool = False, since_seq: int = 0
                      ) -> RunGetResponse:
        """A durable run's record, with a page of its events when ``events``
        (``run/get``; needs the ``runs`` capability, as :meth:`list_runs`)."""
        return await get_run(self, run_id, events=events, since_seq=since_seq)

    async def ping(self, *, wait_timeout: float = 10.0) -> float:
        """Ping the host; returns its ``uptime_seconds`` (float seconds).

        Raises:
            TimeoutError: no ``pong`` within ``wait_timeout`` seconds.
            HostError / ConnectionLost: as for any request.
        """
        reply = await self._request(Ping(), wait_timeout)
        assert isinstance(reply, Pong)
        return reply.uptime_seconds

    async def shutdown(self, grace: int = 10) -> None:
        """Ask the host to stop taking work and close within ``grace`` int seconds
        (the ``shutdown`` message's ``timeout``, PROTOCOL.md §2)."""
        await self._send(Shutdown(timeout=grace))

    async def aclose(self) -> None:
        """Close the connection; waiters get :class:`ConnectionLost`. Idempotent."""
        if self._closed:
            return
        self._mark_closed("closed by the client")
        with anyio.move_on_after(5, shield=True):
            try:
                await self.transport.aclose()
            except Exception:  # noqa: BLE001 - closing a broken transport is best effort
                pass

    @property
    def closed(self) -> bool:
        """Whether the connection has ended."""
        return self._closed

    # -- internals -------------------------------------------------------------

    async def _handshake(self, request: HandshakeRequest, wait_timeout: float) -> None:
        self._handshake_id = request.id
        reply = await self._request(request, wait_timeout)
        assert isinstance(reply, HandshakeResponse)
        self.handshake = reply
        if not reply.ok:
            raise HandshakeFailed(reply)
        self.session_id = reply.session_id
        self.max_parallel = reply.max_parallel
        self.accepted_caps = [c.capability for c in reply.accepted_caps if c.enabled]
        for cap in reply.accepted_caps:
            if cap.capability == "chains":
                self.features = list(cap.metadata.get("features", []))
                self.limits = dict(cap.metadata.get("limits", {}))

    async def _request(self, message: Message, wait_timeout: float) -> Message:
        send, receive = self._open_route(message.id)
        try:
            await self._send(message)
            with anyio.fail_after(wait_timeout):
                reply = await receive.receive()
        except TimeoutError:
            raise TimeoutError(
                f"no answer to {message.TYPE} within {wait_timeout:g} s; is the host alive?"
            ) from None
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise ConnectionLost(
                f"the connection closed before the answer to {message.TYPE}"
                f"{self._closed_suffix()}"
            ) from None
        finally:
            self._close_route(message.id)
            receive.close()
        if isinstance(reply, ErrorMessage):
            raise HostError(reply)
        return reply

    async def _send(self, message: Message) -> None:
        if self._closed:
            raise ConnectionLost(f"cannot send {message.TYPE}: the connection is closed")
        async with self._send_lock:
            try:
                await self.transport.send(message)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                self._mark_closed(f"send failed: {exc}")
                raise ConnectionLost(
                    f"cannot send {message.TYPE}: the connection is gone ({exc or 'closed'})"
                ) from exc

    def _open_route(
        self, req_id: str
    ) -> tuple[MemoryObjectSendStream[Message], MemoryObjectReceiveStream[Message]]:
        send, receive = anyio.create_memory_object_stream[Message](math.inf)
        if self._closed:
            send.close()
        else:
            self._routes[req_id] = send
        return send, receive

    def _close_route(self, req_id: str) -> None:
        send = self._routes.pop(req_id, None)
        if send is not None:
            send.close()

    def _route(self, message: Message) -> None:
        req_id = getattr(message, "req_id", "")
        send = self._routes.get(req_id)
        if send is None and isinstance(message, ChainAccepted):
            send = self._routes.get(message.attach_id)
        if send is None and isinstance(message, HandshakeResponse):
            # a host that leaves req_id empty still answers the one pending handshake
            send = self._routes.get(self._handshake_id)
        if send is None:
            self.unrouted.append(message)
            return
        try:
            send.send_nowait(message)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._routes.pop(req_id, None)
            return
        if isinstance(message, ChainAccepted):
            alias_route(self._routes, message)
        if isinstance(message, ChainResponse | ErrorMessage | Pong | HandshakeResponse
                      | ToolCallResponse | ToolListResponse):
            self._close_route(req_id)

    async def _read_loop(self) -> None:
        """Receive and route until the connection ends; never raises."""
        reason = "closed by the host"
        try:
            while True:
                message = await self.transport.receive()
                self._route(message)
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        except A2EError as exc:
            reason = f"the host sent a message this client cannot read: {exc}"
        except Exception as exc:  # noqa: BLE001 - any transport failure ends the connection
            reason = f"{type(exc).__name__}: {exc}"
        self._mark_closed(reason)

    def _mark_closed(self, reason: str) -> None:
        if not self._closed:
            self._closed = True
            self._closed_reason = reason
        for send in list(self._routes.values()):
            send.close()
        self._routes.clear()

    def _closed_suffix(self) -> str:
        return f" ({self._closed_reason})" if self._closed_reason else ""


@asynccontextmanager
async def open_client(
    stream: MessageStream,
    *,
    agent_caps: Sequence[str] = DEFAULT_AGENT_CAPS,
    auth_token: str = "",
    limits: dict[str, int] | None = None,
    agent_id: str = "a2e-host-client",
    handshake_timeout: float = 10.0,
) -> AsyncIterator[Client]:
    """Run a :class:`Client` over an open :class:`MessageStream` and handshake.

    Args:
        stream: the connection.
        agent_caps: capability names to ask for (PROTOCOL.md §2).
        auth_token: the host's token, when it requires one.
        limits: ceilings to lower for this session, e.g. ``{"max_nodes": 100}`` (§6).
        agent_id: free-form name of this agent.
        handshake_timeout: seconds to wait for ``handshake/resp``.

    Raises:
        HandshakeFailed: the host answered ``ok: false``.
        HostError: the host answered the handshake with an ``error``.
        TimeoutError: no ``handshake/resp`` within ``handshake_timeout``.
        ConnectionLost: the connection ended first.
    """
    client = Client(stream)
    with unwrap_group():
        async with anyio.create_task_group() as tg:
            tg.start_soon(client._read_loop, name="a2e-client-reader")
            try:
                await client._handshake(
                    HandshakeRequest(
                        agent_id=agent_id,
                        agent_caps=list(agent_caps),
                        auth_token=auth_token,
                        limits=dict(limits or {}),
                    ),
                    handshake_timeout,
                )
                yield client
            finally:
                await client.aclose()
                tg.cancel_scope.cancel()
