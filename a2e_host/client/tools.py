"""The ``tools`` capability as the client speaks it: :func:`list_tools` and
:class:`ToolCall`, one ``tool/call/req`` in flight (PROTOCOL.md §11).

Layer: client (anyio). Like :mod:`.chains`, it knows its client only through a protocol
(:class:`ToolsClient`) and must not import :mod:`.session`; the
:class:`~a2e_host.client.Client` methods ``list_tools`` / ``call_tool`` are thin wrappers
of what is here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..messages import Message
from ..tools.messages import (
    ToolCallRequest,
    ToolCallResponse,
    ToolDefinition,
    ToolEvent,
    ToolListRequest,
    ToolListResponse,
    ToolResult,
)
from .calls import CallClient, StreamedCall
from .errors import ConnectionLost

__all__ = ["CALL_GRACE", "ToolCall", "ToolsClient", "list_tools"]

CALL_GRACE = 30.0
"""Seconds a call waits past its own ``timeout`` for the host's ``tool/call/resp``."""


class ToolsClient(CallClient, Protocol):
    """What the tools helpers use of a client (its own plumbing, hence the private
    names); :class:`~a2e_host.client.Client` is one."""

    session_id: str

    async def _request(self, message: Message, wait_timeout: float) -> Message:
        """Send ``message`` and return its one answer (HostError for an ``error``)."""


async def list_tools(
    client: ToolsClient,
    *,
    query: str = "",
    filter_tags: Sequence[str] = (),
    filter_kind: str = "",
    include_deferred: bool = False,
    wait_timeout: float = 30.0,
) -> list[ToolDefinition]:
    """Send ``tool/list/req`` and return the tools listed, sorted by name.

    Args:
        client: a client granted ``tools``.
        query: search names, descriptions and tags (case-insensitive); ``""`` lists.
        filter_tags: only tools with all of these tags.
        filter_kind: only tools with this ``side_effects`` (``none``, ``read``,
            ``write``, ``external``); ``""`` for all.
        include_deferred: include tools marked ``defer_loading``.
        wait_timeout: float seconds to wait for the answer.

    Raises:
        HostError: the host answered with an ``error`` (e.g. ``capability_missing``).
        ConnectionLost / TimeoutError: no answer.
    """
    reply = await client._request(
        ToolListRequest(filter_kind=filter_kind, filter_tags=list(filter_tags), query=query,
                        include_deferred=include_deferred),
        wait_timeout,
    )
    if not isinstance(reply, ToolListResponse):
        raise ConnectionLost(f"the host answered tool/list/req with {reply.TYPE!r}")
    return reply.tools


class ToolCall(StreamedCall[ToolCallRequest, ToolEvent, ToolCallResponse]):
    """One ``tool/call/req`` in flight: an async iterator of its messages.

    Iterating yields each :class:`~a2e_host.tools.messages.ToolEvent` (the tool's
    progress, log and artifact reports) as it arrives and ends with the
    :class:`~a2e_host.tools.messages.ToolCallResponse`; :meth:`result` drains them and
    returns the :class:`~a2e_host.tools.messages.ToolResult`. Every event received is
    also kept in :attr:`events` (a call with ``streaming: false`` receives its events in
    ``ToolResult.events`` instead, copied there too).

    Attributes:
        request: the :class:`~a2e_host.tools.messages.ToolCallRequest` sent.
        req_id: its ``id``.
        events: the events, in ``seq`` order.
        response: the response once received, else None.

    Raises (while iterating):
        HostError: the host refused the call with an ``error`` (``unknown_tool``,
            ``busy``, ``capability_missing`` …).
        ConnectionLost: the connection ended before the response.
        TimeoutError: nothing arrived for ``receive_timeout`` seconds.
    """

    client: ToolsClient
    _event_type = ToolEvent
    _response_type = ToolCallResponse
    _call_words = "tool call"
    _response_words = "tool/call/resp"

    def __init__(
        self, client: ToolsClient, request: ToolCallRequest, receive_timeout: float
    ) -> None:
        self.events: list[ToolEvent] = []
        super().__init__(client, request, receive_timeout)

    def _event(self, message: Message) -> ToolEvent:
        if not isinstance(message, ToolEvent):
            self._finish()
            raise ConnectionLost(f"the host sent {message.TYPE!r} for tool call {self.req_id}")
        self.events.append(message)
        return message

    def _keep_response(self, response: ToolCallResponse) -> None:
        if response.data.events:
            self.events.extend(response.data.events)

    async def result(self) -> ToolResult:
        """Drain the remaining events and return the call's result."""
        return (await self._drain()).data


def tool_call(
    client: ToolsClient,
    name: str,
    arguments: dict[str, Any] | None,
    *,
    streaming: bool,
    timeout: int | None,
    correlation_id: str,
    receive_timeout: float | None,
) -> ToolCall:
    """Build the :class:`ToolCall` of ``Client.call_tool`` (not sent until iterated)."""
    request = ToolCallRequest(
        session_id=client.session_id,
        tool_name=name,
        arguments=dict(arguments or {}),
        correlation_id=correlation_id,
        streaming=streaming,
    )
    if timeout is not None:
        request.timeout = timeout
    if receive_timeout is None:
        receive_timeout = request.timeout_within(10**9) + CALL_GRACE
    return ToolCall(client, request, receive_timeout)
