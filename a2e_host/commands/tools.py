"""``a2e-host tools [--json]``: list the tools, skills and proc allowlist of a configuration.

Layer: command (prints to stdout, errors to stderr).

Exit codes: 0 listed, 2 bad configuration (unknown tool pack, broken skill file, an
``allow_proc`` executable not found).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import msgspec

from ..config import load_config, with_local_tools
from ..toolbox import Toolbox
from ..tools import Tool

__all__ = ["tools_main", "describe"]


def tools_main(*, json_out: bool, config_path: Path | None, overrides: dict[str, Any]) -> int:
    """Print what the configuration exposes.

    Args:
        json_out: print one JSON document (with input and output schemas) instead of text.
        config_path: a TOML configuration file, or None.
        overrides: CLI values (``tools``, ``allow_proc``, ``skills_dirs``, ``root``).

    Returns:
        The exit code: 0, or 2 when the configuration is unusable (reason on stderr).
    """
    try:
        config = with_local_tools(load_config(config_path, overrides=overrides))
        box = Toolbox.from_config(config)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    info = describe(box)
    if json_out:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(info), indent=2).decode())
        sys.stdout.write("\n")
    else:
        sys.stdout.write(_as_text(info))
    return 0


def describe(box: Toolbox) -> dict[str, Any]:
    """The listing as JSON-able data: ``{"tools": [...], "skills": [...], "proc": {...}}``."""
    skills: list[dict[str, Any]] = []
    for name in box.skills.names():
        skill = box.skills.get(name)
        if isinstance(skill, Tool):
            skills.append({**_tool_info(skill), "kind": "python"})
        elif skill is not None:
            skills.append(
                {
                    "name": skill.name,
                    "kind": "chain",
                    "description": skill.description,
                    "input_schema": skill.input_schema,
                    "nodes": len(skill.nodes),
                    "source": str(skill.source) if skill.source else "",
                }
            )
    return {
        "tools": [_tool_info(t) for t in box.tools],
        "skills": skills,
        "proc": {
            "allow": [{"name": n, "path": p} for n, p in sorted(box.proc.allowed.items())],
            "env_allow": list(box.proc.env_allow),
            "root": str(box.proc.root),
            "max_stdout_bytes": box.proc.max_stdout_bytes,
            "max_stderr_bytes": box.proc.max_stderr_bytes,
        },
    }


def _tool_info(t: Tool) -> dict[str, Any]:
    return {
        "name": t.name,
        "description": t.description,
        "side_effects": t.side_effects,
        "version": t.version,
        "timeout": t.timeout,
        "input_schema": t.input_schema,
        "output_schema": t.output_schema,
    }


def _as_text(info: dict[str, Any]) -> str:
    lines: list[str] = []
    tools = info["tools"]
    lines.append(f"tools ({len(tools)}):" if tools else "tools: none (enable packs with --tools)")
    width = max((len(t["name"]) for t in tools), default=0)
    for t in tools:
        lines.append(f"  {t['name']:<{width}}  [{t['side_effects']}]  {t['description']}")
    skills = info["skills"]
    lines.append(f"skills ({len(skills)}):" if skills else "skills: none")
    for s in skills:
        lines.append(f"  {s['name']}  ({s['kind']})  {s['description']}")
    allow = info["proc"]["allow"]
    if allow:
        lines.append(f"proc allowlist ({len(allow)}), cwd root {info['proc']['root']}:")
        lines.extend(f"  {a['name']} -> {a['path']}" for a in allow)
    else:
        lines.append("proc: disabled (allow executables with --allow-proc)")
    return "\n".join(lines) + "\n"
