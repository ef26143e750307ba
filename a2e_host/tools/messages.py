"""The ``tools`` capability's messages (A2E ``a2e/caps/tools/protocol.py``, SDK commit
c8fc1f87; PROTOCOL.md §11).

Layer: core (plain msgspec Structs). The ``tools`` plugin (``plugins/a2e_tools``)
declares :data:`TOOL_MESSAGE_TYPES`; clients decode them with the same Structs. Field
names, order and defaults are the SDK's; the *extensions* are new fields with defaults:
``ToolDefinition.input_schema`` / ``output_schema`` (the full JSON Schemas, which
``ToolParameter`` cannot always express) and ``ToolDefinition.side_effects``.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import msgspec

from ..messages import Message

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "TOOL_MESSAGE_TYPES",
    "ToolCallRequest",
    "ToolCallResponse",
    "ToolDefinition",
    "ToolEvent",
    "ToolListRequest",
    "ToolListResponse",
    "ToolParameter",
    "ToolResult",
]

DEFAULT_CALL_TIMEOUT = 30
"""Seconds a ``tool/call/req`` may take when it leaves ``timeout`` out (the SDK's default),
capped by ``max_timeout``."""


class ToolParameter(msgspec.Struct, kw_only=True):
    """One parameter of a tool's input or output (SDK ``ToolParameter``), derived from
    its JSON Schema.

    Attributes:
        name: the field name.
        type: ``string``, ``integer``, ``number``, ``boolean``, ``object``, ``array``,
            ``null`` (or ``any`` when the schema does not say).
        description: the schema's ``description`` (or ``title``), else ``""``.
        required: whether the object requires it.
        enum: the allowed values, when the schema lists only strings; else null.
        properties: the fields of an object-typed parameter (a few levels deep), else null.
    """

    name: str
    type: str
    description: str = ""
    required: bool = False
    enum: list[str] | None = None
    properties: dict[str, ToolParameter] | None = None


class ToolDefinition(msgspec.Struct, kw_only=True):
    """One tool as ``tool/list/resp`` lists it (SDK ``ToolDefinition``).

    Attributes:
        name / description: the tool's.
        input_parameters / output_parameters: the top-level fields of its input and
            output schemas (none when a schema is not an object with properties).
        streaming: whether it reports progress while it runs.
        idempotent: calling it twice with one input has the effect of once.
        tags: its labels.
        version: its version string.
        toolkit: the tool pack it was enabled from, null when none.
        defer_loading: left out of a plain listing (found by a search).
        input_schema / output_schema: *extension* ``tool/list.schemas``: the full JSON
            Schemas (``{}`` for an output of any shape).
        side_effects: *extension*: ``none``, ``read``, ``write`` or ``external``
            (``filter_kind`` matches it).
    """

    name: str
    description: str = ""
    input_parameters: list[ToolParameter] = []
    output_parameters: list[ToolParameter] = []
    streaming: bool = False
    idempotent: bool = False
    tags: list[str] = []
    version: str = "1"
    toolkit: str | None = None
    defer_loading: bool = False
    input_schema: dict[str, Any] = {}
    output_schema: dict[str, Any] = {}
    side_effects: str = "none"


class ToolListRequest(Message, tag="tool/list/req", kw_only=True):
    """Agent → host: list or search the tools (SDK ``ToolListRequest``).

    Attributes:
        filter_kind: ``""`` for every tool, else a ``side_effects`` value (``none``,
            ``read``, ``write``, ``external``): only tools with it.
        filter_tags: only tools that have all of these tags.
        query: ``""`` lists; otherwise only tools whose name, description or a tag
            contains it (case-insensitive).
        include_deferred: include tools marked ``defer_loading`` (left out by default).
    """

    TYPE: ClassVar[str] = "tool/list/req"
    filter_kind: str = ""
    filter_tags: list[str] = []
    query: str = ""
    include_deferred: bool = False


class ToolListResponse(Message, tag="tool/list/resp", kw_only=True):
    """Host → agent: the tools that matched, sorted by name (SDK ``ToolListResponse``)."""

    TYPE: ClassVar[str] = "tool/list/resp"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    tools: list[ToolDefinition] = []


class ToolCallRequest(Message, tag="tool/call/req", kw_only=True):
    """Agent → host: call one tool directly (SDK ``ToolCallRequest``).

    Attributes:
        session_id: from ``handshake/resp`` (``""``: this connection's).
        tool_name: a listed tool's name.
        arguments: its input, validated against its input schema.
        correlation_id: ties the call to an agent turn (logged).
        streaming: send the tool's reports as ``tool/event`` before the response;
            false collects them in ``ToolResult.events``.
        timeout: int seconds (> 0, within ``max_timeout``); left out (unset):
            ``min(30, max_timeout)`` (:meth:`timeout_within`).
    """

    TYPE: ClassVar[str] = "tool/call/req"
    session_id: str = ""
    tool_name: str = ""
    arguments: dict[str, Any]
    correlation_id: str = ""
    streaming: bool = False
    timeout: int | msgspec.UnsetType = msgspec.UNSET

    def timeout_within(self, max_timeout: int) -> int:
        """The timeout asked for, int seconds: ``timeout`` as sent, or
        ``min(30, max_timeout)`` when it was left out (a default is not a request)."""
        if isinstance(self.timeout, int):
            return self.timeout
        return min(DEFAULT_CALL_TIMEOUT, max_timeout)


class ToolEvent(Message, tag="tool/event", kw_only=True):
    """Host → agent: one report of the running tool (SDK ``ToolEvent``, an A2EEvent).

    Attributes:
        kind: ``progress`` (``data: {pct, message}``), ``log`` (``{level, message}``),
            ``artifact`` (``{name, mime, chunk, final}``) or ``status`` (``{message}``).
        req_id: the ``tool/call/req`` id.
        data: what the tool reported.
        seq: 1, 2, 3 … per call, gapless.
    """

    TYPE: ClassVar[str] = "tool/event"
    FROM_HOST: ClassVar[bool] = True
    kind: str = "status"
    req_id: str = ""
    data: dict[str, Any] = {}
    seq: int = 0


class ToolResult(msgspec.Struct, kw_only=True):
    """The outcome of one call (SDK ``ToolResult``).

    Attributes:
        success: the tool ran and returned an output within its ceilings.
        tool_name: the tool called.
        data: its output (null when it failed).
        summary: null (reserved by the SDK).
        truncated: always false: an output over ``max_output_bytes`` fails the call.
        exit_code: null (tools have none).
        error: one sentence saying what failed, null on success.
        error_code: ``invalid_input`` (arguments refused by the input schema; the tool
            did not run), ``timeout``, ``chain_limit`` (a ceiling, e.g.
            ``max_output_bytes``), ``cancelled``, the tool's own code when it gave one,
            else ``tool_error``; null on success.
        duration_ms: int milliseconds from receipt to response.
        events: the reports of a call sent with ``streaming: false`` (as ``tool/event``
            objects); empty for a streaming call (they were sent before).
    """

    success: bool
    tool_name: str
    data: Any = None
    summary: Any = None
    truncated: bool = False
    exit_code: int | None = None
    error: str | None = None
    error_code: str | None = None
    duration_ms: int = 0
    events: list[ToolEvent] = []


class ToolCallResponse(Message, tag="tool/call/resp", kw_only=True):
    """Host → agent: the one answer to a ``tool/call/req`` (SDK ``ToolCallResponse``)."""

    TYPE: ClassVar[str] = "tool/call/resp"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    data: ToolResult
    created_at: float = msgspec.field(default_factory=time.time)


TOOL_MESSAGE_TYPES: tuple[type[Message], ...] = (
    ToolListRequest,
    ToolListResponse,
    ToolCallRequest,
    ToolEvent,
    ToolCallResponse,
)
"""The ``tools`` capability's messages, as its plugin declares them."""
