"""What the commands share: loading the configuration the way the CLI documents it, the
capabilities a local run's session asks for, and the CLI's extra hints on refusals.

Layer: command support (no I/O beyond reading the configuration file).

``--tools +PACK``: when every pack named on the command line starts with ``+``, they are
added to the packs that would be enabled without the flag: the configuration's
(``A2E_TOOLS`` or the file's ``tools``), or else the command's defaults
(:data:`~a2e_host.config.LOCAL_TOOL_PACKS` for ``run``, ``validate`` and ``tools``; none
for ``serve`` and ``stdio``). ``--tools a,b`` without ``+`` replaces them, as before.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config import HostConfig
    from ..runtime.host import Host

__all__ = [
    "PLUS",
    "load_command_config",
    "local_capabilities",
    "problem_hint",
    "problem_line",
    "refusal_hint",
]

PLUS = "+"
"""Prefix of a ``--tools`` entry that adds a pack instead of replacing the list."""


def load_command_config(
    config_path: str | Path | None,
    overrides: Mapping[str, Any],
    *,
    local_defaults: bool,
    environ: Mapping[str, str] | None = None,
) -> HostConfig:
    """:func:`~a2e_host.config.load_config` plus the CLI's ``+PACK`` rule and defaults.

    Args:
        config_path: the TOML file, or None.
        overrides: CLI values by :class:`~a2e_host.config.HostConfig` field name.
        local_defaults: enable :data:`~a2e_host.config.LOCAL_TOOL_PACKS` when no pack is
            named anywhere (``run``, ``validate``, ``tools``).
        environ: the environment; None reads :data:`os.environ`.

    Raises:
        ValueError: a bad file, variable or value (the message names it).
    """
    import msgspec

    from ..config import LOCAL_TOOL_PACKS, load_config

    overrides = dict(overrides)
    asked = tuple(overrides.get("tools") or ())
    adding = bool(asked) and all(name.startswith(PLUS) for name in asked)
    if adding:
        del overrides["tools"]
    elif asked:
        overrides["tools"] = tuple(name.removeprefix(PLUS) for name in asked)
    config = load_config(config_path, overrides=overrides, environ=environ)
    base = config.tools or (LOCAL_TOOL_PACKS if local_defaults else ())
    if adding:
        extra = [name.removeprefix(PLUS) for name in asked]
        if not all(extra):
            raise ValueError("--tools '+' needs a pack name after it, e.g. --tools +mypack")
        tools = tuple(dict.fromkeys([*base, *extra]))
    else:
        tools = base
    if tools != config.tools:
        config = msgspec.structs.replace(config, tools=tools)
    return config


def local_capabilities(host: Host) -> tuple[str, ...]:
    """The capabilities a local session asks for: every one ``host`` serves and every
    gate it offers, i.e. what its configuration allows (``proc`` only with an
    ``allow_proc`` executable; PROTOCOL.md §2, §8).

    ``run`` asks for exactly these in its handshake and ``validate`` checks a chain as if
    they were granted, so the two agree on every chain.
    """
    return (*host.served_capabilities(), *host.gates())


def refusal_hint(details: Mapping[str, Any]) -> str:
    """How to raise the ceiling a ``chain_limit`` refusal names, or ``""``.

    Args:
        details: the error's (or the problem's) ``details``: ``{ceiling, scope, limit,
            requested}`` (PROTOCOL.md §6).
    """
    ceiling = details.get("ceiling")
    if not isinstance(ceiling, str) or not ceiling.startswith("max_"):
        return ""
    scope = details.get("scope", "host")
    if scope not in ("host", "", None):
        return ""
    requested = details.get("requested")
    value = requested if isinstance(requested, int) and not isinstance(requested, bool) else "N"
    return (f"raise the host's ceiling with A2E_{ceiling.upper()}={value} or "
            f"'{ceiling} = {value}' under [limits] in the --config file")


def problem_hint(
    problem: Mapping[str, Any], *, node_kinds: Mapping[str, str], allow_proc: Collection[str]
) -> str:
    """The fix to show beside one validation problem on the command line.

    The host's ``hint`` speaks to an agent on the wire; for a local run it is completed
    (a ceiling: how to raise it) or replaced (a proc node refused for want of the ``proc``
    capability: ``--allow-proc``).

    Args:
        problem: one entry of ``error.details.errors`` (``code``, ``node_id``, ``field``,
            ``hint``, and for ``chain_limit`` the ceiling's details).
        node_kinds: node id → kind of the chain checked.
        allow_proc: the configuration's ``allow_proc``.

    Returns:
        The fix, or ``""`` when there is none.
    """
    hint = str(problem.get("hint") or "")
    if problem.get("code") == "chain_limit":
        raise_it = refusal_hint(problem)
        if raise_it:
            return f"{hint}; or {raise_it}" if hint else raise_it
        return hint
    kind = node_kinds.get(str(problem.get("node_id", "")))
    if kind == "proc" and problem.get("field") == "kind" and not allow_proc:
        return ("proc nodes are off until an executable is allowed: pass --allow-proc NAME, "
                "or set allow_proc in the --config file")
    return hint


def problem_line(problem: Mapping[str, Any], hint: str | None = None) -> str:
    """One problem or warning as the CLI prints it: ``node 'n' field 'f': message (fix:
    hint)`` (``field 'f': …`` for one of the request itself); ``hint`` replaces the
    problem's own."""
    node_id, field = problem.get("node_id", ""), problem.get("field", "")
    where = f"node {node_id!r} field {field!r}" if node_id else f"field {field!r}"
    if hint is None:
        hint = problem.get("hint")
    fix = f" (fix: {hint})" if hint else ""
    return f"{where}: {problem['message']}{fix}"
