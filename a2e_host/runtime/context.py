"""The plugin's view of a connection for one message: :class:`ConnectionContext`.

Layer: runtime. Implements :class:`~a2e_host.plugin.PluginContext`; a plugin sees the
session, the connection's outbox, a bound logger, whether the connection is closing,
the session's runs in flight, and a way to start a run of the host (work that outlives
``handle``). It reads the connection only through :class:`ContextOwner`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..messages import Message
from ..plugin import Outbox as OutboxProtocol
from ..plugin import SessionInfo
from .runs import DetachPolicy, Run, RunSink, SessionRuns

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

    def runs_of(self, session: SessionInfo, capability: str) -> SessionRuns: ...

    def start_run(
        self,
        fn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        *,
        name: str,
        req_id: str,
        capability: str,
        listed: bool,
        policy: DetachPolicy = DetachPolicy.CANCEL,
        sink: RunSink | None = None,
    ) -> Run: ...

    def attach_run(self, run: Run, after: int | None) -> None: ...

    def detach_run(self, run: Run) -> bool: ...


class ConnectionContext:
    """A plugin's view of the connection for one message (implements
    :class:`~a2e_host.plugin.PluginContext`).

    Args:
        conn: the connection.
        session: the message's session (already checked).
        message: the message being handled (its ``id`` is the work's ``req_id``).
        capability: the handling plugin's capability (named in errors).
    """

    __slots__ = ("_conn", "session", "outbox", "log", "_req_id", "_capability", "_runs")

    def __init__(
        self, conn: ContextOwner, session: SessionInfo, message: Message, capability: str
    ) -> None:
        self._conn = conn
        self.session: SessionInfo = session
        self.outbox: OutboxProtocol = conn.outbox
        self.log = conn.log.bind(req_id=message.id)
        self._req_id = message.id
        self._capability = capability
        self._runs: SessionRuns | None = None

    @property
    def closing(self) -> bool:
        """True once the connection stopped taking work (``shutdown``, signal, EOF)."""
        return self._conn.closing

    @closing.setter
    def closing(self, value: bool) -> None:
        raise AttributeError("closing is read-only: it follows the connection's state")

    @property
    def runs(self) -> SessionRuns:
        """This session's runs in flight of the handling plugin's capability."""
        if self._runs is None:
            self._runs = self._conn.runs_of(self.session, self._capability)
        return self._runs

    def start_run(
        self,
        fn: Callable[..., Awaitable[Any]],
        *args: Any,
        name: str = "",
        sink: RunSink | None = None,
    ) -> Run:
        """Start ``fn(run, *args)`` as a run of the host listed under this message's id,
        attached to this connection (see :meth:`PluginContext.start_run
        <a2e_host.plugin.PluginContext.start_run>`); with ``sink`` (a durable run's) it
        outlives the connection (:attr:`DetachPolicy.KEEP`).

        Raises:
            ValueError: a run is already listed for this message's id.
        """
        policy = DetachPolicy.CANCEL if sink is None else DetachPolicy.KEEP
        return self._conn.start_run(fn, args, name=name, req_id=self._req_id,
                                    capability=self._capability, listed=True,
                                    policy=policy, sink=sink)

    def attach_run(self, run: Run, *, after: int | None = None) -> None:
        """Stream a durable run to this connection from position ``after`` (see
        :meth:`PluginContext.attach_run <a2e_host.plugin.PluginContext.attach_run>`)."""
        self._conn.attach_run(run, after)

    def detach_run(self, run: Run) -> bool:
        """Stop streaming ``run`` here without cancelling it; False when it was not
        attached here."""
        return self._conn.detach_run(run)

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any, name: str = "") -> None:
        """Run ``fn(*args)`` in the background as an unlisted run attached to this
        connection; an exception it raises is sent as an ``error`` with this message's
        id as ``req_id``."""
        self._conn.start_run(_without_run, (fn, args), name=name, req_id=self._req_id,
                             capability=self._capability, listed=False)


async def _without_run(
    run: Run, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...]
) -> None:
    await fn(*args)
