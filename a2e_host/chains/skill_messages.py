"""The ``skill/*`` messages, exactly as the A2E SDK's ``a2e/caps/skills/protocol.py``
(commit c8fc1f87) shapes them, plus this host's extensions (new fields with defaults).

Layer: core (msgspec Structs, no I/O). Source: PROTOCOL.md §9. The ``skill`` plugin
declares :data:`SKILL_MESSAGE_TYPES` as its ``message_types``; clients decode them too.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import msgspec

from ..messages import Message

__all__ = [
    "SKILL_MESSAGE_TYPES",
    "SkillCallRequest",
    "SkillCallResponse",
    "SkillDefinition",
    "SkillDiscoverRequest",
    "SkillDiscoverResponse",
    "SkillEvent",
    "SkillResult",
]


class SkillDefinition(msgspec.Struct, kw_only=True):
    """One version of a skill, as ``skill/discover/resp`` lists it (the SDK's
    ``SkillDefinition``: every field it requires is always sent).

    Attributes:
        name / version / description: its identity; ``version`` is PEP 440.
        triggers: phrases for auto-invocation (none: ``[]``).
        status: the SDK's ``SkillStatus``: ``Created`` (draft), ``Published`` (active,
            deprecated), ``Archived`` (retired).
        lifecycle: *extension*: ``draft``, ``active``, ``deprecated`` or ``retired``.
        input_schema / output_schema: JSON Schemas (``{}``: not declared).
        arguments: the names of its input fields.
        when_to_use / argument_hint: what to call it for, and how to write its arguments.
        source: ``project`` (a skill file of the host's skills directories) or ``system``
            (an installed Python skill).
        category / tags: for ``filter_categories`` / ``filter_tags``.
        timeout_seconds: its own time bound (a Python skill's ``timeout``), else None.
    """

    name: str
    version: str
    description: str
    triggers: list[str] = []
    status: str
    lifecycle: str
    input_schema: dict[str, Any] = {}
    output_schema: dict[str, Any] = {}
    arguments: list[str] = []
    when_to_use: str
    argument_hint: str
    source: str
    category: str | None = None
    tags: list[str] | None = None
    timeout_seconds: int | None = None


class SkillDiscoverRequest(Message, tag="skill/discover/req", kw_only=True):
    """Agent → host: "what skills do you serve?". Empty filters list every version; a
    skill is listed when it has one of ``filter_tags`` and its category is one of
    ``filter_categories`` (each filter applies only when given)."""

    TYPE: ClassVar[str] = "skill/discover/req"
    filter_tags: list[str] = []
    filter_categories: list[str] = []


class SkillDiscoverResponse(Message, tag="skill/discover/resp", kw_only=True):
    """Host → agent: every matching skill version, by name then version."""

    TYPE: ClassVar[str] = "skill/discover/resp"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    skills: list[SkillDefinition] = []


class SkillCallRequest(Message, tag="skill/call/req", kw_only=True):
    """Agent → host: run the skill ``name`` (``name`` or ``name@version``) with
    ``arguments`` as its input.

    Attributes:
        timeout: int seconds the call may take (> 0, within ``max_timeout``); left out,
            ``min(60, max_timeout)`` (the SDK's default is 60).
        streaming: send ``skill/event`` frames while it runs.
        session_id: ``""`` or this connection's session.
        correlation_id / metadata: accepted; they do not change the run.
    """

    TYPE: ClassVar[str] = "skill/call/req"
    name: str = ""
    arguments: dict[str, Any] = {}
    correlation_id: str = ""
    timeout: int | None = None
    streaming: bool = True
    session_id: str = ""
    metadata: dict[str, Any] = {}


class SkillEvent(Message, tag="skill/event", kw_only=True):
    """Host → agent: one event of a running skill (A2EEvent's fields).

    ``data`` is ``{node_id, phase, output?, error?}`` of a node of the skill (the call's
    own node is ``skill``; a declared skill's inner nodes ``skill/<inner>``), merged with
    that node's event data (a deprecated version's ``warning``, a retry's attempt).
    """

    TYPE: ClassVar[str] = "skill/event"
    FROM_HOST: ClassVar[bool] = True
    kind: str = "status"
    req_id: str = ""
    data: dict[str, Any] = {}
    seq: int = 0


class SkillResult(msgspec.Struct, kw_only=True):
    """The SDK's ``SkillResult``: what the skill gave (``data``), or why it failed."""

    success: bool
    data: Any = None
    summary: Any = None
    truncated: bool = False
    error: str | None = None
    error_code: str | None = None
    duration_ms: int = 0
    events: list[dict[str, Any]] = []


class SkillCallResponse(Message, tag="skill/call/resp", kw_only=True):
    """Host → agent: the one answer to a ``skill/call/req``.

    Attributes:
        data: the result when the skill ran (``success`` false when it failed:
            ``error_code`` ``skill_error``, ``timeout``, ``chain_limit`` …); None when
            the call was refused before anything ran.
        error: ``{code, message, retryable, details}`` when refused before running:
            ``unknown_skill`` (``details.hint``), ``schema_violation`` (the arguments),
            ``chain_limit`` (a ceiling), ``busy``; else None.
        skill: *extension*: ``{name, version, lifecycle}`` of the version that ran.
        events_dropped: *extension*: events not sent past the per-call cap.
    """

    TYPE: ClassVar[str] = "skill/call/resp"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    name: str = ""
    data: SkillResult | None = None
    error: dict[str, Any] | None = None
    created_at: float = msgspec.field(default_factory=time.time)
    skill: dict[str, str] | None = None
    events_dropped: int = 0


SKILL_MESSAGE_TYPES: tuple[type[Message], ...] = (
    SkillDiscoverRequest, SkillDiscoverResponse, SkillCallRequest, SkillEvent,
    SkillCallResponse,
)
