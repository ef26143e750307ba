"""``tool/list/req`` (PROTOCOL.md §11): how the SDK's filters select tools, how a tool's
schemas become ``ToolParameter`` lists, and the bounded handshake metadata."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
import pytest
from a2e_chains import ChainPlugin
from a2e_tools import METADATA_TOOL_NAMES, ToolsPlugin
from a2e_tools.listing import ToolCatalog, definition_of

from a2e_host.chains.toolbox import Toolbox
from a2e_host.client import HostError, connect_memory
from a2e_host.config import HostConfig
from a2e_host.runtime.host import Host
from a2e_host.tools import Tool, ToolRegistry, tool
from a2e_host.tools.messages import ToolListRequest
from tests.support.sdk import assert_sdk_accepts


def noop(args: dict[str, Any]) -> None:
    return None


def registry() -> ToolRegistry:
    reg = ToolRegistry()
    reg.register(Tool("read_file", noop, description="Read a file below the root",
                      side_effects="read", tags=("fs", "io")), "fs")
    reg.register(Tool("write_file", noop, description="Write a file", side_effects="write",
                      tags=("fs",)), "fs")
    reg.register(Tool("github_issue", noop, description="Open an issue on GitHub",
                      side_effects="external", tags=("web",), defer_loading=True,
                      toolkit="github"))
    reg.register(Tool("upper", noop, description="Upper-case a text"), "text")
    return reg


def names(request: ToolListRequest) -> list[str]:
    return [d.name for d in ToolCatalog(registry()).select(request)]


def test_a_plain_listing_leaves_deferred_tools_out_unless_asked() -> None:
    assert names(ToolListRequest()) == ["read_file", "upper", "write_file"]
    assert names(ToolListRequest(include_deferred=True)) == [
        "github_issue", "read_file", "upper", "write_file"]


def test_a_query_searches_names_descriptions_and_tags_case_insensitively() -> None:
    assert names(ToolListRequest(query="FILE")) == ["read_file", "write_file"]
    assert names(ToolListRequest(query="io")) == ["read_file"]  # its tag
    assert names(ToolListRequest(query="github")) == []  # deferred
    assert names(ToolListRequest(query="github", include_deferred=True)) == ["github_issue"]
    assert names(ToolListRequest(query="text upper")) == []  # not across fields


def test_filter_tags_need_every_tag_and_filter_kind_is_side_effects() -> None:
    assert names(ToolListRequest(filter_tags=["fs"])) == ["read_file", "write_file"]
    assert names(ToolListRequest(filter_tags=["fs", "io"])) == ["read_file"]
    assert names(ToolListRequest(filter_kind="write")) == ["write_file"]
    assert names(ToolListRequest(filter_kind="external", include_deferred=True)) == [
        "github_issue"]


def test_filters_out_of_bounds_are_schema_violations_naming_the_field() -> None:
    catalog = ToolCatalog(registry())
    cases = [
        (ToolListRequest(filter_kind="tool"), "$.filter_kind",
         "filter_kind 'tool' is not a tool kind; use one of none, read, write, external"),
        (ToolListRequest(query="q" * 1001), "$.query", "query is 1001 characters, over 1000"),
        (ToolListRequest(filter_tags=["t"] * 101), "$.filter_tags",
         "filter_tags lists 101 tags, over 100"),
    ]
    for request, path, text in cases:
        with pytest.raises(Exception) as refused:
            catalog.select(request)
        assert refused.value.code == "schema_violation"  # type: ignore[attr-defined]
        assert refused.value.detail == {"path": path}  # type: ignore[attr-defined]
        assert text in str(refused.value)


def test_the_toolkit_is_the_tools_own_or_its_pack() -> None:
    defs = {d.name: d for d in ToolCatalog(registry()).definitions()}
    assert {n: d.toolkit for n, d in defs.items()} == {
        "github_issue": "github", "read_file": "fs", "upper": "text", "write_file": "fs"}


class Where(msgspec.Struct):
    """Where to look."""

    path: str
    mode: Literal["r", "w"] = "r"


def test_parameters_follow_the_schema_nested_objects_enums_and_optional_fields() -> None:
    @tool
    def find(where: Where, pattern: str, limit: int | None = None, flags: list[str] = []) -> dict:  # noqa: B006
        """Find things."""
        return {}

    d = definition_of(find, None)
    params = msgspec.to_builtins(d.input_parameters)
    assert params == [
        {"name": "where", "type": "object", "description": "Where to look.", "required": True,
         "enum": None,
         "properties": {
             "path": {"name": "path", "type": "string", "description": "", "required": True,
                      "enum": None, "properties": None},
             "mode": {"name": "mode", "type": "string", "description": "", "required": False,
                      "enum": ["r", "w"], "properties": None}}},
        {"name": "pattern", "type": "string", "description": "", "required": True,
         "enum": None, "properties": None},
        {"name": "limit", "type": "integer", "description": "", "required": False,
         "enum": None, "properties": None},
        {"name": "flags", "type": "array", "description": "", "required": False,
         "enum": None, "properties": None},
    ]
    assert d.input_schema == find.input_schema and d.output_parameters == []


@pytest.mark.asyncio
async def test_a_long_listing_decodes_with_the_sdk_and_the_handshake_stays_bounded() -> None:
    config = HostConfig(tools=[])
    reg = ToolRegistry([Tool(f"t{i:03}", noop, description=f"tool {i}",
                             defer_loading=i % 2 == 1) for i in range(300)])
    host = Host(config, plugins=[ChainPlugin(config, toolbox=Toolbox(reg)),
                                 ToolsPlugin(config, tools=reg)])
    async with connect_memory(host, agent_caps=["tools"]) as client:
        assert client.handshake is not None
        meta = client.handshake.accepted_caps[0].metadata
        assert (meta["tool_count"], len(meta["tools"]), meta["tools_truncated"]) == (
            300, METADATA_TOOL_NAMES, True)
        assert meta["tools"][:2] == ["t000", "t002"]
        listed = await client.list_tools(include_deferred=True)
        assert len(listed) == 300
        plain = await client.list_tools()
        assert [d.name for d in plain][-1] == "t298" and len(plain) == 150
        found = await client.list_tools(query="tool 29", include_deferred=True)
        assert [d.name for d in found] == ["t029", *(f"t{i}" for i in range(290, 300))]
        reply = await client._request(ToolListRequest(include_deferred=True), 10)
        assert_sdk_accepts(msgspec.to_builtins(reply))
        with pytest.raises(HostError) as refused:
            await client.list_tools(filter_kind="pure")
        assert refused.value.code == "schema_violation"
