"""``a2e-host tools [--json] [--all]``: list the tools, skills and proc allowlist of a
configuration, and with ``--all`` the installed tool packs it does not enable.

Layer: command (prints to stdout, errors to stderr). A tool ``remote_tools`` marks is shown
``(remote: a Ray task)`` (``"remote": true`` in ``--json``); the configuration's MCP
servers (``[mcp.servers.NAME]``) are listed as not started by this command
(``"mcp_servers"``): their tools exist once a host starts them. Tool packs are the entry points of
group ``a2e_host.tools`` (:data:`~a2e_host.tools.TOOLS_GROUP`); ``--tools +PACK`` adds one
to the packs enabled by default.

Exit codes: 0 listed, 2 bad configuration (unknown tool pack, an enabled pack that cannot
be imported, broken skill file, an ``allow_proc`` executable not found). A pack that cannot
be imported but is not enabled is listed by ``--all`` as broken, with the reason.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import msgspec

from ..chains.toolbox import Toolbox
from ..config import HostConfig
from ..tools import Tool, ToolPackError, load_pack, pack_entry_points
from ..tools.registry import reason_line
from .common import load_command_config

__all__ = ["tools_main", "describe", "installed_packs", "mcp_server_names"]


def tools_main(
    *,
    json_out: bool,
    config_path: Path | None,
    overrides: dict[str, Any],
    all_packs: bool = False,
) -> int:
    """Print what the configuration exposes.

    Args:
        json_out: print one JSON document (with input and output schemas) instead of text.
        config_path: a TOML configuration file, or None.
        overrides: CLI values (``tools``, ``allow_proc``, ``skills_dirs``, ``root``).
        all_packs: also list the installed tool packs the configuration does not enable
            (``"packs"``: each with ``enabled`` false and the names of its tools).

    Returns:
        The exit code: 0, or 2 when the configuration is unusable (reason on stderr).
    """
    from ..logs import configure_logging

    try:
        config = load_command_config(config_path, overrides, local_defaults=True)
        configure_logging("auto", "warning")  # a warning of loading the tools: on stderr
        box = Toolbox.from_config(config)
    except ValueError as exc:
        print(f"a2e-host tools: {exc}", file=sys.stderr)
        return 2
    info = describe(box)
    info["packs"] = installed_packs(config, include_disabled=all_packs)
    # MCP servers' tools exist once a host starts them; this command starts none
    info["mcp_servers"] = sorted(mcp_server_names(config))
    if json_out:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(info), indent=2).decode())
        sys.stdout.write("\n")
    else:
        sys.stdout.write(_as_text(info))
    return 0


def describe(box: Toolbox) -> dict[str, Any]:
    """The listing as JSON-able data: ``{"tools": [...], "skills": [...], "proc": {...}}``."""
    skills: list[dict[str, Any]] = []
    for entry in box.skills.versions():  # every version, with its lifecycle
        skill = entry.skill
        if isinstance(skill, Tool):
            info = {**_tool_info(skill), "kind": "python"}
        else:
            info = {
                "name": skill.name,
                "kind": "chain",
                "description": skill.description,
                "input_schema": skill.input_schema,
                "nodes": len(skill.nodes),
                "source": str(skill.source) if skill.source else "",
            }
        skills.append({**info, "version": entry.version, "lifecycle": entry.lifecycle})
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


def mcp_server_names(config: HostConfig) -> list[str]:
    """The names of the configuration's ``[mcp.servers.NAME]`` tables (their tools are
    ``NAME.tool``), in file order; none when ``[mcp]`` has no ``servers`` table."""
    servers = config.mcp.get("servers") if isinstance(config.mcp, dict) else None
    return [str(name) for name in servers] if isinstance(servers, dict) else []


def installed_packs(config: HostConfig, *, include_disabled: bool = True) -> list[dict[str, Any]]:
    """Every tool pack installed in the entry-point group ``a2e_host.tools``, by name.

    Args:
        config: the configuration (``tools``: the enabled packs; what factories read).
        include_disabled: also the packs ``config.tools`` does not enable (each is then
            imported and built); False lists, and imports, only the enabled ones.

    Returns:
        ``[{"name", "description", "enabled", "tools": [names], "error"}]``: ``enabled``
        when ``config.tools`` names it; ``tools`` built for ``config`` (empty when the
        pack cannot be loaded or built, ``error`` then says why; else ``""``).
    """
    enabled = set(config.tools)
    packs: list[dict[str, Any]] = []
    for name, ep in sorted(pack_entry_points().items()):
        if not include_disabled and name not in enabled:
            continue
        info: dict[str, Any] = {"name": name, "description": "", "enabled": name in enabled,
                                "tools": [], "error": ""}
        try:
            pack = load_pack(ep)
            info["description"] = pack.description
            info["tools"] = sorted(t.name for t in pack.factory(config))
        except Exception as exc:  # noqa: BLE001 - a broken third-party pack is listed as such
            cause = exc.__cause__ if isinstance(exc, ToolPackError) else None
            info["error"] = reason_line(cause) if cause is not None else reason_line(exc)
        packs.append(info)
    return packs


def _tool_info(t: Tool) -> dict[str, Any]:
    return {
        "name": t.name,
        "description": t.description,
        "side_effects": t.side_effects,
        "remote": t.remote,
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
        remote = "  (remote: a Ray task)" if t.get("remote") else ""
        lines.append(f"  {t['name']:<{width}}  [{t['side_effects']}]{remote}  "
                     f"{t['description']}")
    for name in info.get("mcp_servers", []):
        lines.append(f"  {name}.*  MCP server [mcp.servers.{name}] (not started by this "
                     "command; its tools are listed by a running host's tool/list/req)")
    skills = info["skills"]
    lines.append(f"skills ({len(skills)}):" if skills else "skills: none")
    for s in skills:
        lines.append(f"  {s['name']}@{s['version']}  ({s['kind']}, {s['lifecycle']})  "
                     f"{s['description']}")
    allow = info["proc"]["allow"]
    if allow:
        lines.append(f"proc allowlist ({len(allow)}), cwd root {info['proc']['root']}:")
        lines.extend(f"  {a['name']} -> {a['path']}" for a in allow)
    else:
        lines.append("proc: disabled (allow executables with --allow-proc)")
    packs = info.get("packs", [])
    off = [p for p in packs if not p["enabled"]]
    if off:
        lines.append(f"tool packs ({len(packs)} installed; add one with --tools +NAME):")
        width = max(len(p["name"]) for p in packs)
        for p in packs:
            state = "enabled" if p["enabled"] else "not enabled"
            what = f"broken: {p['error']}" if p["error"] else p["description"]
            lines.append(f"  {p['name']:<{width}}  {state:<11}  {what}")
            if p["tools"] and not p["enabled"]:
                lines.append(f"  {'':<{width}}  {'':<11}  tools: {', '.join(p['tools'])}")
    elif packs:
        names = ", ".join(p["name"] for p in packs)
        lines.append(f"tool packs enabled: {names} (--all lists the installed ones not enabled)")
    return "\n".join(lines) + "\n"
