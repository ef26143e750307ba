"""The ``[mcp]`` table and what an agent may register (issue 20, PROTOCOL.md §12): every
mistake is refused with one sentence naming the key; registration is refused unless the
exact command is allowlisted. Pure: no process is started."""

from __future__ import annotations

from typing import Any

import pytest
from a2e_mcp.registration import registration_of
from a2e_mcp.settings import parse_settings

from a2e_host.config import load_config

TIME = ["mcp-server-time", "--local-timezone", "UTC"]


@pytest.mark.parametrize(("table", "words"), [
    ({"servers": {"t": {}}}, "[mcp.servers.t]: give either command"),
    ({"servers": {"t": {"command": TIME, "url": "http://x/mcp"}}}, "give either command"),
    ({"servers": {"t.x": {"command": TIME}}}, "the server name 't.x' must be a letter"),
    ({"servers": {"t": {"command": TIME, "timeout": 0}}}, "[mcp.servers.t].timeout must be"),
    ({"servers": {"t": {"command": TIME, "envs": {}}}}, "unknown key 'envs'"),
    ({"servers": {"t": {"command": TIME, "env": {"A": 1}}}}, ".env must be a table of strings"),
    ({"servers": {"t": {"url": "ftp://x"}}}, ".url must start with http://"),
    ({"start_timeout": -1}, "[mcp] start_timeout must be a number of seconds > 0"),
    ({"register_commands": ["sh"]}, "register_commands[] must be a list of strings"),
    ({"severs": {}}, "[mcp]: unknown key 'severs'"),
])
def test_a_bad_mcp_table_is_refused_naming_the_key(table: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=None) as refused:
        parse_settings(table)
    assert words in str(refused.value)


def test_the_mcp_table_of_a_configuration_file_reaches_the_plugin(tmp_path: Any) -> None:
    path = tmp_path / "host.toml"
    path.write_text('[mcp]\nstart_timeout = 3\n[mcp.servers.time]\ncommand = ["a", "b"]\n'
                    'env = { TZ = "UTC" }\ntool_allow_list = ["convert_time"]\n')
    settings = parse_settings(load_config(path, environ={}).mcp)
    assert settings.start_timeout == 3.0
    (server,) = settings.servers.values()
    assert (server.name, server.command, server.env, server.tool_allow_list,
            server.transport, server.timeout) == (
        "time", ("a", "b"), {"TZ": "UTC"}, ("convert_time",), "stdio", 60.0)


ALLOWED = parse_settings({"register_commands": [TIME], "register_urls": ["http://h/mcp"],
                          "max_registered": 1})


@pytest.mark.parametrize(("config", "taken", "registered", "words"), [
    ({"name": "x", "cmd": ["sh", "-c", "id"]}, (), 0, "is not one of the commands"),
    ({"name": "x", "cmd": [*TIME, "--more"]}, (), 0, "is not one of the commands"),
    ({"name": "x", "cmd": TIME, "env": {"LD_PRELOAD": "x"}}, (), 0, "config.env must be empty"),
    ({"name": "x", "cmd": TIME, "cwd": "/"}, (), 0, "config.cwd must be empty"),
    ({"name": "x", "cmd": TIME}, ("x",), 0, "named 'x' exists already"),
    ({"cmd": TIME}, (), 0, "config.name is required"),
    ({"name": "x", "cmd": TIME}, (), 1, "([mcp] max_registered)"),
    ({"name": "x", "transport": "sse", "url": "http://other/mcp"}, (), 0, "is not one of the URLs"),
    ({"name": "x", "transport": "ws", "url": "ws://h"}, (), 0, "is not stdio or streamable-http"),
])
def test_a_registration_outside_the_allowlist_is_refused(
        config: dict[str, Any], taken: tuple[str, ...], registered: int, words: str) -> None:
    problem, server = registration_of(config, ALLOWED, taken, registered)
    assert server is None and words in problem


def test_no_registration_is_allowed_by_default() -> None:
    problem, server = registration_of({"name": "x", "cmd": TIME}, parse_settings({}), ())
    assert server is None and "does not let agents register" in problem


def test_an_allowlisted_registration_becomes_a_registered_server() -> None:
    problem, server = registration_of(
        {"name": "t", "transport": "stdio", "cmd": TIME, "timeout": 5,
         "tool_allow_list": ["convert_time"]}, ALLOWED, ())
    assert problem == "" and server is not None
    assert (server.command, server.timeout, server.tool_allow_list, server.registered) == (
        tuple(TIME), 5.0, ("convert_time",), True)
    _, by_url = registration_of({"name": "u", "transport": "streamable-http",
                                 "url": "http://h/mcp"}, ALLOWED, ())
    assert by_url is not None and by_url.transport == "streamable-http"


def test_a_bad_env_or_url_is_refused_without_echoing_values_or_credentials() -> None:
    env = {"API_TOKEN": "tok-very-secret-1", "PORT": 8080}
    with pytest.raises(ValueError) as bad_env:
        parse_settings({"servers": {"t": {"command": TIME, "env": env}}})
    assert str(bad_env.value) == (
        "[mcp.servers.t].env must be a table of strings; the value of 'PORT' is a int")
    with pytest.raises(ValueError) as bad_url:
        parse_settings({"servers": {"t": {"url": "ftp://bob:tok-very-secret-2@h/mcp"}}})
    assert "tok-very-secret-2" not in str(bad_url.value) and "bob" not in str(bad_url.value)
    assert "'ftp://h/mcp'" in str(bad_url.value), bad_url.value
    problem, _ = registration_of(
        {"name": "x", "transport": "streamable-http",
         "url": "http://bob:tok-very-secret-3@other/mcp"}, ALLOWED, ())
    assert "tok-very-secret-3" not in problem and "'http://other/mcp'" in problem, problem


def test_a_refused_registration_echoes_a_huge_cmd_or_url_cut() -> None:
    huge = "a" * 100_000
    for config in ({"name": "x", "cmd": [huge]},
                   {"name": "x", "transport": "streamable-http", "url": "http://h/" + huge}):
        problem, server = registration_of(config, ALLOWED, ())
        assert server is None and "is not one of the" in problem
        assert len(problem) < 500, len(problem)


def test_a_registration_may_not_take_a_tool_packs_name() -> None:
    problem, server = registration_of({"name": "llm", "cmd": TIME}, ALLOWED, (), 0,
                                      packs={"llm", "fs"})
    assert server is None
    assert problem == ("config.name 'llm' is the name of a tool pack: its tools would pass "
                       "for the pack's in grants and secret scopes; pick another name")
