"""A node's expression context: :class:`ContextView` (PROTOCOL.md §3).

Layer: core (no I/O, no clock, no anyio); imports nothing from the package.

The chain's shared context (``input`` and one ``{"output", "status"}`` per finished node)
grows as nodes finish; each node's expressions see it plus the node's own keys
(``output`` / ``item`` / ``index`` / ``error``) through a view, never a copy. Where an
expression uses the root *as a value*, the interpreter materialises it once with
:meth:`ContextView.as_dict`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["ContextView"]


class ContextView(Mapping[str, Any]):
    """A node's expression context: its own keys over the chain's shared context.

    The shared context (``input`` and one ``{"output", "status"}`` per finished node) grows
    as nodes finish; each node sees it plus its own ``output`` / ``item`` / ``index`` /
    ``error`` without copying it (PROTOCOL.md §3). Own keys win over shared ones.

    Args:
        base: the chain's shared context (read, never written).
        own: this node's keys.
    """

    __slots__ = ("_base", "_own")

    def __init__(self, base: Mapping[str, Any], own: dict[str, Any]) -> None:
        self._base = base
        self._own = own

    def get(self, key: Any, default: Any = None) -> Any:
        own = self._own
        if key in own:
            return own[key]
        return self._base.get(key, default)

    def __getitem__(self, key: str) -> Any:
        own = self._own
        if key in own:
            return own[key]
        return self._base[key]

    def __contains__(self, key: object) -> bool:
        return key in self._own or key in self._base

    def __iter__(self) -> Iterator[str]:
        own = self._own
        for key in list(self._base):
            if key not in own:
                yield key
        yield from own

    def __len__(self) -> int:
        base = self._base
        return len(base) + sum(1 for key in self._own if key not in base)

    def as_dict(self) -> dict[str, Any]:
        """The whole context as one plain dict (shallow: the values are shared)."""
        merged = dict(self._base)
        merged.update(self._own)
        return merged

    def snapshot(self) -> ContextView:
        """A view over shallow copies of both layers, safe to read from another thread
        while the chain keeps adding finished nodes to the shared context."""
        return ContextView(dict(self._base), dict(self._own))

    def __repr__(self) -> str:
        return f"ContextView({self.as_dict()!r})"
