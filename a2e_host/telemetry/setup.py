"""Telemetry configured from a :class:`~a2e_host.config.HostConfig` (README
"Observability").

Layer: command support (called by ``a2e-host serve`` and ``stdio`` before the host
starts). Nothing is exported unless ``otel_exporter`` says where: ``console`` writes
spans as JSON lines on stderr (stdout may be the protocol's), ``otlp`` sends spans and
metrics over OTLP/HTTP to the endpoint the standard ``OTEL_EXPORTER_OTLP_*`` variables
name (default ``http://localhost:4318``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from ..config import HostConfig
from . import metrics, tracing

__all__ = ["configure_telemetry"]


def configure_telemetry(config: HostConfig, *, serving_metrics: bool = False,
                        gauges: Callable[[], metrics.Gauges] | None = None
                        ) -> Callable[[], None]:
    """Turn on what ``config`` asks for.

    Args:
        config: ``otel_exporter`` chooses the exporter.
        serving_metrics: a ``/metrics`` endpoint will be served: node durations are
            measured (:data:`~a2e_host.telemetry.metrics.NODE_TIMING`).
        gauges: reads the host's gauges, for the OTLP metrics; None: no gauges exported.

    Returns:
        A function that flushes and stops the exporters (call it once, at exit).

    Raises:
        ValueError: ``otel_exporter`` is ``otlp`` and ``a2e-host[otel]`` is not installed;
            the message says what to install.
    """
    metrics.NODE_TIMING = serving_metrics or config.otel_exporter == "otlp"
    exporter = config.otel_exporter
    if exporter == "none":
        return _nothing
    try:
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        raise ValueError(_missing(exporter)) from None
    if exporter == "console":
        tracing.enable(BatchSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
        return tracing.disable
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    except ImportError:
        raise ValueError(_missing(exporter)) from None
    tracing.enable(BatchSpanProcessor(OTLPSpanExporter()))
    provider = MeterProvider(metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())])
    metrics.register_instruments(provider.get_meter(tracing.SCOPE),
                                 gauges or (lambda: metrics.Gauges()))

    def stop() -> None:
        tracing.disable()
        provider.shutdown()

    return stop


def _nothing() -> None:
    return None


def _missing(exporter: str) -> str:
    return (f"otel_exporter {exporter!r} needs the OpenTelemetry SDK and OTLP exporter; "
            "install them with: pip install 'a2e-host[otel]'")
