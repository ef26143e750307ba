"""An MCP server's tool as a host tool ``NAME.tool``, and an MCP result as a node output.

Layer: plugin (builds :class:`~a2e_host.tools.Tool` objects; runs nothing). Source:
PROTOCOL.md §12.

* The tool's input schema is the MCP tool's ``inputSchema``; its output schema the MCP
  ``outputSchema`` when the server declares one, else :data:`CONTENT_SCHEMA`. Both are
  what listings and the static checks read; the server validates the input itself.
* ``side_effects``: ``read`` for a tool annotated ``readOnlyHint``, else ``external``
  (nothing an MCP server does is cached); ``idempotent`` from ``idempotentHint``.
* A result's output is its ``structuredContent`` when it has one, else
  ``{"text": the text blocks joined by newlines, "content": [the content blocks]}``.
* An ``isError`` result fails the node with the server's text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from a2e_host.exceptions import NodeError
from a2e_host.secrets import redact
from a2e_host.tools import Tool, context

if TYPE_CHECKING:
    from .link import ServerLink

__all__ = ["CONTENT_SCHEMA", "MAX_DESCRIPTION_CHARS", "MAX_ERROR_CHARS", "build_tool",
           "output_of"]

CONTENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "the text blocks, joined by newlines"},
        "content": {"type": "array", "items": {"type": "object"},
                    "description": "the MCP content blocks"},
    },
    "required": ["text", "content"],
}
"""The output of an MCP tool that declares no ``outputSchema``."""

MAX_DESCRIPTION_CHARS = 4000
"""The most characters of an MCP tool's description the host lists."""

MAX_ERROR_CHARS = 2000
"""The most characters of a server's error text a node error carries."""


def build_tool(name: str, listed: Any, link: ServerLink) -> Tool:
    """The host tool ``name`` (``SERVER.tool``) calling ``listed`` (an ``mcp.types.Tool``)
    through ``link``."""
    mcp_name = listed.name
    hints = listed.annotations

    async def call(args: dict[str, Any]) -> Any:
        return await link.call(mcp_name, args, context())

    read_only = bool(hints is not None and hints.read_only_hint)
    made = Tool(
        name,
        call,
        description=(listed.description or listed.title or "").strip()[:MAX_DESCRIPTION_CHARS],
        side_effects="read" if read_only else "external",
        idempotent=bool(hints is not None and hints.idempotent_hint),
        cacheable=False,
        tags=("mcp", link.server.name),
        toolkit=f"mcp:{link.server.name}",
    )
    made.input_schema = dict(listed.input_schema)
    made.output_schema = (dict(listed.output_schema) if listed.output_schema is not None
                          else dict(CONTENT_SCHEMA))
    return made


def _text_of(result: Any) -> str:
    return "\n".join(block.text for block in result.content
                     if getattr(block, "type", "") == "text")


def output_of(name: str, result: Any) -> Any:
    """The node output of ``result`` (an ``mcp.types.CallToolResult``) of tool ``name``.

    Raises:
        NodeError: ``result.isError``; the message carries the server's text, secret
            values redacted, then cut to :data:`MAX_ERROR_CHARS` characters (in that
            order: a cut inside a value would leave a part no redaction matches).
    """
    if result.is_error:
        text = redact(_text_of(result).strip()) or "no error text"
        if len(text) > MAX_ERROR_CHARS:
            text = text[:MAX_ERROR_CHARS] + "…"
        raise NodeError(f"MCP tool {name} failed: {text}",
                        details={"mcp_tool": name, "mcp_error": "is_error"})
    if result.structured_content is not None:
        return result.structured_content
    return {
        "text": _text_of(result),
        "content": [block.model_dump(mode="json", by_alias=True, exclude_none=True)
                    for block in result.content],
    }
