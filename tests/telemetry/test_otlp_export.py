"""Issue 19: ``otel_exporter = "otlp"`` sends the spans and the metrics over OTLP/HTTP to
the endpoint ``OTEL_EXPORTER_OTLP_ENDPOINT`` names (a real HTTP receiver on 127.0.0.1)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anyio
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from a2e_host.chains.messages import ChainNode, ChainRequest, ChainResponse
from a2e_host.config import HostConfig
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import open_memory_client
from a2e_host.telemetry import metrics, tracing
from a2e_host.telemetry.setup import configure_telemetry
from tests.support.memory import handshaken


class Collector(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.posts: list[tuple[str, bytes]] = []


class _Handler(BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:  # noqa: N802 - the http.server hook's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.posts.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT",
                       f"http://127.0.0.1:{server.server_address[1]}")
    metrics.reset()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        metrics.reset()
        metrics.NODE_TIMING = False


@pytest.mark.asyncio
async def test_otlp_sends_the_chains_spans_and_the_counters_to_the_configured_endpoint(
    collector: Collector,
) -> None:
    config = HostConfig(tools=("conformance",), otel_exporter="otlp")
    stop = configure_telemetry(config)
    try:
        assert (tracing.ENABLED, metrics.NODE_TIMING) == (True, True)
        with anyio.fail_after(20):
            async with open_memory_client(Host(config)) as client:
                await handshaken(client)
                client.send(ChainRequest(id="r", entry_node="a", nodes=[
                    ChainNode(node_id="a", kind="tool", name="echo", next_node="b"),
                    ChainNode(node_id="b", kind="tool", name="echo")]))
                while not isinstance(answer := await client.receive(), ChainResponse):
                    pass
        assert answer.success
    finally:
        await anyio.to_thread.run_sync(stop)  # flushes both exporters
    assert tracing.ENABLED is False
    traces = [ExportTraceServiceRequest.FromString(b) for p, b in collector.posts
              if p == "/v1/traces"]
    names = sorted(span.name for request in traces for rs in request.resource_spans
                   for ss in rs.scope_spans for span in ss.spans)
    assert names == ["a2e.chain", "a2e.node", "a2e.node"]
    exported = [ExportMetricsServiceRequest.FromString(b) for p, b in collector.posts
                if p == "/v1/metrics"]
    started = [point.as_int for request in exported for rm in request.resource_metrics
               for sm in rm.scope_metrics for metric in sm.metrics
               if metric.name == "a2e.chains.started" for point in metric.sum.data_points]
    assert started and started[-1] == 1
    seconds = {(dict((a.key, a.value.string_value) for a in point.attributes)["tool"],
                point.as_double) for request in exported for rm in request.resource_metrics
               for sm in rm.scope_metrics for metric in sm.metrics
               if metric.name == "a2e.node.duration" for point in metric.sum.data_points}
    assert seconds and {tool for tool, _ in seconds} == {"echo"}
    assert all(value > 0 for _, value in seconds)
