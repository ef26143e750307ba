"""``a2e-host schema`` describes every message a plugin declares (issue 15): the skill
capability's five messages appear beside the core and chain ones, each a type the SDK's
skills protocol defines."""

from __future__ import annotations

from a2e_skills import SkillPlugin

from a2e_host.commands.schema import message_schemas, plugin_message_types
from tests.support.sdk import sdk_model_of


def test_the_schemas_include_the_skill_messages_the_plugin_declares() -> None:
    schemas = message_schemas()
    skill_types = sorted(t for t in schemas if t.startswith("skill/"))
    assert skill_types == ["skill/call/req", "skill/call/resp", "skill/discover/req",
                           "skill/discover/resp", "skill/event"]
    assert [sdk_model_of(t) for t in skill_types] == [
        "SkillCallRequest", "SkillCallResponse", "SkillDiscoverRequest",
        "SkillDiscoverResponse", "SkillEvent"]
    assert set(SkillPlugin.message_types) <= set(plugin_message_types())
    assert {"chain/req", "handshake/resp"} <= set(schemas)
    definition = schemas["skill/discover/resp"]["$defs"]["SkillDefinition"]
    assert {"name", "version", "description", "status", "lifecycle", "when_to_use",
            "argument_hint", "source"} <= set(definition["required"])
