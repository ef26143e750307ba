"""``a2e-host validate CHAIN.json [--json]``: check a chain file without running it.

Layer: command (reads one file, prints to stdout/stderr). The chain is validated exactly
as a ``chain/req`` sent by ``a2e-host run`` would be (PROTOCOL.md §4, §6): against the
tools, skills and proc policy of a host built from the same configuration, with the
capabilities that host serves granted (``proc`` only when an executable is allowed), so
``validate`` and ``run`` agree on every chain.

Warnings (what the static checks found could fail at run time, PROTOCOL.md §4) are printed
after the problems, one ``warning:`` line each, and listed as ``warnings`` in ``--json``; they
never make a chain invalid.

MCP servers (``[mcp.servers.NAME]``) are not started, so their tools (``NAME.tool``) are
unknown here; such a problem's hint says so and how to check the chain against them.

Exit codes: 0 valid, 1 invalid (every problem printed), 2 unreadable file, bad JSON or
bad configuration.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from ..chains.catalog import Catalog
from ..chains.messages import ChainRequest, chain_codec
from ..chains.unknown_fields import unknown_field_warnings
from ..chains.validation import ChainPlan, validate_chain
from ..config import HostConfig
from ..exceptions import ChainInvalid, RemoteProtocolError
from ..limits import SessionLimits
from .common import load_command_config, local_capabilities, problem_hint, problem_line
from .tools import mcp_server_names

__all__ = ["validate_main"]

EXIT_VALID, EXIT_INVALID, EXIT_UNREADABLE = 0, 1, 2


def validate_main(
    chain: Path, *, json_out: bool, config_path: Path | None, overrides: dict[str, Any]
) -> int:
    """Validate the chain file ``chain`` and print the diagnostics.

    Args:
        chain: a JSON file holding a ``chain/req`` body (``type``, ``id``, ``ts`` and
            ``session_id`` may be left out).
        json_out: print one JSON object ``{"valid", "code", "message", "errors",
            "warnings", …}`` instead of one human-readable line per problem and warning.
        config_path: the TOML configuration, None for defaults and ``A2E_*`` variables.
        overrides: CLI values for the configuration (``tools``, ``allow_proc``, …).

    Returns:
        The exit code: 0 valid, 1 invalid (a wrongly typed field counts as invalid, shown as
        ``schema_violation``), 2 unreadable file, bad JSON or bad configuration.
    """
    try:
        request, stray = _read_request(chain)
    except _Unreadable as exc:
        return _fail(exc.code, str(exc), json_out)
    except RemoteProtocolError as exc:  # readable JSON, but not a chain/req shape
        problem = {
            "code": exc.code, "node_id": "", "field": exc.detail.get("path", "$"),
            "message": exc.message, "hint": "fix the field's type as the chain/req table says",
        }
        return _report_invalid(exc.code, exc.message, [problem], json_out)
    try:
        config = load_command_config(config_path, overrides, local_defaults=True)
        catalog, granted = _catalog(config)
    except ValueError as exc:  # a bad file or value, an unknown tool pack, a broken skill
        return _fail("config_error", str(exc), json_out)
    try:
        plan = validate_chain(request, catalog, SessionLimits(config.limits), granted=granted)
    except ChainInvalid as exc:
        kinds = {node.node_id: node.kind for node in request.nodes}
        errors = _with_mcp_hints(exc.details["errors"], request, mcp_server_names(config))
        hints = [problem_hint(p, node_kinds=kinds, allow_proc=config.allow_proc)
                 for p in errors]
        return _report_invalid(exc.code, exc.message, errors, json_out, hints,
                               [*stray, *exc.details.get("warnings", [])],
                               total=exc.details.get("problems_total"))
    _report_valid(chain, plan, json_out, stray)
    return EXIT_VALID


def _with_mcp_hints(errors: list[dict[str, Any]], request: ChainRequest,
                    servers: list[str]) -> list[dict[str, Any]]:
    """``errors``, where an unknown tool is ``SERVER.tool`` of a configured MCP server
    with a hint saying so: validate starts no MCP server, so their tools are unknown
    here, and how to check the chain against the started servers instead."""
    if not servers:
        return errors
    nodes = {node.node_id: node for node in request.nodes}
    out = []
    for problem in errors:
        node = nodes.get(str(problem.get("node_id", "")))
        field = str(problem.get("field", ""))
        name = getattr(node, field, None) if field in ("name", "fallback") else None
        server = name.partition(".")[0] if isinstance(name, str) and "." in name else ""
        if server in servers and str(problem.get("message", "")).startswith("unknown tool"):
            problem = {**problem, "hint": (
                f"{name!r} would come from MCP server {server!r} ([mcp.servers.{server}]), "
                "and validate does not start MCP servers; check the chain with the "
                "validate_chain tool of 'a2e-host mcp --config FILE', or against a running "
                "host (tool/list/req lists its tools)")}
        out.append(problem)
    return out


class _Unreadable(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _read_request(path: Path) -> tuple[ChainRequest, list[dict[str, Any]]]:
    """The file's chain/req, and a warning for each key no field reads (a misspelling
    would otherwise do nothing, silently: :mod:`~a2e_host.chains.unknown_fields`)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _Unreadable("unreadable", f"cannot read {str(path)!r}: {exc.strerror}") from None
    try:
        body = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise _Unreadable("parse_error", f"{str(path)!r} is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _Unreadable("invalid_message", f"{str(path)!r} must hold a JSON object "
                          "(a chain/req body)")
    body.setdefault("type", "chain/req")
    if body["type"] != "chain/req":
        raise _Unreadable("invalid_message", f"{str(path)!r} holds a {body['type']!r} message; "
                          "validate takes a chain/req body")
    msg = chain_codec.decode(msgspec.json.encode(body))
    if not isinstance(msg, ChainRequest):  # pragma: no cover - the type tag decides
        raise _Unreadable("invalid_message", f"{str(path)!r} does not hold a chain/req body")
    return msg, unknown_field_warnings(body)


def _catalog(config: HostConfig) -> tuple[Catalog, frozenset[str]]:
    """The catalog and granted capabilities of a host built from ``config``, as ``run``
    would build it: the ``chains`` plugin's tools, skills and proc policy, and every
    capability the host serves.

    Raises:
        ValueError: a plugin refused the configuration (e.g. an unknown tool pack).
    """
    from ..chains.toolbox import Toolbox
    from ..logs import configure_logging
    from ..runtime.host import Host

    configure_logging("auto", "warning")  # a plugin that fails to load is logged on stderr
    host = Host(config)
    toolbox = getattr(host.plugin_for("chain/req"), "toolbox", None)
    catalog: Catalog = toolbox if toolbox is not None else Toolbox.from_config(config)
    return catalog, frozenset(local_capabilities(host))


def _fail(code: str, message: str, json_out: bool) -> int:
    if json_out:
        print(json.dumps({"valid": False, "code": code, "message": message, "errors": [],
                          "warnings": []}, ensure_ascii=False))
    else:
        print(f"error: {message}", file=sys.stderr)
    return EXIT_UNREADABLE


def _report_invalid(
    code: str, message: str, errors: list[dict[str, Any]], json_out: bool,
    hints: list[str] | None = None, warnings: list[dict[str, Any]] | None = None,
    total: int | None = None,
) -> int:
    warnings = warnings or []
    if json_out:
        print(json.dumps({"valid": False, "code": code, "message": message, "errors": errors,
                          "warnings": warnings}, ensure_ascii=False))
        return EXIT_INVALID
    for i, problem in enumerate(errors):
        print(problem_line(problem, hints[i] if hints else None))
    for warning in warnings:
        print(f"warning: {problem_line(warning)}")
    count = total if total is not None else len(errors)
    listed = f" (the first {len(errors)} listed)" if count > len(errors) else ""
    print(f"invalid ({code}): {count} problem{'s' if count != 1 else ''}{listed}"
          f"{_warned(warnings)}")
    return EXIT_INVALID


def _warned(warnings: list[dict[str, Any]] | tuple[dict[str, Any], ...]) -> str:
    count = len(warnings)
    return f", {count} warning{'s' if count != 1 else ''}" if count else ""


def _report_valid(
    path: Path, plan: ChainPlan, json_out: bool, stray: list[dict[str, Any]]
) -> None:
    ids = [node.node_id for node in plan.nodes]
    warnings = [*stray, *plan.warnings]
    roots = [ids[i] for i in plan.roots]
    terminals = [ids[i] for i in plan.terminals]
    if json_out:
        print(json.dumps({
            "valid": True, "chain_id": plan.request.chain_id, "nodes": len(ids),
            "entry_node": ids[plan.entry], "roots": roots, "terminals": terminals,
            "timeout": plan.timeout, "errors": [], "warnings": warnings,
        }, ensure_ascii=False))
        return
    for warning in warnings:
        print(f"warning: {problem_line(warning)}")
    print(f"valid: {path.name}: {len(ids)} node{'s' if len(ids) != 1 else ''}, "
          f"roots {', '.join(roots)}; terminals {', '.join(terminals)}{_warned(warnings)}")
