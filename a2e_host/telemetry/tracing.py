"""The process's tracer, W3C trace context, and the one place run data becomes span
attributes.

Layer: support (plain code; no anyio). Source: PROTOCOL.md §5 Trace context.

Tracing is **off** unless :func:`enable` was called (``otel_exporter`` ``"console"`` or
``"otlp"``, or a test's in-memory exporter). While it is off, :data:`ENABLED` is False,
the chain engine's hooks choose the plain code path once per run and no span object is
ever made; nothing here is even imported from OpenTelemetry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import secrets as _secrets

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.trace import Span, Tracer

__all__ = [
    "ENABLED", "MAX_ATTRIBUTE_CHARS", "MAX_TRACEPARENT_CHARS", "MAX_TRACESTATE_CHARS",
    "SCOPE", "disable", "enable", "parent_context", "set_run_attributes", "trace_env", "tracer",
]

SCOPE = "a2e_host"
"""The instrumentation scope name of every span the host makes."""

MAX_TRACEPARENT_CHARS = 128
"""A longer ``traceparent`` is ignored (version 00 has 55 characters; later versions may
append fields)."""

MAX_TRACESTATE_CHARS = 512
"""A longer ``tracestate`` is dropped (W3C Trace Context: propagate at least 512)."""

MAX_ATTRIBUTE_CHARS = 1024
"""A longer string attribute or error status from a run (a tool's error message, say) is
cut to this many characters, ending in ``…``, so a span's size stays bounded whatever a
run produced."""

_TRACESTATE_MEMBER = re.compile(  # W3C Trace Context §3.3.1.3: key "=" value
    r"(?:[a-z][_0-9a-z*/-]{0,255}|[a-z0-9][_0-9a-z*/-]{0,240}@[a-z][_0-9a-z*/-]{0,13})"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")

ENABLED = False
"""Whether spans are made. Read by the chain engine once per run and per map (module
attribute: rebinding it takes effect for runs that start afterwards)."""

_tracer: Tracer | None = None
_provider: TracerProvider | None = None


def enable(processor: SpanProcessor) -> TracerProvider:
    """Turn tracing on: spans go to ``processor`` (e.g. a ``BatchSpanProcessor`` over an
    OTLP exporter, or a ``SimpleSpanProcessor`` over an ``InMemorySpanExporter`` in
    tests). The provider is the host's own, not OpenTelemetry's global one, so an
    embedding application's tracing is left alone.

    Returns:
        The provider (:func:`disable` shuts it down).

    Raises:
        ImportError: ``opentelemetry-sdk`` is not installed (``pip install a2e-host[otel]``).
    """
    global ENABLED, _tracer, _provider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    disable()
    provider = TracerProvider(resource=Resource.create({"service.name": "a2e-host"}))
    provider.add_span_processor(processor)
    _provider = provider
    _tracer = provider.get_tracer(SCOPE)
    ENABLED = True
    return provider


def disable() -> None:
    """Turn tracing off, flushing and shutting down the provider :func:`enable` made."""
    global ENABLED, _tracer, _provider
    ENABLED = False
    _tracer = None
    provider, _provider = _provider, None
    if provider is not None:
        provider.shutdown()


def tracer() -> Tracer:
    """The host's tracer.

    Raises:
        RuntimeError: tracing is off (callers check :data:`ENABLED` first).
    """
    if _tracer is None:
        raise RuntimeError("tracing is off: call telemetry.tracing.enable first")
    return _tracer


def parent_context(trace_context: Mapping[str, str] | None) -> Context | None:
    """The OpenTelemetry context of an agent's W3C trace context
    (``chain/req.trace_context``, PROTOCOL.md §5 Trace context), None when it carries no
    valid ``traceparent``: the chain's span then starts a trace of its own (W3C Trace
    Context §3.2: a receiver ignores an invalid header rather than failing the request).

    Args:
        trace_context: ``{"traceparent": ..., "tracestate": ...}``; missing keys or empty
            values mean absent. A ``traceparent`` over :data:`MAX_TRACEPARENT_CHARS` is
            invalid; a ``tracestate`` over :data:`MAX_TRACESTATE_CHARS`, or with a member
            not of the W3C form, is dropped (W3C Trace Context §3.3.1.5 lets a receiver
            discard it), so parsing stays bounded and nothing is logged.
    """
    traceparent = trace_context.get("traceparent", "") if trace_context else ""
    if not traceparent or len(traceparent) > MAX_TRACEPARENT_CHARS:
        return None
    from opentelemetry.trace import get_current_span
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {"traceparent": traceparent}
    tracestate = trace_context.get("tracestate", "") if trace_context else ""
    if tracestate and len(tracestate) <= MAX_TRACESTATE_CHARS and _valid_tracestate(tracestate):
        carrier["tracestate"] = tracestate
    ctx = TraceContextTextMapPropagator().extract(carrier)
    if not get_current_span(ctx).get_span_context().is_valid:
        return None
    return ctx


def _valid_tracestate(value: str) -> bool:
    """Whether every list member of ``value`` has the W3C form; an invalid one is dropped
    here, quietly (OpenTelemetry would log a warning quoting the agent's text each time)."""
    members = [m.strip(" \t") for m in value.split(",")]
    return all(not m or _TRACESTATE_MEMBER.fullmatch(m) for m in members)


def trace_env() -> dict[str, str]:
    """``TRACEPARENT`` (and ``TRACESTATE`` when there is one) of the current span, for a
    child process's environment; ``{}`` when tracing is off or no span is current."""
    if not ENABLED:
        return {}
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return {name.upper(): value for name, value in carrier.items()}


def set_run_attributes(span: Span, attributes: Mapping[str, Any], *,
                       error: str | None = None) -> None:
    """Put ``attributes`` (and, with ``error``, an error status) on ``span``: **every**
    attribute or status text taken from a run (ids, names, error codes and messages)
    goes through here, so what leaves the host in a span is filtered in one place.

    Args:
        span: a recording span.
        attributes: name → str, bool, int or float; None values are left out; a str
            over :data:`MAX_ATTRIBUTE_CHARS` is cut.
        error: the failure's message (cut like an attribute): the span's status becomes
            ERROR with it.
    """
    redactor = _secrets.active_redactor  # secret values out of spans (README "Secrets")
    if redactor is not None:
        attributes = {name: redactor.redact(value) if isinstance(value, str) else value
                      for name, value in attributes.items()}
        error = redactor.redact(error) if error is not None else None
    # redacted before cut, so a cut never leaves part of a secret behind
    span.set_attributes({name: _bounded(value) for name, value in attributes.items()
                         if value is not None})  # one call: the SDK locks once per call
    if error is not None:
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, _bounded(error)))


def _bounded(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_ATTRIBUTE_CHARS:
        return value[:MAX_ATTRIBUTE_CHARS - 1] + "…"
    return value
