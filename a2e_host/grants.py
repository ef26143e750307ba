"""Who may use what: named tokens and per-principal tool grants, as configured.

Layer: core (pure, no I/O). Source: PROTOCOL.md §5 Durable runs (principals), §11 (tool
grants). A session's principal is the name of the ``[auth.tokens]`` entry it presented
(:mod:`a2e_host.session`). ``[auth.tool_grants]`` maps a principal to glob patterns of
tools (``alice = ["fs.*", "conformance.upper"]``), each matching a tool's ``<name>`` or
``<pack>.<name>`` (:func:`a2e_host.tool_patterns.tool_matches`): a principal
with grants may use only the tools a pattern matches — listed, called directly, named by
a chain's ``tool`` node or ``fallback``. A principal without grants, and every session
of a host without any, may use every tool.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .tool_patterns import tool_matches

__all__ = ["TOOL_DENIED", "ToolGrant", "check_grant_principals", "parse_named_tokens",
           "parse_tool_grants"]

TOOL_DENIED = "tool_denied"
"""The code of a refusal of a tool the principal was not granted (PROTOCOL.md §11)."""

MAX_PATTERN_CHARS = 200
"""The longest tool-name pattern a grant may hold."""


@dataclass(frozen=True, slots=True)
class ToolGrant:
    """The tools one principal may use.

    Attributes:
        principal: the principal's name (an ``[auth.tokens]`` entry).
        patterns: glob patterns of tools (``*``, ``?``, ``[seq]``; case-sensitive), each
            matching a tool's ``<name>`` or ``<pack>.<name>``.
    """

    principal: str
    patterns: tuple[str, ...]

    def allows(self, tool_name: str, pack: str = "") -> bool:
        """Whether a pattern matches ``tool_name`` or ``<pack>.<tool_name>`` (``pack``:
        the tool pack it was enabled from, ``ToolRegistry.pack_of``; memoised)."""
        return tool_matches(self.patterns, tool_name, pack)

    def refusal(self, tool_name: str) -> tuple[str, str]:
        """``(message, hint)`` of refusing ``tool_name``: the grant that lacks it, and how
        an operator grants it."""
        shown = tool_name if len(tool_name) <= 100 else tool_name[:100] + "…"
        granted = ", ".join(self.patterns) or "none"
        message = (f"tool {shown!r} is not granted to principal {self.principal!r} "
                   f"(its tool grants: {granted})")
        hint = (f"use a granted tool (tool/list/req lists them), or have an operator add a "
                f"pattern matching {shown!r} to {self.principal!r} in [auth.tool_grants] "
                "(A2E_TOOL_GRANTS) and restart the host")
        return message, hint


def _bad(key: str, source: str, expected: str, raw: Any) -> ValueError:
    return ValueError(f"{key} from {source} must be {expected}, got {raw!r}")


def parse_named_tokens(key: str, raw: Any, source: str) -> dict[str, str]:
    """Principal name → token, from a table or ``name:token,name:token``.

    Raises:
        ValueError: not that shape, an empty name or token, or one given twice.
    """
    if isinstance(raw, str):
        pairs: list[tuple[Any, Any]] = []
        for part in (p.strip() for p in raw.split(",")):
            if not part:
                continue
            name, sep, token = part.partition(":")
            if not sep:
                raise _bad(key, source, "name:token pairs, comma-separated", raw)
            pairs.append((name.strip(), token.strip()))
    elif isinstance(raw, dict):
        pairs = list(raw.items())
    else:
        raise _bad(key, source, "a table of principal name = token", raw)
    tokens: dict[str, str] = {}
    seen: set[str] = set()
    for name, token in pairs:
        if not isinstance(name, str) or not name or not isinstance(token, str) or not token:
            raise ValueError(
                f"{key} from {source}: every principal needs a non-empty name and token, "
                f"got {name!r}"
            )
        if name in tokens or token in seen:
            raise ValueError(
                f"{key} from {source}: principal {name!r} or its token is given twice; "
                "each principal needs its own token"
            )
        tokens[name] = token
        seen.add(token)
    return tokens


def parse_tool_grants(key: str, raw: Any, source: str) -> dict[str, tuple[str, ...]]:
    """Principal name → tool-name patterns, from a table (TOML ``[auth.tool_grants]``,
    ``alice = ["fs.*", "conformance.upper"]``) or ``name:pattern|pattern,name:pattern``
    (the environment's ``A2E_TOOL_GRANTS=alice:fs.*|conformance.upper,bob:json.*``).

    An empty list is a grant of no tool at all.

    Raises:
        ValueError: not that shape, an empty name or pattern, a pattern over
            :data:`MAX_PATTERN_CHARS` characters, or a principal given twice.
    """
    expected = "a table of principal name = [tool-name patterns]"
    if isinstance(raw, str):
        entries: list[tuple[Any, Any]] = []
        for part in (p.strip() for p in raw.split(",")):
            if not part:
                continue
            name, sep, patterns = part.partition(":")
            if not sep:
                raise _bad(key, source, "name:pattern|pattern pairs, comma-separated", raw)
            entries.append((name.strip(), [p.strip() for p in patterns.split("|") if p.strip()]))
    elif isinstance(raw, dict):
        entries = list(raw.items())
    else:
        raise _bad(key, source, expected, raw)
    grants: dict[str, tuple[str, ...]] = {}
    for name, patterns in entries:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{key} from {source}: every grant needs a principal name, "
                             f"got {name!r}")
        if name in grants:
            raise ValueError(f"{key} from {source}: principal {name!r} is given twice; "
                             "list all its patterns in one entry")
        if not isinstance(patterns, list | tuple) or not all(
            isinstance(p, str) and 0 < len(p) <= MAX_PATTERN_CHARS for p in patterns
        ):
            raise ValueError(
                f"{key} from {source}: the grant of {name!r} must be a list of non-empty "
                f"tool-name patterns of at most {MAX_PATTERN_CHARS} characters, got "
                f"{patterns!r}")
        grants[name] = tuple(patterns)
    return grants


def check_grant_principals(
    grants: Mapping[str, tuple[str, ...]], principals: Mapping[str, Any] | set[str]
) -> None:
    """Every granted principal must be one a session can be.

    Args:
        grants: the configured tool grants.
        principals: the names a session may authenticate as.

    Raises:
        ValueError: a grant names a principal no token gives (a typo would otherwise
            silently leave the real principal every tool).
    """
    for name in grants:
        if name not in principals:
            known = ", ".join(sorted(principals)) or "none"
            raise ValueError(
                f"[auth.tool_grants] names principal {name!r}, which no token gives "
                f"(principals: {known}); add it to [auth.tokens] or fix the name")
