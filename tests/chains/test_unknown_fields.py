"""A chain file's keys that no field reads are warnings with a did-you-mean, never a
refusal: a misspelled recovery field must not silently do nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from a2e_host.chains.unknown_fields import MAX_UNKNOWN_FIELD_WARNINGS, unknown_field_warnings

BODY = {
    "nodes": [{"node_id": "a", "kind": "tool", "name": "word_count", "input": {"text": "hi"},
               "retries": {"max_attempts": 3}, "fallbak": "lines", "time_out": 5,
               "zzzzzzzz": 1}],
    "entry_node": "a",
    "initail_input": {},
}


def test_each_unknown_key_is_a_warning_naming_the_closest_field() -> None:
    found = [(w["code"], w["node_id"], w["field"], w["hint"]) for w in unknown_field_warnings(BODY)]
    assert found == [
        ("chain_warning", "", "initail_input", "did you mean 'initial_input'?"),
        ("chain_warning", "a", "retries", "did you mean 'retry'?"),
        ("chain_warning", "a", "fallbak", "did you mean 'fallback'?"),
        ("chain_warning", "a", "time_out", "did you mean 'timeout'?"),
        ("chain_warning", "a", "zzzzzzzz", "remove it; see the node fields"),
    ]


def test_known_fields_and_the_a2e_alias_give_no_warning() -> None:
    body = {"type": "chain/req", "a2e": "1.0", "id": "r", "nodes": [
        {"node_id": "a", "kind": "tool", "name": "echo", "retry": {"max_attempts": 2},
         "fallback": "noop", "timeout": 1, "cache": True}], "entry_node": "a"}
    assert unknown_field_warnings(body) == []


def test_the_warnings_stop_at_their_cap() -> None:
    node = {"node_id": "a", "kind": "tool", **{f"k{i}": i for i in range(500)}}
    assert len(unknown_field_warnings({"nodes": [node]})) == MAX_UNKNOWN_FIELD_WARNINGS


def test_validate_prints_them_and_the_chain_stays_valid(tmp_path: Path) -> None:
    chain = tmp_path / "chain.json"
    chain.write_text(json.dumps(BODY))
    done = subprocess.run([sys.executable, "-m", "a2e_host", "validate", str(chain)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == ("warning: node 'a' field 'retries': unknown node field 'retries' is "
                        "ignored (fix: did you mean 'retry'?)")
    assert lines[-1] == "valid: chain.json: 1 node, roots a; terminals a, 5 warnings"
