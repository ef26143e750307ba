"""One request in flight whose answer streams: :class:`StreamedCall`, the part a chain run
(:class:`~a2e_host.client.ChainRun`), a tool call (:class:`~a2e_host.client.ToolCall`) and
a skill call (:class:`~a2e_host.client.skills.SkillCall`) share.

Layer: client (anyio). Each sends its request once, then reads the messages the
:class:`~a2e_host.client.Client` routes to its ``req_id``: events, until one response or an
``error`` ends it. What differs — which messages are events and which the response, what
is kept of them — is in the subclasses' hooks. It knows its client only as a
:class:`CallClient` and must not import :mod:`.session`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, Protocol, Self, TypeVar

import anyio

from ..messages import ErrorMessage, Message
from .errors import ConnectionLost, HostError

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = ["CallClient", "StreamedCall"]

RequestT = TypeVar("RequestT", bound=Message)
EventT = TypeVar("EventT", bound=Message)
ResponseT = TypeVar("ResponseT", bound=Message)


class CallClient(Protocol):
    """What a :class:`StreamedCall` uses of the client it runs on (the client's own
    plumbing, hence the private names); :class:`~a2e_host.client.Client` is one."""

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


class StreamedCall(Generic[RequestT, EventT, ResponseT]):
    """One request in flight: an async iterator of its events, ending with its response.

    The request is sent on the first iteration step or by :meth:`start`, whichever comes
    first. A subclass names its message types (``_event_type``, ``_response_type``) and
    the words of its errors (``_call_words``, ``_response_words``), and may override the
    hooks ``_noted`` (a message kept and not yielded), ``_event`` (check and keep an
    event), ``_keep_response`` and ``_close_routes``.

    Raises (while iterating):
        HostError: the host answered with an ``error`` message.
        ConnectionLost: the connection ended before the response.
        TimeoutError: nothing arrived for ``receive_timeout`` seconds.
    """

    _event_type: type[EventT]
    _response_type: type[ResponseT]
    _call_words: str
    """The call in the timeout message: ``no message for {words} {req_id} within …``."""
    _response_words: str
    """The response's wire type in the connection-lost message."""

    def __init__(self, client: CallClient, request: RequestT, receive_timeout: float) -> None:
        self.client = client
        self.request = request
        self.req_id = request.id
        self.response: ResponseT | None = None
        self._receive_timeout = receive_timeout
        self._started = False
        self._finished = False
        self._send, self._receive = client._open_route(request.id)

    async def start(self) -> Self:
        """Send the request (once); returns self."""
        if not self._started:
            self._started = True
            await self.client._send(self.request)
        return self

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> EventT | ResponseT:
        if self._finished:
            raise StopAsyncIteration
        await self.start()
        message = await self._next_message()
        while self._noted(message):
            message = await self._next_message()
        if isinstance(message, self._response_type):
            self.response = message
            self._keep_response(message)
            self._finish()
            return message
        if isinstance(message, ErrorMessage):
            self._finish()
            raise HostError(message)
        return self._event(message)

    async def _next_message(self) -> Message:
        try:
            with anyio.fail_after(self._receive_timeout):
                message = await self._receive.receive()
        except TimeoutError:
            self._finish()
            raise TimeoutError(
                f"no message for {self._call_words} {self.req_id} within "
                f"{self._receive_timeout:g} s"
            ) from None
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._finish()
            raise ConnectionLost(
                f"the connection closed before the {self._response_words} of request "
                f"{self.req_id}{self.client._closed_suffix()}"
            ) from None
        return message

    def _noted(self, message: Message) -> bool:
        """Whether ``message`` was kept and is not to be yielded (none, here)."""
        return False

    def _event(self, message: Message) -> EventT:
        """The event to yield for ``message`` (neither the response nor an error)."""
        assert isinstance(message, self._event_type)
        return message

    def _keep_response(self, response: ResponseT) -> None:
        """Keep what else the response carries (called before the call finishes)."""

    async def _drain(self) -> ResponseT:
        """Read the remaining events and return the response."""
        async for _message in self:
            pass
        assert self.response is not None
        return self.response

    async def aclose(self) -> None:
        """Stop listening (further messages of this request are dropped)."""
        self._finish()

    def _finish(self) -> None:
        if not self._finished:
            self._finished = True
            self._close_routes()
            self._receive.close()

    def _close_routes(self) -> None:
        self.client._close_route(self.req_id)
