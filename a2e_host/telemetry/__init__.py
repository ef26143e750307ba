"""Observability: OpenTelemetry traces, metrics and the host's HTTP health endpoints.

Layer: support (no anyio, no sockets). Source: PROTOCOL.md §5 Trace context; README
"Observability".

- :mod:`.tracing` — the process's tracer: off (no span is ever made) unless an exporter
  is configured; W3C trace context in and out; the one helper that puts run data on a
  span (:func:`~a2e_host.telemetry.tracing.set_run_attributes`).
- :mod:`.chain_spans` — the chain engine's hooks: a span per chain request, per node,
  per sampled map item.
- :mod:`.metrics` — plain counters the engine and the runtime bump, and their Prometheus
  text exposition; mirrored to the OpenTelemetry metrics API when an exporter is on.
- :mod:`.endpoints` — ``/healthz``, ``/readyz`` and ``/metrics``: the route table the host
  hands the WebSocket transport.
- :mod:`.setup` — all of it configured from a :class:`~a2e_host.config.HostConfig`.

This package imports nothing of its own at import time: the runtime imports
:mod:`.metrics` alone, and the chain engine's hooks must not pull the runtime in.
"""
