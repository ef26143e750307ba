"""What chain validation asks the host about its tools, skills and proc policy.

Layer: core (a Protocol, no I/O). Implemented by
:class:`~a2e_host.chains.toolbox.Toolbox` and, for skill files, by the skill loader's
catalog (:mod:`a2e_host.chains.skills`). Source: PROTOCOL.md §4 (unknown names), §8.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Protocol

from .messages import ChainNode

__all__ = ["Catalog", "Signature"]


@dataclass(frozen=True, slots=True)
class Signature:
    """What a tool or skill declares about its input and output, and what the host holds it
    to, for the static checks (PROTOCOL.md §4).

    Attributes:
        input_schema / output_schema: JSON Schemas (dicts, or True for anything); they must
            not change once given (their types are cached by identity).
        input_enforced: the input is converted to ``input_schema`` before the call (msgspec):
            a field that does not fit fails the node, so a chain sure to give one is refused.
            False: a mismatch is only a warning.
        required_enforced: an input lacking a ``required`` field fails the node (true
            wherever ``input_enforced`` is; a declared skill checks only this).
        output_enforced: the output is converted to ``output_schema``, so an object in it
            has exactly its declared fields (a field it lacks reads as null).
    """

    input_schema: Any
    output_schema: Any
    input_enforced: bool = True
    required_enforced: bool = True
    output_enforced: bool = True


class Catalog(Protocol):
    """What validation needs to know about the host's tools, skills and proc policy.

    A catalog may also have ``pack_providing(tool_name) -> str | None``: the installed
    tool pack, not enabled, that provides a tool; the problem of an unknown tool then
    names that pack and how to enable it. It is asked only for unknown tools.

    A catalog may also have ``pack_of(tool_name) -> str``: the tool pack a registered
    tool was enabled from (``""`` for none), so that a tool grant's pattern matches
    ``<pack>.<name>`` (:mod:`a2e_host.tool_patterns`); without it, names alone.

    A catalog may also have ``signature_of(registry, name) -> Signature | None``: the
    schemas of a registered tool (``registry`` ``"tool"``) or skill (``"skill"``), as a
    kind's ``registry`` column names them, None when it declares none. Validation then
    checks node inputs against them (PROTOCOL.md §4 static checks); without it those
    checks are not made.

    A catalog may also have ``resolve_skill(ref) ->``
    :class:`~a2e_host.chains.skill_versions.Resolution`: what a skill reference
    (``name`` or ``name@version``) runs, a deprecated version's warning, or why nothing
    may run (unknown, retired, only drafts) with a hint. Without it a skill node's name
    must be one of :meth:`skill_names` (PROTOCOL.md §9 Versions and lifecycle).
    """

    def tool_names(self) -> Collection[str]:
        """Names of the registered tools."""
        ...

    def skill_names(self) -> Collection[str]:
        """Names of the registered skills."""
        ...

    def check_proc(self, node: ChainNode) -> str | None:
        """A static refusal message for a ``proc`` node (e.g. executable not allowed), or
        None when the policy does not refuse it before it runs."""
        ...
