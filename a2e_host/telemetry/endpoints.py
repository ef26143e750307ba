"""``/healthz``, ``/readyz`` and ``/metrics``: the HTTP routes a host hands its WebSocket
server (README "Observability").

Layer: runtime support (no anyio). The transport carries bytes: it matches a ``GET``
request's path against the table :meth:`HostEndpoints.routes` builds and sends what the
route returns; everything a route says is made here, above the transport.

- ``/healthz``: 200 ``ok`` while the process serves at all (liveness).
- ``/readyz``: 200 ``ready`` while the host takes new work; 503 once a graceful shutdown
  began (SIGINT/SIGTERM, then ``shutdown_grace``) or while any readiness check says no
  (:attr:`HostEndpoints.readiness_checks`: e.g. a run store that is not reachable).
- ``/metrics``: every metric of :mod:`~a2e_host.telemetry.metrics` in the Prometheus text
  format. A text over :data:`LARGE_RENDER` bytes (many label sets: up to ~15 ms to make
  on a loaded 2-core machine) is served again for :data:`RENDER_INTERVAL`, so a flood of
  unauthenticated scrapes cannot keep the event loop busy rendering.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..logs import dropped_log_lines
from ..session import SessionState
from . import metrics

if TYPE_CHECKING:
    from ..runtime.host import Host

__all__ = ["HttpAnswer", "HostEndpoints", "PROMETHEUS_CONTENT_TYPE", "LARGE_RENDER",
           "RENDER_INTERVAL", "ReadinessCheck"]

HttpAnswer = tuple[int, str, bytes]
"""A route's answer: ``(HTTP status, Content-Type, body)``."""

ReadinessCheck = Callable[[], "str | None"]
"""Says why the host is not ready (one sentence), or None when it is."""

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_TEXT = "text/plain; charset=utf-8"

LARGE_RENDER = 64 * 1024
"""Bytes: a ``/metrics`` text larger than this is reused for a while (a host with a few
dozen label sets stays below it and is rendered at every scrape)."""

RENDER_INTERVAL = 1.0
"""Float seconds a large render is served again (scrapers poll every 10 s or more)."""


class HostEndpoints:
    """The health and metrics routes of one host.

    Args:
        host: the host whose state the routes report.
        clock: monotonic float seconds (tests pass their own).

    Attributes:
        readiness_checks: consulted by ``/readyz`` in order (after the shutdown check);
            the first that names a reason makes it 503 with that reason. Empty by
            default: a component that readiness should depend on appends its check.
    """

    def __init__(self, host: Host, clock: Callable[[], float] = time.monotonic) -> None:
        self.host = host
        self.readiness_checks: list[ReadinessCheck] = []
        self._clock = clock
        self._body = b""
        self._rendered_at = -math.inf

    def routes(self) -> dict[str, Callable[[], HttpAnswer]]:
        """Path → route, for :func:`~a2e_host.transports.websocket.serve_websocket`."""
        return {"/healthz": self.healthz, "/readyz": self.readyz, "/metrics": self.metrics}

    def healthz(self) -> HttpAnswer:
        """200 ``ok``: the process is alive and its event loop answers."""
        return 200, _TEXT, b"ok\n"

    def readyz(self) -> HttpAnswer:
        """200 ``ready`` while new work is taken; 503 with the reason otherwise."""
        if self.host.shutting_down:
            return 503, _TEXT, b"not ready: the host is shutting down\n"
        for check in self.readiness_checks:
            reason = check()
            if reason:
                return 503, _TEXT, f"not ready: {reason}\n".encode()
        return 200, _TEXT, b"ready\n"

    def gauges(self) -> metrics.Gauges:
        """The host's current sessions, connections and dropped log lines."""
        connections = list(self.host.connections)
        sessions = sum(1 for c in connections if c.sessions.state is SessionState.OPEN)
        return metrics.Gauges(sessions=sessions, connections=len(connections),
                              log_lines_dropped=dropped_log_lines())

    def metrics(self) -> HttpAnswer:
        """200 with every metric in the Prometheus text format (a large text is reused
        for :data:`RENDER_INTERVAL` seconds)."""
        now = self._clock()
        if len(self._body) <= LARGE_RENDER or now - self._rendered_at >= RENDER_INTERVAL:
            self._body = metrics.render_prometheus(self.gauges())
            self._rendered_at = now
        return 200, PROMETHEUS_CONTENT_TYPE, self._body
