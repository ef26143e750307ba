"""What chain validation asks the host about its tools, skills and proc policy.

Layer: core (a Protocol, no I/O). Implemented by
:class:`~a2e_host.chains.toolbox.Toolbox` and, for skill files, by the skill loader's
catalog (:mod:`a2e_host.chains.skills`). Source: PROTOCOL.md §4 (unknown names), §8.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from .messages import ChainNode

__all__ = ["Catalog"]


class Catalog(Protocol):
    """What validation needs to know about the host's tools, skills and proc policy.

    A catalog may also have ``pack_providing(tool_name) -> str | None``: the installed
    tool pack, not enabled, that provides a tool; the problem of an unknown tool then
    names that pack and how to enable it. It is asked only for unknown tools.
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
