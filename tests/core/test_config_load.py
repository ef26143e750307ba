"""load_config: TOML file < A2E_* environment < CLI overrides, every bad value named."""

from __future__ import annotations

from pathlib import Path

import pytest

from a2e_host.config import HostConfig, load_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "host.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_nothing_given_is_the_defaults() -> None:
    assert load_config(environ={}) == HostConfig()


def test_file_sets_fields_and_limits_relative_paths_from_its_directory(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
port = 9001
tools = ["fs", "text"]
root = "data"
keepalive_interval = 5
[limits]
max_nodes = 100
max_parallel = 16
""",
    )
    config = load_config(path, environ={})
    assert (config.port, config.tools, config.keepalive_interval) == (9001, ("fs", "text"), 5.0)
    assert config.root == str(tmp_path / "data")
    assert (config.limits.max_nodes, config.limits.max_parallel) == (100, 16)
    assert config.limits.max_depth == 8


def test_environment_overrides_the_file_and_cli_overrides_both(tmp_path: Path) -> None:
    path = write(tmp_path, 'host = "0.0.0.0"\nport = 1\n[limits]\nmax_nodes = 10\nmax_depth = 3\n')
    env = {"A2E_PORT": "2", "A2E_MAX_NODES": "20", "A2E_TOOLS": "fs, text", "HOME": "/x"}
    config = load_config(path, environ=env, overrides={"port": 3, "max_nodes": 30})
    assert (config.host, config.port) == ("0.0.0.0", 3)
    assert (config.limits.max_nodes, config.limits.max_depth) == (30, 3)
    assert config.tools == ("fs", "text")


@pytest.mark.parametrize(
    ("env", "field", "value"),
    [
        ({"A2E_ALLOW_PROC": "wc,ls"}, "allow_proc", ("wc", "ls")),
        ({"A2E_AUTH_TOKEN": "tok"}, "auth_token", "tok"),
        ({"A2E_HOST": "::1"}, "host", "::1"),
        ({"A2E_LOG_FORMAT": "JSON"}, "log_format", "json"),
        ({"A2E_ROOT": "/srv"}, "root", "/srv"),
        ({"A2E_KEEPALIVE_INTERVAL": "none"}, "keepalive_interval", None),
        ({"A2E_SHUTDOWN_GRACE": "2.5"}, "shutdown_grace", 2.5),
        ({"A2E_OUTBOX_HIGH_WATER": "64"}, "outbox_high_water", 64),
        ({"A2E_STEP_CACHE_MAX_ENTRIES": "0"}, "step_cache_max_entries", 0),
        ({"A2E_STEP_CACHE_MAX_BYTES": "1_048_576"}, "step_cache_max_bytes", 1_048_576),
    ],
)
def test_environment_variables_are_parsed_per_field(
    env: dict[str, str], field: str, value: object
) -> None:
    assert getattr(load_config(environ=env), field) == value


def test_cli_overrides_may_nest_limits() -> None:
    config = load_config(environ={}, overrides={"limits": {"max_timeout": 60}})
    assert config.limits.max_timeout == 60


def test_a2e_config_names_the_file_when_no_path_is_given(tmp_path: Path) -> None:
    path = write(tmp_path, "port = 4321\n")
    assert load_config(environ={"A2E_CONFIG": str(path)}).port == 4321


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"environ": {"A2E_MAX_NODES": "lots"}}, ["max_nodes", "A2E_MAX_NODES", "lots"]),
        ({"environ": {"A2E_MAX_NODES": "0"}}, ["max_nodes", "positive"]),
        ({"environ": {"A2E_PORT": "70000"}}, ["port", "A2E_PORT", "70000"]),
        ({"environ": {"A2E_LOG_LEVEL": "loud"}}, ["log_level", "A2E_LOG_LEVEL", "debug"]),
        ({"environ": {}, "overrides": {"shutdown_grace": -1}}, ["shutdown_grace", "command line"]),
        ({"environ": {}, "overrides": {"colour": "red"}}, ["colour", "command line"]),
        ({"environ": {}, "overrides": {"tools": 3}}, ["tools", "list of strings"]),
        ({"environ": {"A2E_STEP_CACHE_MAX_BYTES": "-1"}},
         ["step_cache_max_bytes", "A2E_STEP_CACHE_MAX_BYTES", ">= 0"]),
        ({"environ": {"A2E_MAX_ATTEMPTS": "0"}}, ["max_attempts", "positive"]),
    ],
)
def test_bad_values_name_the_key_and_the_source(kwargs: dict, words: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        load_config(**kwargs)
    for word in words:
        assert word in str(info.value)


def test_file_errors_name_the_file_and_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        load_config(tmp_path / "missing.toml", environ={})
    with pytest.raises(ValueError, match="not valid TOML"):
        load_config(write(tmp_path, "port = = 1"), environ={})
    with pytest.raises(ValueError, match=r"max_nodes.*\[limits\] of config file"):
        load_config(write(tmp_path, "[limits]\nmax_nodes = -5\n"), environ={})
    with pytest.raises(ValueError, match="unknown setting 'prot'"):
        load_config(write(tmp_path, "prot = 1\n"), environ={})


def test_the_step_cache_and_max_attempts_are_configured_like_any_setting(tmp_path: Path) -> None:
    path = write(tmp_path, "step_cache_max_entries = 16\n[limits]\nmax_attempts = 4\n")
    config = load_config(path, environ={"A2E_STEP_CACHE_MAX_BYTES": "4096"})
    assert (config.step_cache_max_entries, config.step_cache_max_bytes) == (16, 4096)
    assert config.limits.max_attempts == 4
    defaults = HostConfig()
    assert (defaults.step_cache_max_entries, defaults.step_cache_max_bytes) == (
        1024, 16 * 1024 * 1024)
    assert defaults.limits.max_attempts == 10
