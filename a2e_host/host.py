"""The host: plugins, configuration, connections, and the one place exceptions become
wire ``error`` messages.

Layer: runtime. A :class:`Host` loads its plugins from the entry-point group
``a2e_host.plugins`` (first-party ``chains`` included, exactly as a third party
registers), orders them by ``priority``, and serves any number of connections, each
through :class:`~a2e_host.runtime.connection.HostConnection` whatever the transport.

Served capabilities (``handshake/resp.accepted_caps``, PROTOCOL.md §2): each loaded
plugin's ``capability``, and nothing else: a capability is granted only when a plugin
handles its messages. The node kinds ``skill`` and ``proc`` are *gates* of ``chains``
(PROTOCOL.md §8): an agent lists them in ``agent_caps`` to use those kinds, they are
granted with ``chains`` (``proc`` only when ``config.allow_proc`` is non-empty) and
published in the ``chains`` entry's metadata as ``"gates"``, never as capabilities.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from importlib.metadata import entry_points
from typing import Any

import anyio

from .admission import AuthThrottle
from .codec import MessageCodec
from .config import HostConfig
from .errors import error_message_of
from .logs import get_logger
from .messages import CORE_MESSAGE_TYPES, ErrorMessage
from .plugin import Plugin, SessionInfo
from .runtime.connection import HostConnection
from .session import MetadataFn, Session
from .transports import CloseCode, Transport

__all__ = ["Host", "load_plugins", "PLUGIN_GROUP", "NODE_KIND_GATES", "GATES_FEATURE"]

PLUGIN_GROUP = "a2e_host.plugins"
"""The entry-point group plugins register in (``name = "module:PluginClass"``)."""

NODE_KIND_GATES = ("proc", "skill")
"""Gates of ``chains``: names in ``agent_caps`` that unlock node kinds (PROTOCOL.md §8)."""

GATES_FEATURE = "handshake/gates"
"""The ``features`` entry saying the ``chains`` metadata carries ``"gates"``."""


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
        self.codec = MessageCodec(
            CORE_MESSAGE_TYPES + tuple(t for p in self.plugins for t in p.message_types)
        )
        self.started = time.monotonic()
        self.connections: set[HostConnection] = set()
        self._shutdown = anyio.Event()
        self._grace: float | None = None
        self.auth_throttle = AuthThrottle(config.auth_failure_delay)

    @property
    def uptime_seconds(self) -> float:
        """Float seconds since the host was created (``pong.uptime_seconds``)."""
        return time.monotonic() - self.started

    def plugin_for(self, message_type: str) -> Plugin | None:
        """The first plugin, by priority, whose namespace holds ``message_type``."""
        for plugin in self.plugins:
            if plugin.handles(message_type):
                return plugin
        return None

    def served_capabilities(self) -> Mapping[str, MetadataFn | None]:
        """Capability name → metadata function (None: empty metadata): one per plugin
        capability, in priority order. The ``chains`` metadata gains ``"gates"`` (the
        session's granted gates, sorted) and :data:`GATES_FEATURE` in ``features``."""
        served: dict[str, MetadataFn | None] = {}
        for plugin in self.plugins:
            if plugin.capability and plugin.capability not in served:
                served[plugin.capability] = plugin.metadata
        chains = served.get("chains")
        if chains is not None:
            served["chains"] = _with_gates(chains)
        return served

    def gates(self) -> Mapping[str, str]:
        """Gate name → the capability that owns it, as this host offers them: ``skill``
        always and ``proc`` when an executable is allowed, both owned by ``chains``."""
        if not any(p.capability == "chains" for p in self.plugins):
            return {}
        return {
            gate: "chains"
            for gate in NODE_KIND_GATES
            if gate != "proc" or self.config.allow_proc
        }

    def error_message(
        self,
        exc: BaseException,
        *,
        req_id: str,
        message_type: str = "",
        capability_name: str = "",
        log: Any = None,
    ) -> ErrorMessage:
        """:func:`~a2e_host.errors.error_message_of` with the host's logger by default."""
        return error_message_of(
            exc, req_id=req_id, log=log or self.log, message_type=message_type,
            capability_name=capability_name,
        )

    # ── connections ───────────────────────────────────────────────────────

    async def serve_connection(self, transport: Transport, *, conn_id: str = "") -> None:
        """Serve one connection until it ends. Never raises for a connection's own
        failure (it is logged); other connections are unaffected."""
        conn = HostConnection(self, transport, conn_id)
        self.connections.add(conn)
        try:
            if self._grace is not None:
                conn.request_stop(self._grace, code=CloseCode.GOING_AWAY, reason="host stopping")
            await conn.run()
        except Exception as exc:
            conn.log.error("connection failed", exc_info=exc)
        finally:
            self.connections.discard(conn)

    async def session_closed(self, session: SessionInfo, log: Any = None) -> None:
        """Tell every plugin a session's connection is gone (errors are logged)."""
        for plugin in self.plugins:
            try:
                await plugin.session_closed(session)
            except Exception as exc:
                (log or self.log).error("plugin failed in session_closed",
                                        plugin=plugin.capability, exc_info=exc)

    def shutdown(self, grace: float) -> None:
        """Stop: every connection stops taking work, finishes within ``grace`` seconds,
        cancels the rest and closes with 1001. Call again with a smaller grace (e.g. 0 on a
        second signal) to hurry it."""
        self._grace = grace if self._grace is None else min(self._grace, grace)
        self.log.info("host shutting down", grace=grace, connections=len(self.connections))
        for conn in list(self.connections):
            conn.request_stop(grace, code=CloseCode.GOING_AWAY, reason="host shutting down")
        self._shutdown.set()

    @property
    def shutting_down(self) -> bool:
        return self._shutdown.is_set()

    async def wait_shutdown(self) -> None:
        """Return once :meth:`shutdown` has been called."""
        await self._shutdown.wait()

    async def aclose(self) -> None:
        """Release every plugin's resources (errors are logged)."""
        for plugin in reversed(self.plugins):
            try:
                await plugin.aclose()
            except Exception as exc:
                self.log.error("plugin failed to close", plugin=plugin.capability, exc_info=exc)


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
