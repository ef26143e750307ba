"""The errors the client raises, and the one place a task group's error is unwrapped.

Layer: client. Imports nothing from the host's runtime or transports.

Tree (all under :class:`~a2e_host.exceptions.A2EError`)::

    ClientError             the client's own base
    ├── HostError           the host answered with an ``error`` message (``code`` = its code)
    ├── HandshakeFailed     ``handshake/resp`` had ``ok: false`` (``reason``)
    ├── ConnectionLost      the connection ended while a request waited for its answer
    └── ServerFailed        :func:`~a2e_host.client.open_ws_server` could not start the server

A bounded wait that passed raises the built-in :class:`TimeoutError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..exceptions import A2EError
from ..messages import ErrorMessage, HandshakeResponse

__all__ = [
    "ClientError",
    "ConnectionLost",
    "HandshakeFailed",
    "HostError",
    "ServerFailed",
    "unwrap_group",
]


class ClientError(A2EError):
    """Base of the errors this client raises itself."""

    code = "client_error"


class HostError(ClientError):
    """The host answered a request with an ``error`` message (PROTOCOL.md §2).

    Attributes:
        code: the wire code (``busy``, ``schema_violation``, ``capability_missing`` …).
        req_id: the id of the request it answers.
        detail / retryable / capability_name: as sent by the host.
        error: the :class:`~a2e_host.messages.ErrorMessage` itself.
    """

    def __init__(self, error: ErrorMessage) -> None:
        super().__init__(
            f"host refused the request ({error.code}): {error.message}",
            detail=dict(error.detail),
            retryable=error.retryable,
        )
        self.code = error.code
        self.req_id = error.req_id
        self.capability_name = error.capability_name
        self.error = error


class HandshakeFailed(ClientError):
    """The host's ``handshake/resp`` had ``ok: false``.

    Attributes:
        reason: ``auth_failed``, ``version_mismatch``, ``no_caps`` or ``server_error``.
        response: the :class:`~a2e_host.messages.HandshakeResponse`.
    """

    code = "handshake_failed"

    def __init__(self, response: HandshakeResponse) -> None:
        hints = {
            "auth_failed": "pass the host's token as auth_token",
            "no_caps": "ask for a capability the host serves, e.g. agent_caps=['chains']",
            "version_mismatch": "use a host that speaks protocol 1.x",
        }
        hint = hints.get(response.reason, "see the host's log on stderr")
        reason = response.reason or "no reason"
        super().__init__(f"handshake refused by the host ({reason}); {hint}")
        self.reason = response.reason
        self.response = response


class ConnectionLost(ClientError):
    """The connection ended while a request was waiting for its answer."""

    code = "connection_lost"


class ServerFailed(ClientError):
    """:func:`~a2e_host.client.open_ws_server` could not start the server: it exited (a bad
    flag, a configuration it refuses) or did not say where it listens in time. The message
    ends with the server's last stderr lines."""

    code = "server_failed"


@contextmanager
def unwrap_group() -> Iterator[None]:
    """Re-raise a task group's :class:`BaseExceptionGroup` of exactly one exception as that
    exception, so a caller of a client context manager catches :class:`HostError`,
    :class:`ConnectionLost`, :class:`TimeoutError` … rather than a group.

    A group of several exceptions propagates unchanged; so does anything else. Use it
    around the task group of a context manager: ``with unwrap_group(): async with …``.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
