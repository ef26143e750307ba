"""MCP tool sources, hardening: an isError text is redacted before it is cut, registered
server names cannot shadow tool packs or configured servers, settings errors name keys
and never values, and progress numbers from a server are checked before use."""

from __future__ import annotations

import pytest
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
