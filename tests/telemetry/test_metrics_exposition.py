"""Issue 19, metrics: the Prometheus text the counters render to, the same counters as
OpenTelemetry instruments, and the readiness hook (README "Observability")."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from a2e_host.config import HostConfig
from a2e_host.runtime.host import Host
from a2e_host.telemetry import metrics
from a2e_host.telemetry.endpoints import HostEndpoints


@pytest.fixture
def counters() -> Iterator[None]:
    metrics.reset()
    yield
    metrics.reset()


def test_histogram_buckets_are_cumulative_and_labels_escaped(counters: None) -> None:
    metrics.node_finished("tool", 'odd"name\\', 0.003)
    metrics.node_finished("tool", 'odd"name\\', 0.003)
    metrics.node_finished("tool", 'odd"name\\', 2.0)
    text = metrics.render_prometheus(metrics.Gauges()).decode()
    labels = 'kind="tool",tool="odd\\"name\\\\"'
    lines = [line for line in text.splitlines() if line.startswith("a2e_node_duration")]
    assert lines[:3] == [
        f'a2e_node_duration_seconds_bucket{{{labels},le="0.001"}} 0',
        f'a2e_node_duration_seconds_bucket{{{labels},le="0.005"}} 2',
        f'a2e_node_duration_seconds_bucket{{{labels},le="0.01"}} 2',
    ]
    assert f'a2e_node_duration_seconds_bucket{{{labels},le="2.5"}} 3' in lines
    assert f'a2e_node_duration_seconds_bucket{{{labels},le="+Inf"}} 3' in lines
    assert f"a2e_node_duration_seconds_sum{{{labels}}} 2.006" in lines
    assert lines[-1] == f"a2e_node_duration_seconds_count{{{labels}}} 3"


def test_the_counters_are_opentelemetry_instruments_when_exported(counters: None) -> None:
    metrics.chain_started()
    metrics.chain_started()
    metrics.chain_finished("ok", 4)
    metrics.refused("max_nodes", "session")
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics.register_instruments(provider.get_meter("test"),
                                 lambda: metrics.Gauges(sessions=3, connections=4))
    data = reader.get_metrics_data()
    assert data is not None
    points = {
        (m.name, tuple(sorted((p.attributes or {}).items()))): p.value
        for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
        for p in m.data.data_points
    }
    provider.shutdown()
    assert points[("a2e.chains.started", ())] == 2
    assert points[("a2e.chains.in_flight", ())] == 1
    assert points[("a2e.chains.finished", (("outcome", "ok"),))] == 1
    assert points[("a2e.chain.events", ())] == 4
    assert points[("a2e.refusals", (("ceiling", "max_nodes"), ("scope", "session")))] == 1
    assert points[("a2e.sessions.open", ())] == 3
    assert points[("a2e.connections.open", ())] == 4


def test_a_readiness_check_that_names_a_reason_makes_readyz_503() -> None:
    endpoints = HostEndpoints(Host(HostConfig(tools=("conformance",))))
    assert endpoints.readyz() == (200, "text/plain; charset=utf-8", b"ready\n")
    endpoints.readiness_checks.append(lambda: "the run store is not reachable")
    assert endpoints.readyz() == (
        503, "text/plain; charset=utf-8", b"not ready: the run store is not reachable\n")
    assert endpoints.healthz()[0] == 200
