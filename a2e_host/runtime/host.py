"""The host: plugins, configuration, and the connections it serves.

Layer: runtime. A :class:`Host` loads its plugins from the entry-point group
``a2e_host.plugins`` (first-party ``chains`` included, exactly as a third party
registers), orders them by ``priority``, builds the one
:class:`~a2e_host.runtime.router.Router` its connections get, and serves any number of
connections through :meth:`Host.serve_connection`, the handler every transport serves
(``serve_websocket``, ``serve_stdio``, ``open_memory_connection``), until
:meth:`Host.shutdown` sets :attr:`Host.shutdown_event`, the transports' stop signal.
Every entry point serves inside ``async with host.running()``: the host's
:class:`~a2e_host.runtime.runs.RunRegistry` owns the runs (chains) its connections
start, in a task group of the host's, not of the connection's.

Served capabilities (``handshake/resp.accepted_caps``, PROTOCOL.md §2): each loaded
plugin's ``capability``, and nothing else: a capability is granted only when a plugin
handles its messages. A plugin's *gates* (:meth:`Plugin.gates
<a2e_host.plugin.Plugin.gates>`, PROTOCOL.md §8) are granted with its capability and
published in its metadata as ``"gates"`` with the feature :data:`GATES_FEATURE`, never as
capabilities. The host itself names no capability.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import Any

import anyio

from ..admission import AuthThrottle
from ..codec import MessageCodec
from ..config import HostConfig
from ..errors import error_message_of
from ..logs import get_logger
from ..messages import CORE_MESSAGE_TYPES, Message
from ..plugin import Outbox, Plugin, RunHandle
from ..session import MetadataFn, Session
from ..store import Durability, RunStore, open_store
from ..transports import CloseCode, Transport
from .connection import HostConnection
from .retention import prune_periodically
from .router import Router
from .runs import DetachPolicy, RunRegistry, RunSink

__all__ = ["Host", "load_plugins", "PLUGIN_GROUP", "GATES_FEATURE"]

PLUGIN_GROUP = "a2e_host.plugins"
"""The entry-point group plugins register in (``name = "module:PluginClass"``)."""

GATES_FEATURE = "handshake/gates"
"""The ``features`` entry saying a capability's metadata carries ``"gates"``."""


def load_plugins(config: HostConfig, *, log: Any = None) -> list[Plugin]:
    """Instantiate every plugin registered in :data:`PLUGIN_GROUP`, by ``priority``.

    A plugin that fails to import or construct is logged (with its traceback) and left
    out; the host still starts, and a handshake asking for its capability is refused
    with ``no_caps``. A plugin that refuses the *configuration* (a ``ValueError``: an
    unknown tool pack, an enabled tool pack that cannot be imported
    (:class:`~a2e_host.tools.ToolPackError`), a missing skills directory, an executable
    not on PATH) stops the start instead: serving without it would only move the
    operator's mistake to every client.

    Args:
        config: passed to each plugin's constructor.
        log: a structlog logger; the host's when None.

    Raises:
        ValueError: a plugin refused the configuration; the message names the plugin.
    """
    log = log or get_logger()
    plugins: list[Plugin] = []
    for ep in entry_points(group=PLUGIN_GROUP):
        try:
            cls = ep.load()
            plugins.append(cls(config))
        except ValueError as exc:
            raise ValueError(f"plugin {ep.name!r}: {exc}") from None
        except Exception as exc:
            log.error("plugin failed to load; its capability is not served",
                      entry_point=f"{ep.name} = {ep.value}", exc_info=exc)
    return sorted(plugins, key=lambda p: p.priority)


class Host:
    """An A2E host: serves connections with its plugins.

    Args:
        config: the configuration (see :func:`~a2e_host.config.load_config`).
        plugins: plugin instances or classes (instantiated with ``config``) to use
            instead of the entry points, e.g. in tests; None loads the entry points.

    Raises:
        ValueError: a plugin refused the configuration (see :func:`load_plugins`), or
            declares a message type outside its namespace, or one the codec refuses
            (see :class:`~a2e_host.codec.MessageCodec`).

    Attributes:
        shutdown_event: set by :meth:`shutdown`; the stop signal transports serve until.
        connections: the connections being served.
        runs: every run of the host (:mod:`a2e_host.runtime.runs`).
        store: the run store while the host runs with one (``config.store``), else None.
    """

    def __init__(
        self, config: HostConfig, plugins: Iterable[Plugin | type[Plugin]] | None = None
    ) -> None:
        self.config = config
        self.log = get_logger()
        if plugins is None:
            loaded = load_plugins(config, log=self.log)
        else:
            loaded = [p(config) if isinstance(p, type) else p for p in plugins]
        self.plugins: list[Plugin] = sorted(loaded, key=lambda p: p.priority)
        self.codec = MessageCodec(CORE_MESSAGE_TYPES + _declared_types(self.plugins))
        self.runs = RunRegistry(self.log, error_message_of)
        self.router = Router(
            config=config,
            codec=self.codec,
            plugins=tuple(self.plugins),
            served=MappingProxyType(dict(self.served_capabilities())),
            gates=MappingProxyType(dict(self.gates())),
            how_to_serve=MappingProxyType({p.capability: p.how_to_serve
                                           for p in reversed(self.plugins)
                                           if p.capability and p.how_to_serve}),
            auth_throttle=AuthThrottle(config.auth_failure_delay),
            runs=self.runs,
            log=self.log,
            error_message=error_message_of,
        )
        self.connections: set[HostConnection] = set()
        self.store: RunStore | None = None
        self._store_lock = anyio.Lock()
        self.shutdown_event = anyio.Event()
        self._grace: float | None = None

    @property
    def uptime_seconds(self) -> float:
        """Float seconds since the host was created (``pong.uptime_seconds``)."""
        return self.router.uptime_seconds

    def plugin_for(self, message_type: str) -> Plugin | None:
        """The first plugin, by priority, whose namespace holds ``message_type``."""
        return self.router.plugin_for(message_type)

    def served_capabilities(self) -> Mapping[str, MetadataFn | None]:
        """Capability name → metadata function (None: empty metadata): one per plugin
        capability, in priority order. A plugin with gates gets its metadata's
        ``"gates"`` (the session's granted gates, sorted) and :data:`GATES_FEATURE` in
        its ``features``."""
        served: dict[str, MetadataFn | None] = {}
        for plugin in self.plugins:
            if plugin.capability and plugin.capability not in served and plugin.serves():
                served[plugin.capability] = (
                    _with_gates(plugin.metadata) if plugin.gates() else plugin.metadata
                )
        return served

    def gates(self) -> Mapping[str, str]:
        """Gate name → the capability that owns it, as this host offers them: each
        serving plugin's :meth:`~a2e_host.plugin.Plugin.gates` (the first plugin by
        priority wins a name two of them claim)."""
        owners: dict[str, str] = {}
        for plugin in self.plugins:
            if plugin.capability and plugin.serves():
                for gate in plugin.gates():
                    owners.setdefault(gate, plugin.capability)
        return owners

    # ── connections ───────────────────────────────────────────────────────

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Host]:
        """Run the host inside the block: its run registry's task group is open.

        Every entry point enters it before serving (the ``serve`` and ``stdio`` commands,
        :func:`~a2e_host.runtime.memory.open_memory_client`). Re-entrant: an entry while
        the host runs joins it, and the block that started it waits for those that
        joined to leave; on leaving, runs still alive are cancelled and awaited. The
        outermost entry calls every plugin's :meth:`~a2e_host.plugin.Plugin.host_started`
        once the registry (and the store) is open, before anything is served.

        With ``config.store`` the outermost entry opens the run store first (every
        plugin's :attr:`~a2e_host.plugin.Plugin.store` is set), prunes it every
        ``store_prune_interval`` seconds while the host runs, and closes it last, after
        the runs ended, committing what they queued.

        Raises:
            StoreError: the store cannot be opened (locked by another host, written by a
                newer version, not a run store); the message says which.
        """
        async with self._store_lock:  # a concurrent first entry joins once it is open
            opens = self.store is None and bool(self.config.store)
            if opens:
                self.store = await open_store(
                    self.config.store, durability=_durability(self.config),
                    commit_delay=self.config.store_commit_delay,
                    owner=self.config.replica_id, lease=self.config.store_lease)
        if not opens:
            outermost = not self.runs.is_open
            async with self.runs.open():
                if outermost:
                    await self._host_started()
                yield self
            return
        store = self.store
        assert store is not None
        for plugin in self.plugins:
            plugin.store = store
        try:
            async with self.runs.open(), anyio.create_task_group() as tg:
                tg.start_soon(prune_periodically, store, self.config.store_prune_interval,
                              self.log)
                await self._host_started()
                try:
                    yield self
                finally:
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await store.aclose()
                finally:
                    self.store = None
                    for plugin in self.plugins:
                        plugin.store = None

    async def _host_started(self) -> None:
        """Tell every plugin the host runs (:meth:`Plugin.host_started
        <a2e_host.plugin.Plugin.host_started>`), from the outermost :meth:`running`
        only; a plugin's failure is logged."""
        runs = _HostRuns(self.runs)
        for plugin in self.plugins:
            try:
                await plugin.host_started(runs)
            except Exception as exc:
                self.log.error("plugin failed at host start", plugin=plugin.capability,
                               exc_info=exc)

    async def serve_connection(self, transport: Transport, *, conn_id: str = "") -> None:
        """Serve one connection until it ends: the handler transports serve
        (:data:`~a2e_host.transports.ConnectionHandler`). Never raises for a
        connection's own failure (it is logged); other connections are unaffected.

        Args:
            transport: the connection's frames.
            conn_id: a name for logs; ``c<n>`` when empty.

        Raises:
            RuntimeError: the host is not running (see :meth:`running`).
        """
        if not self.runs.is_open:
            raise RuntimeError(
                "the host is not running: serve connections inside "
                "'async with host.running()'"
            )
        conn = HostConnection(self.router, transport, conn_id)
        self.connections.add(conn)
        try:
            if self._grace is not None:
                conn.request_stop(self._grace, code=CloseCode.GOING_AWAY, reason="host stopping")
            await conn.run()
        except Exception as exc:
            conn.log.error("connection failed", exc_info=exc)
        finally:
            self.connections.discard(conn)

    def shutdown(self, grace: float) -> None:
        """Stop: every connection stops taking work, finishes within ``grace`` seconds,
        cancels the rest and closes with 1001; servers stop accepting. Call again with a
        smaller grace (e.g. 0 on a second signal) to hurry it."""
        self._grace = grace if self._grace is None else min(self._grace, grace)
        self.log.info("host shutting down", grace=grace, connections=len(self.connections))
        for conn in list(self.connections):
            conn.request_stop(grace, code=CloseCode.GOING_AWAY, reason="host shutting down")
        self.shutdown_event.set()

    @property
    def shutting_down(self) -> bool:
        return self.shutdown_event.is_set()

    async def aclose(self) -> None:
        """Release every plugin's resources (errors are logged)."""
        for plugin in reversed(self.plugins):
            try:
                await plugin.aclose()
            except Exception as exc:
                self.log.error("plugin failed to close", plugin=plugin.capability, exc_info=exc)


class _HostRuns:
    """The host's runs a plugin starts at host start (implements
    :class:`~a2e_host.plugin.HostRuns`)."""

    __slots__ = ("_runs",)

    def __init__(self, runs: RunRegistry) -> None:
        self._runs = runs

    def start_detached(
        self,
        fn: Callable[..., Awaitable[Any]],
        *args: Any,
        req_id: str,
        capability: str,
        sink: Outbox,
        name: str = "",
    ) -> RunHandle:
        if not isinstance(sink, RunSink):
            raise TypeError("a detached run needs a RunSink (e.g. a durable run's sink)")
        return self._runs.start(fn, *args, req_id=req_id, capability=capability, name=name,
                                policy=DetachPolicy.KEEP, sink=sink)

    def start_service(
        self, fn: Callable[..., Awaitable[Any]], *args: Any, name: str = ""
    ) -> None:
        log = self._runs.log

        async def service(run: RunHandle) -> None:
            try:
                await fn(*args)
            except Exception as exc:
                log.error("a plugin's background task failed", task=name, exc_info=exc)

        # an unlisted run attached to nothing: cancelled with the host's other runs
        self._runs.start(service, name=name, policy=DetachPolicy.KEEP)


def _durability(config: HostConfig) -> Durability:
    return "full" if config.durability == "full" else "normal"


def _declared_types(plugins: Iterable[Plugin]) -> tuple[type[Message], ...]:
    """Every plugin's ``message_types``, in priority order.

    Raises:
        ValueError: a plugin declares a type outside its own ``namespace``: the host
            would decode it, list it as known, and then route it to no plugin (or to
            another one); the message names the plugin and the type.
    """
    declared: list[type[Message]] = []
    for plugin in plugins:
        for cls in plugin.message_types:
            if not plugin.handles(cls.TYPE):
                raise ValueError(
                    f"plugin {plugin.capability!r} ({type(plugin).__name__}) declares the "
                    f"message type {cls.TYPE!r} ({cls.__name__}), outside its namespace "
                    f"{plugin.namespace!r}; rename the type into the namespace or widen "
                    "the namespace"
                )
            declared.append(cls)
    return tuple(declared)


def _with_gates(metadata: MetadataFn) -> MetadataFn:
    """``metadata`` plus the session's granted gates (PROTOCOL.md §2, §8)."""

    def with_gates(session: Session) -> dict[str, Any]:
        meta = dict(metadata(session))
        features = list(meta.get("features") or [])
        if GATES_FEATURE not in features:
            features.append(GATES_FEATURE)
        meta["features"] = features
        meta["gates"] = sorted(session.gates)
        return meta

    return with_gates
