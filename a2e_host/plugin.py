"""The plugin API: how a capability plugs into the host.

Layer: core contract (no anyio imports). First-party plugins (``a2e_chains``) use exactly
this API and register through the entry-point group ``a2e_host.plugins``, as a third
party would::

    [project.entry-points."a2e_host.plugins"]
    chains = "a2e_chains:ChainPlugin"

The host instantiates each plugin class with the :class:`~a2e_host.config.HostConfig`,
orders them by ``priority`` (lower first), decodes every type a plugin declares in
``message_types`` with the core messages' decoder (so a plugin's schema errors name
``$.field`` paths as core ones do), routes each message whose ``type`` matches the
plugin's ``namespace`` (``chain/*``) to :meth:`Plugin.handle`, and lists the plugin's
capability in ``handshake/resp.accepted_caps`` when the agent asks for it. The *gates* a
plugin names in :meth:`Plugin.gates` (PROTOCOL.md §8) are granted with its capability
and published in its metadata as ``"gates"``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Protocol

from .config import HostConfig
from .exceptions import UnknownType
from .limits import SessionLimits
from .messages import Message
from .store import RunStore

__all__ = [
    "HostRuns", "Plugin", "PluginContext", "Outbox", "SessionInfo", "RunHandle", "RunsView",
]


class Outbox(Protocol):
    """The outgoing side of one connection. Frames leave in the order they were put.

    ``send_nowait`` never blocks and never drops; producers that can produce without
    bound (chains) call ``await wait_writable()`` at safe points so a slow reader applies
    backpressure (it returns at once while the queue is under its high-water mark).
    """

    def send_nowait(self, message: Message) -> None: ...

    async def wait_writable(self) -> None: ...


class SessionInfo(Protocol):
    """A handshaken session as plugins see it (PROTOCOL.md §2)."""

    @property
    def session_id(self) -> str: ...

    @property
    def agent_id(self) -> str: ...

    @property
    def granted(self) -> frozenset[str]: ...

    @property
    def limits(self) -> SessionLimits: ...

    @property
    def principal(self) -> str:
        """Who authenticated (:attr:`a2e_host.session.Session.principal`): the runs a
        session may attach to, cancel, list and get are its principal's."""
        ...


class RunHandle(Protocol):
    """A run of the host, as the plugin that started it sees it (implemented by
    :class:`a2e_host.runtime.runs.Run`).

    Attributes:
        req_id: the request it serves.
        sink: where its frames go; it stays with the run, whichever connection is
            attached (PROTOCOL.md §4: ``seq`` is the run's, not the connection's).
        cancel_requested: :meth:`cancel` was called.
    """

    @property
    def req_id(self) -> str: ...

    @property
    def sink(self) -> Outbox: ...

    @property
    def cancel_requested(self) -> bool: ...

    def cancel(self) -> None:
        """Ask the run to end early (e.g. ``chain/cancel``)."""
        ...

    def on_cancel(self, fn: Callable[[], None]) -> None:
        """What :meth:`cancel` does (called at once when a cancel came first)."""
        ...

    def release(self) -> None:
        """Leave the in-flight table before the run's last frame (it stops counting)."""
        ...

    @property
    def host_stopping(self) -> bool:
        """The host is stopping and cancels every run (no agent asked)."""
        ...


class RunsView(Protocol):
    """The listed runs of one session and capability (``ctx.runs``): request ids are
    per capability, so another capability's run with the same id is not seen here."""

    def get(self, req_id: str) -> RunHandle | None:
        """The run in flight for ``req_id`` of this capability, None when there is none."""
        ...

    def __len__(self) -> int:
        """Runs in flight (e.g. against ``max_parallel``)."""
        ...


class HostRuns(Protocol):
    """The host's runs as a plugin sees them when the host starts
    (:meth:`Plugin.host_started`): work it resumes belongs to no connection."""

    def start_detached(
        self,
        fn: Callable[..., Awaitable[Any]],
        *args: Any,
        req_id: str,
        capability: str,
        sink: Outbox,
        name: str = "",
    ) -> RunHandle:
        """Start ``fn(run, *args)`` as a run of the host attached to no connection, that
        runs on detached (``DetachPolicy.KEEP``) until it ends; its frames go through
        ``sink`` (a durable run's, which stores them), and a connection may attach to it
        later. Unlisted: it counts against no session's ``max_parallel``. An exception it
        raises is sent through ``sink`` as an ``error`` with ``req_id``.

        Raises:
            RuntimeError: the host is not running.
        """
        ...

    def start_service(
        self, fn: Callable[..., Awaitable[Any]], *args: Any, name: str = ""
    ) -> None:
        """Start ``fn(*args)`` as a background task of the host that serves no request
        (e.g. the connection to an MCP server, kept and restarted while the host runs):
        it belongs to no connection, sends nothing, and is cancelled (then awaited) when
        the host stops. It must catch its own failures: an exception is logged and ends
        only it.

        Raises:
            RuntimeError: the host is not running.
        """
        ...


class PluginContext(Protocol):
    """One connection's view given to a plugin for one message.

    Attributes:
        session: the session the message belongs to (already checked by the host).
        outbox: where replies go.
        log: structlog logger bound with ``conn_id``, ``session_id`` and ``req_id``.
        closing: true once ``shutdown`` (or a signal) asked the connection to stop taking
            work; plugins refuse new work then.
        runs: this session's runs in flight of this plugin's capability.
    """

    @property
    def session(self) -> SessionInfo: ...

    @property
    def outbox(self) -> Outbox: ...

    @property
    def log(self) -> Any: ...

    @property
    def closing(self) -> bool: ...

    @property
    def runs(self) -> RunsView: ...

    def start_run(
        self, fn: Callable[..., Awaitable[Any]], *args: Any, name: str = "",
        sink: Any = None,
    ) -> RunHandle:
        """Start ``fn(run, *args)`` as a run of the host for this message, listed under
        its id in :attr:`runs`, its sink attached to this connection: cancelled when the
        connection drops, awaited (within the grace period) when it closes in order. An
        exception it raises is sent as an ``error`` with this message's id.

        With ``sink`` (a :class:`a2e_host.runtime.runs.RunSink`, e.g. a durable run's
        that keeps its frames in a store) the run *outlives* its connection: a dropped
        connection only detaches it (PROTOCOL.md §5 Durable runs).

        Raises:
            ValueError: a run of this capability is already in flight for this
                message's id (``runs.get`` finds it).
        """
        ...

    def attach_run(self, run: Any, *, after: int | None = None) -> None:
        """Stream a durable run (one started with a ``sink``, from any connection) to
        this connection: its frames after position ``after``, then the live ones. The
        connection it was attached to, if any, stops receiving them.

        Raises:
            RuntimeError: the run is not durable and attached elsewhere.
            ValueError: the sink does not keep the frames after ``after``.
        """
        ...

    def detach_run(self, run: Any) -> bool:
        """Stop streaming ``run`` to this connection without cancelling it.

        Returns:
            False when it was not attached to this connection.
        """
        ...

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any, name: str = "") -> None:
        """Run ``fn(*args)`` in the background as an unlisted run of the host, attached
        to this connection like :meth:`start_run`'s (replies go to :attr:`outbox`)."""
        ...


class Plugin:
    """Base class of capability plugins.

    Class attributes:
        capability: the A2E capability name served, e.g. ``"chains"``.
        namespace: message types routed here, ``"chain/*"`` style.
        priority: lower loads (and routes) first; ChainPlugin is 10 (seed).
        features: *extensions* spoken, published in the handshake metadata.
        message_types: the Structs of the messages this capability speaks, both
            directions (subclasses of :class:`~a2e_host.messages.Message` with a
            ``tag`` equal to their ``TYPE``, inside ``namespace``; ``FROM_HOST`` set on
            those only the host sends). The host decodes them with the core types in one
            decoder, and refuses to start (``ValueError``) when a declared type lies
            outside its plugin's namespace; a type outside every enabled plugin's list
            is ``unknown_type``.
        how_to_serve: how an operator makes the host serve this capability when
            :meth:`serves` says it does not (one clause, e.g. ``"start the host with
            --tools PACK"``); the ``capability_missing`` answer to a session asking a
            capability the host does not serve ends with it. Default ``""``: that answer
            only says the host does not serve it.
    """

    capability: ClassVar[str] = ""
    namespace: ClassVar[str] = ""
    priority: ClassVar[int] = 100
    features: ClassVar[tuple[str, ...]] = ()
    message_types: ClassVar[tuple[type[Message], ...]] = ()
    how_to_serve: ClassVar[str] = ""

    store: RunStore | None = None
    """The host's run store (:mod:`a2e_host.store`) while the host runs with one
    (``HostConfig.store``): set by the host before it serves, None again once it closed
    the store at stop; None on a host without a store (durable runs are refused)."""

    def __init__(self, config: HostConfig) -> None:
        self.config = config

    def handles(self, message_type: str) -> bool:
        """Whether ``message_type`` is in this plugin's namespace."""
        ns = self.namespace
        if ns.endswith("*"):
            return message_type.startswith(ns[:-1])
        return message_type == ns

    def serves(self) -> bool:
        """Whether this plugin serves its capability under its configuration (default
        True). One that returns False (``tools`` on a host that enables no tool) is
        loaded and its message types decode, but its capability is never granted: its
        messages get ``capability_missing``."""
        return True

    def gates(self) -> tuple[str, ...]:
        """The gates this plugin owns under its configuration (PROTOCOL.md §8): names an
        agent lists in ``agent_caps`` to unlock parts of this capability (``chains``:
        the node kinds ``skill``, and ``proc`` when an executable is allowed). They are
        granted only with this capability, never as capabilities of their own, and the
        host publishes the session's in this capability's metadata as ``"gates"`` with
        the feature ``handshake/gates``. Default: none."""
        return ()

    def metadata(self, session: SessionInfo) -> dict[str, Any]:
        """The ``accepted_caps[].metadata`` for this capability and session."""
        return {
            "namespace": self.namespace,
            "priority": self.priority,
            "features": list(self.features),
        }

    async def handle(self, message: Message, ctx: PluginContext) -> None:
        """Handle one message of this namespace. Must not block the reader for long:
        long work goes to ``ctx.start_run`` / ``ctx.start_soon``. Exceptions become wire
        ``error``s (the host's single mapping place)."""
        raise UnknownType(f"plugin {self.capability!r} does not handle {message.TYPE!r}")

    async def host_started(self, runs: HostRuns) -> None:
        """The host is running (its run registry is open, its run store, if any, in
        :attr:`store`) and has not served a connection yet: start what the plugin resumes,
        e.g. the durable runs a previous process left unfinished (PROTOCOL.md §5 Resume),
        with :meth:`HostRuns.start_detached`. Called once per host start; keep it short
        (long work goes into the runs it starts). An exception is logged and the host
        serves on. Default: nothing."""
        return None

    async def session_closing(self, session: SessionInfo) -> None:
        """The session stopped taking work in order (``shutdown``, end of input, the host
        stopping) and its runs are now given their grace period: a plugin whose runs wait
        on the agent (a process reading its stdin) winds them down. Not called when the
        peer vanished (its runs are cancelled at once then). Given at most the
        connection's cancel grace (5 s). Default: nothing."""
        return None

    async def session_closed(self, session: SessionInfo) -> None:
        """The session's connection is gone: forget what the plugin keeps per session
        (default: nothing). Its runs were detached, so cancelled, and awaited for at most
        the connection's cancel grace (5 s): a run ignoring its cancel longer (a worker
        thread) may still be ending, so it must not need that state. Called once per
        session, given at most that grace too."""
        return None

    async def aclose(self) -> None:
        """The host is stopping: release resources (default: nothing)."""
        return None
