"""Plugins: loaded from the entry-point group like a third party's, ordered by priority,
routed by namespace."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import ClassVar

from a2e_host.config import HostConfig
from a2e_host.plugin import Plugin
from a2e_host.runtime.host import PLUGIN_GROUP, Host, load_plugins


def test_the_first_party_plugins_are_found_through_the_public_entry_point_group() -> None:
    names = {ep.name: ep.value for ep in entry_points(group=PLUGIN_GROUP)}
    assert names["chains"] == "a2e_chains:ChainPlugin"
    assert names["runs"] == "a2e_chains:RunsPlugin"
    assert names["skill"] == "a2e_skills:SkillPlugin"
    assert names["tools"] == "a2e_tools:ToolsPlugin"
    loaded = [(p.capability, p.namespace, p.priority) for p in load_plugins(HostConfig())]
    assert loaded[0] == ("chains", "chain/*", 10)
    assert ("runs", "run/*", 15) in loaded
    assert ("skill", "skill/*", 30) in loaded
    assert ("tools", "tool/*", 20) in loaded
    assert loaded == sorted(loaded, key=lambda p: p[2])


class Early(Plugin):
    capability: ClassVar[str] = "early"
    namespace: ClassVar[str] = "x/*"
    priority: ClassVar[int] = 5


class Late(Plugin):
    capability: ClassVar[str] = "late"
    namespace: ClassVar[str] = "x/*"
    priority: ClassVar[int] = 50


class Exact(Plugin):
    capability: ClassVar[str] = "exact"
    namespace: ClassVar[str] = "y/only"
    priority: ClassVar[int] = 1


def test_lower_priority_plugins_load_and_route_first() -> None:
    host = Host(HostConfig(), plugins=[Late, Exact, Early])
    assert [p.capability for p in host.plugins] == ["exact", "early", "late"]
    assert type(host.plugin_for("x/anything")) is Early
    assert type(host.plugin_for("y/only")) is Exact
    assert host.plugin_for("y/other") is None
    assert host.plugin_for("chain/req") is None
