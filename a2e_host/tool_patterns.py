"""Tool-name patterns: the one matcher of ``[auth.tool_grants]``, ``[secrets]`` ``tools``
and ``remote_tools``.

Layer: core (pure, no I/O). A pattern is a glob (:func:`fnmatch.fnmatchcase`: ``*``,
``?``, ``[seq]``; case-sensitive) that matches a tool by its name (``upper``) or by
``<pack>.<name>`` (``conformance.upper``), the pack being the tool pack it was enabled
from (:meth:`a2e_host.tools.ToolRegistry.pack_of`): ``conformance.*`` is every tool of
that pack, ``upper`` or ``*.upper`` the tool itself. A tool registered outside a pack
(``pack`` empty) is matched by its name alone. Source: PROTOCOL.md §5 (secrets), §11
(tool grants); README "Configuration".
"""

from __future__ import annotations

from fnmatch import fnmatchcase

__all__ = ["tool_matches"]


def tool_matches(patterns: tuple[str, ...], name: str, pack: str = "") -> bool:
    """Whether a glob of ``patterns`` matches the tool ``name`` of ``pack``.

    Args:
        patterns: globs, each matched against ``name`` and, when ``pack`` is set,
            ``f"{pack}.{name}"``.
        name: the tool's name.
        pack: the tool pack it was enabled from; ``""`` when none (or unknown).

    Returns:
        True when a pattern matches either form. Not memoised: ``name`` may come from a
        request (a node's ``name`` or ``fallback``), and a cache keyed by it would keep
        an agent's strings; :func:`fnmatch.fnmatchcase` caches the compiled patterns.
    """
    qualified = f"{pack}.{name}" if pack else ""
    return any(fnmatchcase(name, p) or (qualified and fnmatchcase(qualified, p))
               for p in patterns)
