"""The plugin's view of a connection for one message: :class:`ConnectionContext`.

Layer: runtime. Implements :class:`~a2e_host.plugin.PluginContext`; a plugin sees the
session, the connection's outbox, a bound logger, whether the connection is closing,
and a way to start work that outlives ``handle``. It reads the connection only
through :class:`ContextOwner`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..messages import Message
from ..plugin import Outbox as OutboxProtocol
from ..plugin import SessionInfo

__all__ = ["ConnectionContext", "ContextOwner"]


class ContextOwner(Protocol):
    """What a context needs of its connection (implemented by
    :class:`~a2e_host.runtime.connection.HostConnection`)."""

    @property
    def closing(self) -> bool: ...

    @property
    def outbox(self) -> OutboxProtocol: ...

    @property
    def log(self) -> Any: ...

    def start_work(
        self,
        fn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        *,
        name: str,
        req_id: str,
        capability: str,
    ) -> None: ...


class ConnectionContext:
    """A plugin's view of the connection for one message (implements
    :class:`~a2e_host.plugin.PluginContext`).

    Args:
        conn: the connection.
        session: the message's session (already checked).
        message: the message being handled (its ``id`` is the work's ``req_id``).
        capability: the handling plugin's capability (named in errors).
    """

    __slots__ = ("_conn", "session", "outbox", "log", "_req_id", "_capability")

    def __init__(
        self, conn: ContextOwner, session: SessionInfo, message: Message, capability: str
    ) -> None:
        self._conn = conn
        self.session: SessionInfo = session
        self.outbox: OutboxProtocol = conn.outbox
        self.log = conn.log.bind(req_id=message.id)
        self._req_id = message.id
        self._capability = capability

    @property
    def closing(self) -> bool:
        """True once the connection stopped taking work (``shutdown``, signal, EOF)."""
        return self._conn.closing

    @closing.setter
    def closing(self, value: bool) -> None:
        raise AttributeError("closing is read-only: it follows the connection's state")

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any, name: str = "") -> None:
        """Run ``fn(*args)`` in the background; an exception it raises is sent as an
        ``error`` with this message's id as ``req_id``."""
        self._conn.start_work(fn, args, name=name, req_id=self._req_id, capability=self._capability)
