"""What a connection needs of its host, and nothing more: the :class:`Router`.

Layer: runtime. A connection (:mod:`a2e_host.runtime.connection`) is given a Router, not
the host: the plugins to route to, the capabilities and gates it may grant with their
metadata functions, the one codec, the one exception-to-wire mapping
(:func:`~a2e_host.errors.error_message_of`), the configuration, the uptime clock, the
auth throttle shared by every connection, the host's run registry, and the
``session_closed`` fan-out to plugins.
The host (:mod:`a2e_host.runtime.host`) builds it once; nothing in it changes after
that, so a connection cannot reach back up into the host.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from ..admission import AuthThrottle
from ..codec import MessageCodec
from ..config import HostConfig
from ..errors import error_message_of
from ..messages import ErrorMessage
from ..plugin import Plugin, SessionInfo
from ..session import MetadataFn
from .runs import RunRegistry

__all__ = ["Router", "ErrorMapping"]

ErrorMapping = Callable[..., ErrorMessage]
"""``(exc, *, req_id, log, message_type="", capability_name="") -> ErrorMessage``: the
signature of :func:`~a2e_host.errors.error_message_of`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Router:
    """A connection's immutable view of its host.

    Attributes:
        config: the host configuration.
        codec: decodes the core messages and every plugin's (PROTOCOL.md §1).
        plugins: the plugins, by ``priority`` (lower first).
        served: capability name → its ``handshake/resp`` metadata function (None: empty
            metadata), in priority order (PROTOCOL.md §2).
        gates: gate name → the capability that owns it (PROTOCOL.md §8).
        auth_throttle: spaces out answers to failed authentications, host-wide.
        runs: the host's runs (a connection starts, attaches and detaches them).
        log: the host's structlog logger.
        started: ``time.monotonic()`` when the host started.
        error_message: the exception → wire ``error`` mapping.
        how_to_serve: capability name → how to make the host serve it
            (:attr:`Plugin.how_to_serve`), for every loaded plugin that says.
    """

    config: HostConfig
    codec: MessageCodec
    plugins: tuple[Plugin, ...]
    served: Mapping[str, MetadataFn | None]
    gates: Mapping[str, str]
    auth_throttle: AuthThrottle
    runs: RunRegistry
    log: Any
    how_to_serve: Mapping[str, str] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    error_message: ErrorMapping = error_message_of

    @property
    def uptime_seconds(self) -> float:
        """Float seconds since the host started (``pong.uptime_seconds``)."""
        return time.monotonic() - self.started

    def plugin_for(self, message_type: str) -> Plugin | None:
        """The first plugin, by priority, whose namespace holds ``message_type``."""
        for plugin in self.plugins:
            if plugin.handles(message_type):
                return plugin
        return None

    async def session_closed(
        self, session: SessionInfo, log: Any = None, *, grace: float = math.inf
    ) -> None:
        """Tell every plugin a session's connection is gone: each is given at most
        ``grace`` seconds, so one slow or failing plugin (logged) never keeps the
        others from being told."""
        await self._tell(session, "session_closed", log, grace)

    async def session_closing(
        self, session: SessionInfo, log: Any = None, *, grace: float = math.inf
    ) -> None:
        """Tell every plugin a session stopped taking work in order, as
        :meth:`session_closed` tells them it is gone."""
        await self._tell(session, "session_closing", log, grace)

    async def _tell(self, session: SessionInfo, hook: str, log: Any, grace: float) -> None:
        log = log or self.log
        for plugin in self.plugins:
            try:
                with anyio.move_on_after(grace) as scope:
                    await getattr(plugin, hook)(session)
            except Exception as exc:
                log.error(f"plugin failed in {hook}", plugin=plugin.capability,
                          exc_info=exc)
                continue
            if scope.cancelled_caught:
                log.warning(f"plugin did not finish {hook} in time",
                            plugin=plugin.capability, grace=grace)
