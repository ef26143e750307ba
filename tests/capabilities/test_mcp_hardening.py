"""MCP tool sources, hardening: an isError text is redacted before it is cut, registered
server names cannot shadow tool packs or configured servers, settings errors name keys
and never values, and progress numbers from a server are checked before use."""

from __future__ import annotations

import math

import pytest
from a2e_mcp.link import progress_data
from a2e_mcp.tools import MAX_ERROR_CHARS, output_of
from mcp.types import CallToolResult, TextContent

from a2e_host.exceptions import NodeError
from a2e_host.secrets import register, unregister


def test_an_is_error_text_is_redacted_before_it_is_cut_inside_a_secret() -> None:
    secret = "sk-live-0123456789abcdef"
    token = register({"api_key": secret})
    try:
        prefix = "Error executing tool fail: "
        # the agent pads its argument so the cut falls one character before the value ends
        padding = "x" * (MAX_ERROR_CHARS - len(prefix) - len(secret) + 1)
        echoed = CallToolResult(content=[TextContent(type="text",
                                                     text=prefix + padding + secret)],
                                isError=True)
        with pytest.raises(NodeError) as failed:
            output_of("evil.fail", echoed)
    finally:
        unregister(token)
    message = str(failed.value)
    assert secret[:8] not in message, message[-80:]
    assert "secret:api_key" in message or "«" in message, message[-80:]


@pytest.mark.parametrize(("value", "total", "expected"), [
    (1.0, 3.0, {"progress": 1.0, "total": 3.0, "pct": 33}),
    (math.inf, 3.0, {"total": 3.0}),
    (math.nan, 3.0, {"total": 3.0}),
    (1.0, math.inf, {"progress": 1.0}),
    (1.0, math.nan, {"progress": 1.0}),
    (1.0, 0.0, {"progress": 1.0}),
    (1.0, -5.0, {"progress": 1.0}),
    (1e308, 1e-308, {"progress": 1e308, "total": 1e-308}),
    (5.0, 2.0, {"progress": 5.0, "total": 2.0, "pct": 100}),
])
def test_server_progress_passes_on_only_finite_numbers(
        value: float, total: float, expected: dict[str, float]) -> None:
    assert progress_data(value, total, None) == expected


def test_server_progress_of_nothing_finite_reports_only_its_message() -> None:
    assert progress_data(math.inf, math.nan, "step") == {"message": "step"}
    assert progress_data(math.nan, None, None) == {}
