"""One ``chain/req`` in flight, as the client sees it: :class:`ChainRun`.

Layer: client (anyio). The run reads its messages from the per-request stream the
:class:`~a2e_host.client.Client` routes them to (PROTOCOL.md §5: ``chain/event`` frames,
then exactly one ``chain/resp``).

It knows its client only as a :class:`ChainRunClient` and must not import
:mod:`.session` (which imports it: a client builds runs, a run never builds a client).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import anyio

from ..chains.messages import ChainAccepted, ChainEvent, ChainRequest, ChainResponse
from ..messages import ErrorMessage, Message
from .errors import ConnectionLost, HostError

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = ["ChainRun", "ChainRunClient", "RESPONSE_GRACE"]

RESPONSE_GRACE = 30.0
"""Seconds a run waits past the chain's own ``timeout`` for the host's ``chain/resp``."""


class ChainRunClient(Protocol):
    """What a :class:`ChainRun` uses of the client it runs on (the client's own plumbing,
    hence the private names); :class:`~a2e_host.client.Client` is one."""

    def _open_route(
        self, req_id: str
    ) -> tuple[MemoryObjectSendStream[Message], MemoryObjectReceiveStream[Message]]:
        """A stream of the messages carrying ``req_id``, routed to it until closed."""

    def _close_route(self, req_id: str) -> None:
        """Stop routing ``req_id``'s messages and close its stream."""

    async def _send(self, message: Message) -> None:
        """Send one message; raises ConnectionLost when the connection is gone."""

    def _closed_suffix(self) -> str:
        """Why the connection closed, as ``" (reason)"``, or ``""``."""

    async def cancel(self, req_id: str) -> None:
        """Send ``chain/cancel`` for ``req_id``."""


class ChainRun:
    """One ``chain/req`` in flight: an async iterator of its messages.

    Iterating yields every :class:`~a2e_host.chains.messages.ChainEvent` as it arrives and ends
    with the :class:`~a2e_host.chains.messages.ChainResponse` (also kept as :attr:`response`).
    The request is sent on the first iteration step or by :meth:`start`, whichever comes
    first.

    Attributes:
        client: the client it runs on.
        request: the :class:`~a2e_host.chains.messages.ChainRequest` sent.
        req_id: its ``id``, the ``req_id`` of every event and of the response.
        response: the response once received, else None.
        accepted: a durable run's ``chain/accepted`` once received (its ``run_id``;
            for an attach or a resubmitted ``idempotency_key``, its ``req_id`` is the
            run's original request id, which its events carry), else None.

    Raises (while iterating):
        HostError: the host refused the request with an ``error`` message.
        ConnectionLost: the connection ended before the response.
        TimeoutError: nothing arrived for ``receive_timeout`` seconds.
    """

    def __init__(
        self, client: ChainRunClient, request: ChainRequest, receive_timeout: float
    ) -> None:
        self.client = client
        self.request = request
        self.req_id = request.id
        self.response: ChainResponse | None = None
        self.accepted: ChainAccepted | None = None
        self._receive_timeout = receive_timeout
        self._started = False
        self._finished = False
        self._send, self._receive = client._open_route(request.id)

    async def start(self) -> ChainRun:
        """Send the request (once); returns self so ``run = await client.run_chain(…).start()``."""
        if not self._started:
            self._started = True
            await self.client._send(self.request)
        return self

    def __aiter__(self) -> ChainRun:
        return self

    async def __anext__(self) -> ChainEvent | ChainResponse:
        if self._finished:
            raise StopAsyncIteration
        await self.start()
        message = await self._next_message()
        while isinstance(message, ChainAccepted):  # a durable run: note it, go on
            self.accepted = message
            message = await self._next_message()
        if isinstance(message, ChainResponse):
            self.response = message
            self._finish()
            return message
        if isinstance(message, ErrorMessage):
            self._finish()
            raise HostError(message)
        assert isinstance(message, ChainEvent)
        return message

    @property
    def run_id(self) -> str:
        """A durable run's id (from ``chain/accepted``), ``""`` before or without one."""
        return self.accepted.run_id if self.accepted is not None else ""

    async def _next_message(self) -> Message:
        try:
            with anyio.fail_after(self._receive_timeout):
                message = await self._receive.receive()
        except TimeoutError:
            self._finish()
            raise TimeoutError(
                f"no message for chain request {self.req_id} within {self._receive_timeout:g} s"
            ) from None
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._finish()
            raise ConnectionLost(
                f"the connection closed before the chain/resp of request {self.req_id}"
                f"{self.client._closed_suffix()}"
            ) from None
        return message

    async def result(self) -> ChainResponse:
        """Drain the remaining events and return the response."""
        async for _message in self:
            pass
        assert self.response is not None
        return self.response

    async def cancel(self) -> None:
        """Ask the host to cancel this chain (``chain/cancel``); the response follows."""
        await self.client.cancel(self.req_id)

    async def aclose(self) -> None:
        """Stop listening (further messages of this request are dropped)."""
        self._finish()

    def _finish(self) -> None:
        if not self._finished:
            self._finished = True
            self.client._close_route(self.req_id)
            if self.accepted is not None and self.accepted.req_id != self.req_id:
                self.client._close_route(self.accepted.req_id)
            self._receive.close()
