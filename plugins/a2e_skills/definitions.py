"""What ``skill/discover/resp`` says of each skill version, and the handshake's list.

Layer: core (pure). Source: PROTOCOL.md §9.
"""

from __future__ import annotations

import math
from typing import Any

from a2e_host.chains.skill_messages import SkillDefinition
from a2e_host.chains.skill_versions import WIRE_STATUS
from a2e_host.chains.skills import DeclaredSkill, SkillRegistry, SkillVersion
from a2e_host.tools import Tool

__all__ = ["MAX_FILTERS", "MAX_LISTED", "definition_of", "discover", "handshake_listing"]

MAX_FILTERS = 100
"""Entries ``filter_tags`` and ``filter_categories`` of a ``skill/discover/req`` may each
hold at most (a listing is answered on the connection's reader: a million tags matched
against every version would stall every session of the host)."""

MAX_LISTED = 100
"""Skill versions the handshake's ``skill`` metadata lists; ``skills_total`` counts all."""


def _schema(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _argument_hint(schema: dict[str, Any]) -> str:
    props = schema.get("properties")
    names = list(props) if isinstance(props, dict) else []
    required = schema.get("required")
    required = [r for r in required if isinstance(r, str)] if isinstance(required, list) else []
    names += [r for r in required if r not in names]
    if not names:
        return "an object of arguments (none declared)"
    shown = ", ".join(f"{n} (required)" if n in required else n for n in names[:20])
    return f"an object with {shown}"


def definition_of(entry: SkillVersion) -> SkillDefinition:
    """The SDK ``SkillDefinition`` of one registered version."""
    skill = entry.skill
    if isinstance(skill, Tool):
        input_schema = _schema(skill.input_schema)
        output_schema = _schema(skill.output_schema)
        timeout = int(math.ceil(skill.timeout)) if skill.timeout is not None else None
        source = "system"
    else:
        assert isinstance(skill, DeclaredSkill)
        input_schema = _schema(skill.input_schema)
        output_schema = _schema(skill.output_schema)
        timeout = None
        source = "project"
    props = input_schema.get("properties")
    arguments = list(props) if isinstance(props, dict) else []
    required = input_schema.get("required")
    if isinstance(required, list):
        arguments += [r for r in required if isinstance(r, str) and r not in arguments]
    return SkillDefinition(
        name=entry.name,
        version=entry.version,
        description=skill.description,
        status=WIRE_STATUS[entry.lifecycle],
        lifecycle=entry.lifecycle,
        input_schema=input_schema,
        output_schema=output_schema,
        arguments=arguments,
        when_to_use=entry.when_to_use or skill.description,
        argument_hint=_argument_hint(input_schema),
        source=source,
        category=entry.category or None,
        tags=list(entry.tags),
        timeout_seconds=timeout,
    )


def discover(registry: SkillRegistry, tags: list[str],
             categories: list[str]) -> list[SkillDefinition]:
    """Every version matching the filters (PROTOCOL.md §9): with ``tags``, versions
    having one of them; with ``categories``, versions in one of them."""
    wanted_tags, wanted_categories = set(tags), set(categories)
    found = []
    for entry in registry.versions():
        if wanted_tags and wanted_tags.isdisjoint(entry.tags):
            continue
        if wanted_categories and entry.category not in wanted_categories:
            continue
        found.append(definition_of(entry))
    return found


def handshake_listing(registry: SkillRegistry) -> list[dict[str, str]]:
    """``[{name, version, lifecycle}]`` of the first :data:`MAX_LISTED` versions."""
    return [{"name": e.name, "version": e.version, "lifecycle": e.lifecycle}
            for e in registry.versions()[:MAX_LISTED]]
