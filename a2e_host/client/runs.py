"""Durable runs from the client: attach, detach, list and get (PROTOCOL.md §5 Durable
runs).

Layer: client (anyio). :class:`~a2e_host.client.Client` keeps thin methods over these
functions (``attach``, ``detach``, ``list_runs``, ``get_run``); they use only the client's
request plumbing, like :class:`~a2e_host.client.chains.ChainRun`.

An attach (and a ``chain/req`` resubmitted with a taken ``idempotency_key``) is answered
``chain/accepted`` whose ``attach_id`` names the message sent and whose ``req_id`` is the
run's original request id, which every following frame carries: the client routes that
``req_id`` to the same stream the moment the acceptance arrives, so no frame is missed.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..chains.messages import ChainAttach, ChainDetach, ChainDetached
from ..chains.run_messages import RunGet, RunGetResponse, RunList, RunListResponse
from ..messages import Message
from .chains import ChainRun, ChainRunClient

__all__ = ["attach", "detach", "get_run", "list_runs"]

DEFAULT_WAIT = 30.0
"""Seconds to wait for an answer to a run message."""


class Client(ChainRunClient, Protocol):
    """What these functions use of :class:`~a2e_host.client.Client` (this module must not
    import :mod:`.session`, which imports it)."""

    @property
    def session_id(self) -> str: ...

    async def _request(self, message: Message, wait_timeout: float) -> Message: ...


def attach(client: Client, run_id: str, since_seq: int = 0, *, req_id: str = "",
           receive_timeout: float = 330.0) -> ChainRun:
    """Stream a durable run: ``chain/attach``; iterate the result for its events with
    ``seq > since_seq`` and its ``chain/resp`` (the run's ``run_id`` and ``last_seq`` are
    on it once accepted).

    Args:
        run_id: from ``chain/accepted`` (or ``""`` and ``req_id``).
        since_seq: the last ``seq`` already received (0: all).
        req_id: the run's original request id, when ``run_id`` is empty.
        receive_timeout: seconds to wait for any one message.

    Raises (while iterating):
        HostError: ``unknown_run``, ``run_expired``, ``bad_since_seq``, ``store_required``.
        ConnectionLost / TimeoutError: as for a chain.
    """
    message = ChainAttach(session_id=client.session_id, run_id=run_id, req_id=req_id,
                          since_seq=since_seq)
    return ChainRun(client, message, receive_timeout)  # type: ignore[arg-type]  # any request


async def detach(client: Client, run_id: str, *, wait_timeout: float = DEFAULT_WAIT
                 ) -> ChainDetached:
    """Stop streaming a durable run to this connection (it runs on).

    Returns:
        The ``chain/detached`` answer (its ``last_seq``: attach with it to go on).

    Raises:
        HostError: ``unknown_run``, or the run is not streaming here.
    """
    reply = await client._request(ChainDetach(session_id=client.session_id, run_id=run_id),
                                  wait_timeout)
    assert isinstance(reply, ChainDetached)
    return reply


async def list_runs(client: Client, *, status: str = "", cursor: str = "", limit: int = 50,
                    wait_timeout: float = DEFAULT_WAIT) -> RunListResponse:
    """One page of this principal's durable runs, newest first (``run/list``).

    Returns:
        The ``run/list/resp``: ``runs`` and ``next_cursor`` (``""`` on the last page).
    """
    reply = await client._request(
        RunList(session_id=client.session_id, status=status, cursor=cursor, limit=limit),
        wait_timeout,
    )
    assert isinstance(reply, RunListResponse)
    return reply


async def get_run(client: Client, run_id: str, *, events: bool = False, since_seq: int = 0,
                  limit: int = 1000, wait_timeout: float = DEFAULT_WAIT) -> RunGetResponse:
    """One durable run's record, and a page of its events when ``events`` (``run/get``).

    Raises:
        HostError: ``unknown_run`` (another principal's run included), ``run_expired``.
    """
    reply = await client._request(
        RunGet(session_id=client.session_id, run_id=run_id, events=events,
               since_seq=since_seq, limit=limit),
        wait_timeout,
    )
    assert isinstance(reply, RunGetResponse)
    return reply


def alias_route(routes: dict[str, Any], message: Any) -> None:
    """A ``chain/accepted`` answering an attach (``attach_id``): route the run's own
    ``req_id`` to the stream waiting for the attach, before any of its frames arrive."""
    attach_id = getattr(message, "attach_id", "")
    if attach_id and attach_id in routes and message.req_id not in routes:
        routes[message.req_id] = routes[attach_id]
