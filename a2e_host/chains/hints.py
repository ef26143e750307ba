""""Did you mean" for validation problems, in time independent of how many names there are.

Layer: core (pure, no anyio). Source: PROTOCOL.md §4 (a problem's message may suggest the
closest declared name).

Among many names a lookup goes through an index of one-character deletions (names within
about two edits), and a validation makes only the first :data:`MAX_SUGGESTIONS` lookups
(every problem is still reported, later ones without a suggestion).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["MAX_SUGGESTIONS", "Suggester"]

MAX_SUGGESTIONS = 64
""""Did you mean" lookups one validation makes; later problems get none."""

_FEW_NAMES = 256  # up to this many names, a lookup compares the word with each one
_LONGEST_INDEXED = 64  # among many names, longer words and names are never suggested
_CANDIDATES = 64  # names ranked by one lookup among many


class Suggester:
    """"Did you mean" over one set of names, in time independent of the set's size.

    Up to 256 names, the word is compared with each (difflib, cutoff 0.6). Among more,
    the names are indexed once by themselves and each one-character deletion of them, so
    a lookup finds the names within about two edits of the word (a substitution,
    insertion, deletion or swap) in ``len(word)`` dict lookups, and ranks at most 64 of
    them with difflib. Words and names over 64 characters are then never suggested.

    Args:
        names: the names to suggest from, in the order ties are broken.
    """

    __slots__ = ("names", "_index")

    def __init__(self, names: Iterable[str]) -> None:
        self.names = list(names)
        self._index: dict[str, list[str]] | None = None

    def best(self, word: str) -> str | None:
        """The name closest to ``word``, None when none is close enough."""
        if len(self.names) <= _FEW_NAMES:
            close = difflib.get_close_matches(word, self.names, n=1, cutoff=0.6)
            return close[0] if close else None
        if len(word) > _LONGEST_INDEXED:
            return None
        index = self._index if self._index is not None else self._build()
        candidates: dict[str, None] = {}
        for variant in _deletions(word):
            for name in index.get(variant, ()):
                candidates[name] = None
                if len(candidates) >= _CANDIDATES:
                    break
            if len(candidates) >= _CANDIDATES:
                break
        close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
        return close[0] if close else None

    def _build(self) -> dict[str, list[str]]:
        index: dict[str, list[str]] = {}
        entry = index.setdefault
        for name in self.names:
            if len(name) <= _LONGEST_INDEXED:
                entry(name, []).append(name)
                for i in range(len(name)):  # a repeated letter may list a name twice
                    entry(name[:i] + name[i + 1 :], []).append(name)
        self._index = index
        return index


def _deletions(word: str) -> set[str]:
    """``word`` and every string one character shorter that it contains."""
    return {word, *(word[:i] + word[i + 1 :] for i in range(len(word)))}
