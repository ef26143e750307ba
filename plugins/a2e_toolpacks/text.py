"""The ``text`` tool pack: ``word_count``, ``lines``, ``regex_findall``, ``template``.

Definitions (exact, so outputs are predictable):

* ``word_count``: ``words = len(text.split())`` (runs of whitespace separate words),
  ``lines = len(text.splitlines())`` (each line ending counts one line, plus a final
  unterminated line; ``""`` has 0 lines, ``"a\\n"`` has 1), ``chars = len(text)`` (code
  points).
* ``lines``: ``text.splitlines()`` (line endings removed).
* ``regex_findall``: Python :mod:`re` syntax; ``matches`` lists whole matches, and
  ``groups`` each match's groups (empty lists when the pattern has no groups).
* ``template``: :meth:`string.Template.safe_substitute` (``$name`` / ``${name}``; unknown
  placeholders are left as written, never an error).
"""

from __future__ import annotations

import re
import string
from typing import Annotated, Any, TypedDict

import msgspec

from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError
from a2e_host.tools import Tool, ToolPack, tool

__all__ = ["PACK", "make_tools", "MAX_MATCHES"]

MAX_MATCHES = 10_000


class CountOut(TypedDict):
    words: int
    lines: int
    chars: int


class LinesOut(TypedDict):
    lines: list[str]
    count: int


class FindallOut(TypedDict):
    matches: list[str]
    groups: list[list[str | None]]
    count: int
    truncated: bool


class TemplateOut(TypedDict):
    text: str


@tool(blocking=False)
def word_count(text: str) -> CountOut:
    """{"text"} → {"words": whitespace-separated runs, "lines": len(splitlines()) (a
    final unterminated line counts; "a\\n" is 1 line), "chars": code points}."""
    return {"words": len(text.split()), "lines": len(text.splitlines()), "chars": len(text)}


@tool(blocking=False)
def lines(text: str) -> LinesOut:
    """{"text"} → {"lines": text.splitlines(), "count"}."""
    out = text.splitlines()
    return {"lines": out, "count": len(out)}


@tool
def regex_findall(
    text: str,
    pattern: str,
    ignore_case: bool = False,
    max_matches: Annotated[int, msgspec.Meta(gt=0)] = MAX_MATCHES,
) -> FindallOut:
    """{"text", "pattern", "ignore_case"?, "max_matches"?} → {"matches", "groups", "count",
    "truncated"} (Python re syntax; runs in a worker thread)."""
    try:
        rx = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise NodeError(f"regex_findall: invalid pattern {pattern!r}: {exc}") from None
    cap = min(max_matches, MAX_MATCHES)
    matches: list[str] = []
    groups: list[list[str | None]] = []
    truncated = False
    for m in rx.finditer(text):
        if len(matches) == cap:
            truncated = True
            break
        matches.append(m.group(0))
        groups.append(list(m.groups()))
    return {"matches": matches, "groups": groups, "count": len(matches), "truncated": truncated}


@tool(blocking=False)
def template(template: str, values: dict[str, Any]) -> TemplateOut:
    """{"template", "values"} → {"text"}: string.Template.safe_substitute; values that are
    not strings are inserted with str()."""
    return {"text": string.Template(template).safe_substitute(values)}


def make_tools(config: HostConfig) -> list[Tool]:
    """The text tools (they read nothing from ``config``)."""
    return [word_count, lines, regex_findall, template]


PACK = ToolPack(
    name="text",
    description="Text utilities: word_count, lines, regex_findall, template.",
    factory=make_tools,
)
