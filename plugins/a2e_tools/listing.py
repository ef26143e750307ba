"""``tool/list/req``: the tools as the SDK's ``ToolDefinition`` and how a request filters them.

Source: PROTOCOL.md §11; SDK ``a2e/caps/tools/protocol.py`` (commit c8fc1f87). A
definition is derived once per tool, and again only when the registry changed (a tool
source such as an MCP server registers its tools once the host runs):
``input_parameters`` / ``output_parameters`` are the top-level fields of the tool's JSON
Schemas (nested object fields down to :data:`PARAMETER_DEPTH` levels), and the
full schemas travel beside them (``input_schema`` / ``output_schema``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from a2e_host.config import ToolGrant
from a2e_host.exceptions import SchemaViolation
from a2e_host.tools import SIDE_EFFECTS, Tool, ToolRegistry
from a2e_host.tools.messages import ToolDefinition, ToolListRequest, ToolParameter

__all__ = ["PARAMETER_DEPTH", "MAX_QUERY_CHARS", "MAX_FILTER_TAGS", "ToolCatalog", "definition_of"]

PARAMETER_DEPTH = 4
"""Levels of nested ``properties`` a :class:`ToolParameter` lists (the schema has them all)."""

MAX_QUERY_CHARS = 1000
"""The longest ``query`` a ``tool/list/req`` may send."""

MAX_FILTER_TAGS = 100
"""The most ``filter_tags`` a ``tool/list/req`` may send."""

_NUMERIC = {"integer", "number"}
_JSON_TYPE = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def _resolve(schema: Any, root: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with one local ``$ref`` (``#/$defs/X``) followed; ``{}`` when not a dict."""
    if not isinstance(schema, dict):
        return {}
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = root.get("$defs", {}).get(ref.removeprefix("#/$defs/"))
        return target if isinstance(target, dict) else {}
    return schema


def _type_of(schema: dict[str, Any], root: dict[str, Any]) -> str:
    """The one JSON type a parameter has: ``type`` (the first non-null of a list), the
    common type of ``anyOf`` / ``oneOf`` alternatives (``number`` for int | float),
    ``object`` for a schema with ``properties``, the common type of ``enum`` values, else
    ``any``."""
    kind = schema.get("type")
    if isinstance(kind, str):
        return kind
    if isinstance(kind, list):
        named = [k for k in kind if isinstance(k, str) and k != "null"]
        return named[0] if named else "null"
    alternatives = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(alternatives, list):
        types = {_type_of(_resolve(a, root), root) for a in alternatives} - {"null"}
        if types and types <= _NUMERIC:
            return "number" if "number" in types else "integer"
        if len(types) == 1:
            return types.pop()
        return "any"
    if "properties" in schema:
        return "object"
    values = schema.get("enum")
    if isinstance(values, list) and values:
        types = {_JSON_TYPE.get(type(v), "any") for v in values}
        return types.pop() if len(types) == 1 else "any"
    return "any"


def _parameters(schema: Any, root: dict[str, Any], depth: int) -> list[ToolParameter]:
    """The fields of an object schema as ToolParameters, in the schema's order."""
    schema = _resolve(schema, root)
    props = schema.get("properties")
    if not isinstance(props, dict):
        return []
    required = schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    params = []
    for name, raw in props.items():
        sub = _resolve(raw, root)
        kind = _type_of(sub, root)
        enum = sub.get("enum")
        nested = None
        if kind == "object" and depth > 1:
            inner = _parameters(sub, root, depth - 1)
            nested = {p.name: p for p in inner} or None
        description = sub.get("description") or sub.get("title") or ""
        params.append(ToolParameter(
            name=str(name),
            type=kind,
            description=str(description),
            required=name in needed,
            enum=list(enum) if isinstance(enum, list) and enum
            and all(isinstance(v, str) for v in enum) else None,
            properties=nested,
        ))
    return params


def definition_of(tool: Tool, toolkit: str | None) -> ToolDefinition:
    """The SDK ``ToolDefinition`` of ``tool``, with its full schemas and ``side_effects``.

    Args:
        tool: the tool.
        toolkit: its ``toolkit`` when it sets none (the tool pack it came from), or None.
    """
    return ToolDefinition(
        name=tool.name,
        description=tool.description,
        input_parameters=_parameters(tool.input_schema, tool.input_schema, PARAMETER_DEPTH),
        output_parameters=_parameters(tool.output_schema, tool.output_schema, PARAMETER_DEPTH),
        streaming=tool.streaming,
        idempotent=tool.idempotent,
        tags=list(tool.tags),
        version=tool.version,
        toolkit=tool.toolkit if tool.toolkit is not None else toolkit,
        defer_loading=tool.defer_loading,
        input_schema=tool.input_schema,
        output_schema=tool.output_schema,
        side_effects=tool.side_effects,
    )


class ToolCatalog:
    """The definitions of a host's tools, by name, and the filters of ``tool/list/req``.

    Args:
        tools: the enabled tools.
    """

    __slots__ = ("_tools", "_revision", "_built")

    def __init__(self, tools: ToolRegistry) -> None:
        self._tools = tools
        self._revision = -1
        self._built: list[tuple[Tool, ToolDefinition, tuple[str, ...]]] = []
        self._entries  # noqa: B018 - derived now, while the host is built, not at a handshake

    @property
    def _entries(self) -> list[tuple[Tool, ToolDefinition, tuple[str, ...]]]:
        """The definitions, derived again when the registry changed (a source such as an
        MCP server registered or removed tools while the host runs)."""
        tools = self._tools
        if tools.revision != self._revision:
            built = []
            for t in tools:  # sorted by name
                definition = definition_of(t, tools.pack_of(t.name) or None)
                words = tuple(w.lower() for w in (t.name, t.description, *t.tags))
                built.append((t, definition, words))
            self._built, self._revision = built, tools.revision
        return self._built

    def __len__(self) -> int:
        return len(self._entries)

    def names(self, *, include_deferred: bool = False, grant: ToolGrant | None = None
              ) -> list[str]:
        """Tool names, sorted (deferred ones only when asked; only those ``grant``
        allows, when given)."""
        return [t.name for t, _, _ in self._entries
                if (include_deferred or not t.defer_loading)
                and (grant is None or grant.allows(t.name, self._tools.pack_of(t.name)))]

    def toolkits(self, grant: ToolGrant | None = None) -> list[str]:
        """The toolkits of the tools (those ``grant`` allows), sorted, without repeats."""
        return sorted({d.toolkit for t, d, _ in self._entries
                       if d.toolkit and (grant is None
                                         or grant.allows(t.name, self._tools.pack_of(t.name)))})

    def select(self, request: ToolListRequest, grant: ToolGrant | None = None
               ) -> list[ToolDefinition]:
        """The definitions ``request`` asks for, sorted by name (PROTOCOL.md §11):
        deferred tools only with ``include_deferred``; only those whose ``side_effects``
        is ``filter_kind`` (when set), that have every tag of ``filter_tags``, and whose
        name, description or a tag contains ``query`` (case-insensitive; when set);
        with a ``grant``, only the tools it allows (PROTOCOL.md §11 Tool grants).

        Raises:
            SchemaViolation: ``filter_kind`` is not a ``side_effects`` value, ``query`` is
                over :data:`MAX_QUERY_CHARS` characters, or ``filter_tags`` over
                :data:`MAX_FILTER_TAGS` tags.
        """
        kind = request.filter_kind
        if kind and kind not in SIDE_EFFECTS:
            raise SchemaViolation(
                f"tool/list/req filter_kind {kind[:100]!r} is not a tool kind; use one of "
                f"{', '.join(SIDE_EFFECTS)} (a tool's side_effects), or leave it empty for all",
                detail={"path": "$.filter_kind"},
            )
        if len(request.query) > MAX_QUERY_CHARS:
            raise SchemaViolation(
                f"tool/list/req query is {len(request.query)} characters, over "
                f"{MAX_QUERY_CHARS}; search with a shorter one",
                detail={"path": "$.query"},
            )
        if len(request.filter_tags) > MAX_FILTER_TAGS:
            raise SchemaViolation(
                f"tool/list/req filter_tags lists {len(request.filter_tags)} tags, over "
                f"{MAX_FILTER_TAGS}; filter by fewer",
                detail={"path": "$.filter_tags"},
            )
        tags = set(request.filter_tags)
        query = request.query.lower()
        return [
            definition for t, definition, words in self._entries
            if (request.include_deferred or not t.defer_loading)
            and (not kind or t.side_effects == kind)
            and tags <= set(t.tags)
            and (not query or any(query in w for w in words))
            and (grant is None or grant.allows(t.name, self._tools.pack_of(t.name)))
        ]

    def definitions(self) -> Iterable[ToolDefinition]:
        """Every definition, sorted by name."""
        return (d for _, d, _ in self._entries)
