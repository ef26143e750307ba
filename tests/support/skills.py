"""Declared skills with several versions and every lifecycle, written into a directory
for a host started with ``--skills DIR`` (the conformance fixture tools only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["VERSIONED_SKILLS", "write_versioned_skills"]


def _shout(version: str, status: str, tag: int | None) -> dict[str, Any]:
    nodes: list[dict[str, Any]] = [
        {"node_id": "join", "kind": "tool", "name": "concat",
         "input_map": {"parts": "input.parts"}, "next_node": "up"},
        {"node_id": "up", "kind": "tool", "name": "upper",
         "input_map": {"text": "join.output.text"}},
    ]
    if tag is not None:
        nodes[1]["next_node"] = "mark"
        nodes.append({"node_id": "mark", "kind": "tool", "name": "echo",
                      "input": {"v": tag}, "input_map": {"text": "up.output.text"}})
    return {"name": "shout", "version": version, "status": status,
            "description": f"Join the parts and upper-case them (v{version}).",
            "input_schema": {"type": "object", "required": ["parts"],
                             "properties": {"parts": {"type": "array"}}},
            "tags": ["text"], "category": "text", "entry_node": "join", "nodes": nodes}


def _echo(name: str, version: str, status: str) -> dict[str, Any]:
    return {"name": name, "version": version, "status": status,
            "description": f"{name} v{version}", "entry_node": "e",
            "nodes": [{"node_id": "e", "kind": "tool", "name": "echo",
                       "input": {"v": version}}]}


VERSIONED_SKILLS: dict[str, dict[str, Any]] = {
    "shout-1.json": _shout("1", "deprecated", None),
    "shout-2.json": _shout("2", "active", 2),
    "shout-10.json": _shout("10", "draft", 10),
    "gone-1.json": _echo("gone", "1", "retired"),
    "gone-2.json": _echo("gone", "2", "active"),
    "lost-1.json": _echo("lost", "1", "retired"),
    "sketch-0.1.json": _echo("sketch", "0.1", "draft"),
    "legacy-1.json": _echo("legacy", "1", "deprecated"),
}
"""File name → skill file. ``shout``: 1 deprecated (``{"text"}``), 2 active (``{"v": 2,
"text"}``), 10 draft; ``gone``: 1 retired, 2 active; ``lost``: 1 retired only;
``sketch``: 0.1 draft only; ``legacy``: 1 deprecated only."""


def write_versioned_skills(directory: Path) -> Path:
    """Write :data:`VERSIONED_SKILLS` into ``directory`` (created); returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    for file_name, skill in VERSIONED_SKILLS.items():
        (directory / file_name).write_text(json.dumps(skill), encoding="utf-8")
    return directory
