"""What a newcomer following README.md met: its tool-name globs match tools of the packs
they name, its console-spans example serves tools, and the sections on seeing a run and on
deploying say what one needs (the role, the database, where TLS ends)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from a2e_host.config import HostConfig
from a2e_host.tool_patterns import tool_matches
from a2e_host.tools import load_tools
from tests.support import REPO

README = REPO / "README.md"


def _text() -> str:
    return README.read_text("utf-8")


def _section(heading: str) -> str:
    text = _text()
    start = text.index(f"\n{heading}\n")
    end = text.index("\n## ", start + len(heading) + 2)
    return text[start:end]


def _configuration() -> str:
    return next(b for b in re.findall(r"^```toml\n(.*?)^```", _text(), re.M | re.S)
                if "[auth.tool_grants]" in b)


def test_the_readmes_tool_grant_and_secret_globs_match_tools_of_the_packs_they_name(
        tmp_path: Path) -> None:
    block = _configuration()
    grants = tomllib.loads(block)["auth"]["tool_grants"]
    secret = re.search(r"^# OPENAI_KEY = (\{.*?\})", block, re.M)
    assert secret is not None and 'tools = ["llm.*"]' in secret.group(1)
    tools = load_tools(HostConfig(tools=("fs", "text", "json", "conformance"),
                                  root=str(tmp_path)))
    for patterns in grants.values():
        for pattern in patterns:
            matched = [t.name for t in tools
                       if tool_matches((pattern,), t.name, tools.pack_of(t.name))]
            assert matched, f"README grant pattern {pattern!r} matches no tool"
    assert [t.name for t in tools if tool_matches(("conformance.upper",), t.name,
                                                  tools.pack_of(t.name))] == ["upper"]


def test_the_console_spans_example_serves_a_tool_pack_and_says_spans_are_multi_line() -> None:
    line = next(x for x in _section("## Observability").splitlines()
                if "A2E_OTEL_EXPORTER=console" in x)
    assert "a2e-host serve --tools conformance" in line
    assert "multi-line" in _section("## Observability")


def test_a_run_you_can_see_explains_record_graph_events_and_the_html_page() -> None:
    seen = _section("### A run you can see")
    for words in ("--record run.ndjson", "graph examples/repo-report.json --events run.ndjson",
                  "--format html", "graph --run RUN"):
        assert words in seen


def test_the_secrets_section_points_down_to_the_configuration() -> None:
    assert "`[secrets]` above" not in _text()
    assert "see [Configuration](#configuration)\nbelow" in _section("### Secrets")


def test_deployment_says_how_to_create_the_role_and_database_and_where_tls_ends() -> None:
    deploy = " ".join(_section("## Deployment: replicas on PostgreSQL").split())
    for words in ("createuser --pwprompt a2e", "createdb --owner=a2e a2e",
                  "GRANT USAGE, CREATE ON SCHEMA public TO a2e",
                  "terminate TLS at the load balancer or a reverse proxy",
                  "never let bearer tokens"):
        assert words in deploy
