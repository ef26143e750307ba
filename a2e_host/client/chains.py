"""One ``chain/req`` in flight, as the client sees it: :class:`ChainRun`.

Layer: client (anyio). The run reads its messages from the per-request stream the
:class:`~a2e_host.client.Client` routes them to (PROTOCOL.md §5: ``chain/event`` frames,
then exactly one ``chain/resp``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from ..chains.messages import ChainEvent, ChainRequest, ChainResponse
from ..messages import ErrorMessage
from .errors import ConnectionLost, HostError

if TYPE_CHECKING:
    from .session import Client

__all__ = ["ChainRun", "RESPONSE_GRACE"]

RESPONSE_GRACE = 30.0
"""Seconds a run waits past the chain's own ``timeout`` for the host's ``chain/resp``."""


class ChainRun:
    """One ``chain/req`` in flight: an async iterator of its messages.

    Iterating yields every :class:`~a2e_host.chains.messages.ChainEvent` as it arrives and ends
    with the :class:`~a2e_host.chains.messages.ChainResponse` (also kept as :attr:`response`).
    The request is sent on the first iteration step or by :meth:`start`, whichever comes
    first.

    Attributes:
        request: the :class:`~a2e_host.chains.messages.ChainRequest` sent.
        req_id: its ``id``, the ``req_id`` of every event and of the response.
        response: the response once received, else None.

    Raises (while iterating):
        HostError: the host refused the request with an ``error`` message.
        ConnectionLost: the connection ended before the response.
        TimeoutError: nothing arrived for ``receive_timeout`` seconds.
    """

    def __init__(self, client: Client, request: ChainRequest, receive_timeout: float) -> None:
        self.client = client
        self.request = request
        self.req_id = request.id
        self.response: ChainResponse | None = None
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
        if isinstance(message, ChainResponse):
            self.response = message
            self._finish()
            return message
        if isinstance(message, ErrorMessage):
            self._finish()
            raise HostError(message)
        assert isinstance(message, ChainEvent)
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
            self._receive.close()
