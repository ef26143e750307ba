"""One ``chain/req`` in flight, as the client sees it: :class:`ChainRun`.

Layer: client (anyio). The run reads its messages from the per-request stream the
:class:`~a2e_host.client.Client` routes them to (PROTOCOL.md §5: ``chain/event`` frames,
then exactly one ``chain/resp``).

It knows its client only as a :class:`ChainRunClient` and must not import
:mod:`.session` (which imports it: a client builds runs, a run never builds a client).
"""

from __future__ import annotations

from typing import Protocol

from ..chains.messages import ChainAccepted, ChainEvent, ChainRequest, ChainResponse
from ..messages import Message
from .calls import CallClient, StreamedCall

__all__ = ["ChainRun", "ChainRunClient", "RESPONSE_GRACE"]

RESPONSE_GRACE = 30.0
"""Seconds a run waits past the chain's own ``timeout`` for the host's ``chain/resp``."""


class ChainRunClient(CallClient, Protocol):
    """What a :class:`ChainRun` uses of the client it runs on (the client's own plumbing,
    hence the private names); :class:`~a2e_host.client.Client` is one."""

    async def cancel(self, req_id: str) -> None:
        """Send ``chain/cancel`` for ``req_id``."""


class ChainRun(StreamedCall[ChainRequest, ChainEvent, ChainResponse]):
    """One ``chain/req`` in flight: an async iterator of its messages.

    Iterating yields every :class:`~a2e_host.chains.messages.ChainEvent` as it arrives and ends
    with the :class:`~a2e_host.chains.messages.ChainResponse` (also kept as :attr:`response`).
    The request is sent on the first iteration step or by :meth:`start` (which returns the
    run: ``run = await client.run_chain(…).start()``), whichever comes first.

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

    client: ChainRunClient
    _event_type = ChainEvent
    _response_type = ChainResponse
    _call_words = "chain request"
    _response_words = "chain/resp"

    def __init__(
        self, client: ChainRunClient, request: ChainRequest, receive_timeout: float
    ) -> None:
        self.accepted: ChainAccepted | None = None
        super().__init__(client, request, receive_timeout)

    def _noted(self, message: Message) -> bool:
        if isinstance(message, ChainAccepted):  # a durable run: note it, go on
            self.accepted = message
            return True
        return False

    @property
    def run_id(self) -> str:
        """A durable run's id (from ``chain/accepted``), ``""`` before or without one."""
        return self.accepted.run_id if self.accepted is not None else ""

    async def result(self) -> ChainResponse:
        """Drain the remaining events and return the response."""
        return await self._drain()

    async def cancel(self) -> None:
        """Ask the host to cancel this chain (``chain/cancel``); the response follows."""
        await self.client.cancel(self.req_id)

    def _close_routes(self) -> None:
        self.client._close_route(self.req_id)
        if self.accepted is not None and self.accepted.req_id != self.req_id:
            self.client._close_route(self.accepted.req_id)
