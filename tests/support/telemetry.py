"""Spans recorded in-process: the host's tracer over OpenTelemetry's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from a2e_host.telemetry import tracing

__all__ = ["recorded_spans", "span_tree"]


@contextmanager
def recorded_spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on for the block, every span kept in memory; off again after it."""
    exporter = InMemorySpanExporter()
    tracing.enable(SimpleSpanProcessor(exporter))
    try:
        yield exporter
    finally:
        tracing.disable()


def span_tree(spans: Any) -> list[tuple[str, str, str]]:
    """``(span name, a2e.node_id or "", parent's a2e.node_id or its span name)`` per span,
    sorted; a root's parent is ``"-"``, a parent outside ``spans`` ``"<remote>"``."""
    by_id = {s.context.span_id: s for s in spans}
    rows = []
    for s in spans:
        if s.parent is None:
            parent = "-"
        elif s.parent.span_id in by_id:
            p = by_id[s.parent.span_id]
            parent = str(p.attributes.get("a2e.node_id", p.name))
        else:
            parent = "<remote>"
        rows.append((s.name, str(s.attributes.get("a2e.node_id", "")), parent))
    return sorted(rows)
