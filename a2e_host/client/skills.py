"""The ``skill`` capability from the client: discovery and calls (PROTOCOL.md §9).

Layer: client (anyio). :func:`discover_skills` asks ``skill/discover/req`` and returns
the definitions; :class:`SkillCall` is one ``skill/call/req`` in flight, an async
iterator of its ``skill/event`` frames ending with its ``skill/call/resp``. It knows its
client only as a :class:`~a2e_host.client.chains.ChainRunClient` (the same plumbing a
chain run uses) and must not import :mod:`.session`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..chains.skill_messages import (
    SkillCallRequest,
    SkillCallResponse,
    SkillDefinition,
    SkillDiscoverRequest,
    SkillDiscoverResponse,
    SkillEvent,
    SkillResult,
)
from ..messages import Message
from .calls import StreamedCall
from .chains import RESPONSE_GRACE, ChainRunClient

__all__ = ["SkillCall", "discover_skills", "skill_call_request"]


class _Requester(Protocol):
    session_id: str

    async def _request(self, message: Message, wait_timeout: float) -> Message: ...


async def discover_skills(
    client: _Requester, *, tags: Sequence[str] = (), categories: Sequence[str] = (),
    wait_timeout: float = 30.0,
) -> list[SkillDefinition]:
    """Every skill version the host serves (matching the filters), with its lifecycle.

    Raises:
        HostError: the host refused (e.g. ``capability_missing``: ask ``skill`` in the
            handshake). ConnectionLost / TimeoutError: as for any request.
    """
    reply = await client._request(
        SkillDiscoverRequest(filter_tags=list(tags), filter_categories=list(categories)),
        wait_timeout)
    assert isinstance(reply, SkillDiscoverResponse)
    return reply.skills


def skill_call_request(
    name: str, arguments: dict[str, Any] | None = None, *, timeout: int | None = None,
    streaming: bool = True, correlation_id: str = "", session_id: str = "",
) -> SkillCallRequest:
    """A ``skill/call/req`` for ``name`` (``name`` or ``name@version``)."""
    return SkillCallRequest(name=name, arguments=dict(arguments or {}), timeout=timeout,
                            streaming=streaming, correlation_id=correlation_id,
                            session_id=session_id)


class SkillCall(StreamedCall[SkillCallRequest, SkillEvent, SkillCallResponse]):
    """One ``skill/call/req`` in flight: iterating yields each
    :class:`~a2e_host.chains.skill_messages.SkillEvent` and ends with the
    :class:`~a2e_host.chains.skill_messages.SkillCallResponse` (also :attr:`response`);
    :meth:`result` drains them and returns the call's
    :class:`~a2e_host.chains.skill_messages.SkillResult`, as
    :meth:`~a2e_host.client.tools.ToolCall.result` returns the ``ToolResult``.

    Raises (while iterating):
        HostError: the host answered with an ``error`` (``busy``, ``capability_missing``).
        ConnectionLost: the connection ended first. TimeoutError: nothing arrived for
        ``receive_timeout`` seconds.
    """

    client: ChainRunClient
    _event_type = SkillEvent
    _response_type = SkillCallResponse
    _call_words = "skill call"
    _response_words = "skill/call/resp"

    def __init__(self, client: ChainRunClient, request: SkillCallRequest,
                 receive_timeout: float | None = None) -> None:
        if receive_timeout is None:
            receive_timeout = max(request.timeout or 60, 1) + RESPONSE_GRACE
        super().__init__(client, request, receive_timeout)

    async def result(self) -> SkillResult:
        """Drain the remaining events and return the call's result.

        Returns:
            The response's ``data`` (``success``, ``data``, ``error``, ``error_code`` …).
            A call refused before anything ran (``skill/call/resp`` with ``error`` and no
            ``data``: ``unknown_skill``, ``schema_violation``, ``chain_limit``) gives
            ``SkillResult(success=False)`` with that error's ``message`` and ``code``.
            The whole response (its ``skill``, ``events_dropped``, the refusal's
            ``details``) stays in :attr:`response`.
        """
        response = await self._drain()
        if response.data is not None:
            return response.data
        refusal = response.error or {}
        return SkillResult(success=False, error=str(refusal.get("message", "")),
                           error_code=str(refusal.get("code", "")) or None)
