"""Issue 19: the exporter is chosen by configuration, and nothing is exported unless it is
configured (README "Observability")."""

from __future__ import annotations

import json

import anyio
import pytest

from a2e_host.config import HostConfig, load_config
from a2e_host.telemetry import metrics, tracing
from a2e_host.telemetry.setup import configure_telemetry
from tests.support.process import WAIT, open_host
from tests.support.stdio import STDIO, handshake

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_the_default_configuration_exports_nothing_and_makes_no_span() -> None:
    stop = configure_telemetry(HostConfig())
    try:
        assert (tracing.ENABLED, metrics.NODE_TIMING) == (False, False)
    finally:
        stop()


def test_otel_exporter_is_read_from_the_environment_and_checked() -> None:
    assert load_config(environ={"A2E_OTEL_EXPORTER": "console"}).otel_exporter == "console"
    with pytest.raises(ValueError, match="otel_exporter"):
        load_config(environ={"A2E_OTEL_EXPORTER": "zipkin"})
    assert load_config(environ={"A2E_HTTP_ENDPOINTS": "false"}).http_endpoints is False


@pytest.mark.asyncio
async def test_the_console_exporter_writes_the_chains_spans_to_stderr_never_stdout() -> None:
    host = await open_host(STDIO, A2E_OTEL_EXPORTER="console")
    async with anyio.create_task_group() as tg:
        tg.start_soon(host.collect_stderr)
        await handshake(host)
        await host.send({"type": "chain/req", "id": "r", "entry_node": "e",
                         "nodes": [{"node_id": "e", "kind": "tool", "name": "echo"}],
                         "trace_context": {"traceparent": TRACEPARENT}})
        while (message := await host.receive())["type"] != "chain/resp":
            pass
        assert message["success"] is True
        assert host.process.stdin is not None
        await host.process.stdin.aclose()
        rest = await host.read_rest()  # stdout: protocol lines only
        with anyio.fail_after(WAIT):
            assert await host.wait() == 0
    assert all(isinstance(json.loads(line), dict) and "type" in json.loads(line)
               for line in rest.splitlines())
    text = host.stderr.decode()
    assert '"name": "a2e.chain"' in text and '"name": "a2e.node"' in text
    assert '"trace_id": "0x4bf92f3577b34da6a3ce929d0e0e4736"' in text
    assert '"parent_id": "0x00f067aa0ba902b7"' in text
