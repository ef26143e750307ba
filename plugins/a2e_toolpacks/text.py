"""The ``text`` tool pack: ``word_count``, ``lines``, ``regex_findall``, ``template``.

Definitions (exact, so outputs are predictable):

* ``word_count``: ``words = len(text.split())`` (runs of whitespace separate words),
  ``lines = len(text.splitlines())`` (each line ending counts one line, plus a final
  unterminated line; ``""`` has 0 lines, ``"a\\n"`` has 1), ``chars = len(text)`` (code
  points).
* ``lines``: ``text.splitlines()`` (line endings removed).
* ``regex_findall``: the syntax of the `regex <https://pypi.org/project/regex/>`_ package,
  which is Python :mod:`re` syntax plus a few extensions; ``matches`` lists whole matches,
  and ``groups`` each match's groups (empty lists when the pattern has no groups).
  Bounded (issue "ReDoS"): compiling and matching run in a worker thread that releases
  the GIL while matching, under a time budget of ``REGEX_TIMEOUT`` seconds or what the
  chain's deadline leaves, whichever is smaller; a pattern whose counted repeats expand
  to more than ``MAX_PATTERN_SIZE`` elements (``(?:a{1000}){1000}``) is refused before
  it is compiled, since the engine expands them in memory.
* ``template``: :meth:`string.Template.safe_substitute` (``$name`` / ``${name}``; unknown
  placeholders are left as written, never an error).

Bounded (issue "values built before the output cap"): ``lines``, ``regex_findall`` and
``template`` can return more than they are given (one placeholder repeated, a group
capturing the whole text at every match, an empty string per line); each computes its
output's size (a lower bound) before building it and refuses an output over the node's
``max_output_bytes`` (``chain_limit``). Work proportional to a long text runs in a worker
thread, and ``word_count`` counts without building a list of the words.
"""

from __future__ import annotations

import re
import string
from functools import partial
from typing import Annotated, Any, TypedDict

import anyio
import anyio.to_thread
import msgspec
import regex

from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError
from a2e_host.sizes import json_size_at_most
from a2e_host.tools import Tool, ToolPack, tool

from ._caps import INLINE_CHARS, offload, output_cap, refuse_output

__all__ = ["PACK", "make_tools", "MAX_MATCHES", "REGEX_TIMEOUT", "MAX_PATTERN_SIZE"]

MAX_MATCHES = 10_000
REGEX_TIMEOUT = 1.0
"""Seconds one ``regex_findall`` may spend compiling and matching (less when the chain's
deadline is nearer)."""
MAX_PATTERN_SIZE = 20_000
"""Elements a pattern may compile to, counted repeats expanded (``a{100}`` is 100): the
engine builds ``(?:x{n}){m}`` as n × m nodes, about 250 bytes each."""
_MAX_GROUP_DEPTH = 200


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


@tool
async def word_count(text: str) -> CountOut:
    """{"text"} → {"words": whitespace-separated runs, "lines": len(splitlines()) (a
    final unterminated line counts; "a\\n" is 1 line), "chars": code points}."""
    return await offload(len(text), _count, text)


# What str.splitlines() ends a line at ("\r\n" is one ending).
_LINE_ENDS = ("\n", "\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


def _line_ends(text: str) -> tuple[int, int]:
    """``(line endings, their characters)`` in ``text``, as str.splitlines() sees them."""
    chars = sum(text.count(end) for end in _LINE_ENDS)
    crlf = text.count("\r\n")
    return chars - crlf, chars


def _line_count(text: str) -> int:
    """``len(text.splitlines())`` without building the list."""
    if not text:
        return 0
    ends, _ = _line_ends(text)
    return ends + (0 if text[-1] in _LINE_ENDS else 1)


def _count(text: str) -> CountOut:
    words = 0
    for i in range(0, len(text), INLINE_CHARS):  # split a slice at a time: bounded memory
        words += len(text[i : i + INLINE_CHARS].split())
        if i and not text[i - 1].isspace() and not text[i].isspace():
            words -= 1  # one word across the slice boundary, counted twice
    return {"words": words, "lines": _line_count(text), "chars": len(text)}


@tool
async def lines(text: str) -> LinesOut:
    """{"text"} → {"lines": text.splitlines(), "count"}; refused (``chain_limit``) when
    the list would be over ``max_output_bytes`` (each line costs 3 bytes more than its
    text: quotes and a comma)."""
    count = _line_count(text)
    _, end_chars = _line_ends(text)
    least = len(text) - end_chars + 3 * count + len('{"lines":[],"count":0}')
    if least > output_cap():
        refuse_output("lines", least, f"the list of {count} lines", at_least=True)
    out = await offload(len(text), str.splitlines, text)
    return {"lines": out, "count": len(out)}


@tool
async def regex_findall(
    text: str,
    pattern: str,
    ignore_case: bool = False,
    max_matches: Annotated[int, msgspec.Meta(gt=0)] = MAX_MATCHES,
) -> FindallOut:
    """{"text", "pattern", "ignore_case"?, "max_matches"?} → {"matches", "groups", "count",
    "truncated"} (``regex`` package syntax; runs in a worker thread under a time budget of
    ``REGEX_TIMEOUT`` s or the chain's time left, whichever is smaller)."""
    size = pattern_size(pattern)
    if size > MAX_PATTERN_SIZE:
        raise NodeError(
            f"regex_findall: pattern {_short(pattern)} is too large: it compiles to more "
            f"than {MAX_PATTERN_SIZE} elements (counted repeats such as {{1000}} multiply "
            f"what they repeat); use smaller {{n}} counts, + or * instead, or a shorter "
            f"pattern"
        )
    left = anyio.current_effective_deadline() - anyio.current_time()
    budget = max(0.001, min(REGEX_TIMEOUT, left))
    cap = min(max_matches, MAX_MATCHES)
    work = partial(_findall, text, pattern, ignore_case, cap, budget, output_cap())
    return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)


def _findall(
    text: str, pattern: str, ignore_case: bool, cap: int, budget: float, max_bytes: int
) -> FindallOut:
    try:
        rx = regex.compile(pattern, regex.IGNORECASE if ignore_case else 0, cache_pattern=False)
    except regex.error as exc:
        raise NodeError(f"regex_findall: invalid pattern {_short(pattern)}: {exc}") from None
    except RecursionError:
        raise NodeError(
            f"regex_findall: pattern {_short(pattern)} nests too deeply; simplify it"
        ) from None
    matches: list[str] = []
    groups: list[list[str | None]] = []
    truncated = False
    # Output bytes so far, a lower bound: a group may capture the whole text at every
    # match (lookarounds), so sizes are counted from spans before anything is sliced.
    least = len('{"matches":[],"groups":[],"count":0,"truncated":false}')
    ngroups = rx.groups
    try:
        for m in rx.finditer(text, timeout=budget, concurrent=True):
            if len(matches) == cap:
                truncated = True
                break
            start, end = m.span()
            least += end - start + 6  # quotes, commas, the group list's brackets
            for g in range(1, ngroups + 1):
                start, end = m.span(g)
                least += end - start + 3 if start >= 0 else 5  # "…", or null,
            if least > max_bytes:
                refuse_output(
                    "regex_findall",
                    least,
                    f"the matches and groups of the first {len(matches) + 1} matches",
                    at_least=True,
                )
            matches.append(m.group(0))
            groups.append(list(m.groups()))
    except TimeoutError:
        raise NodeError(
            f"regex_findall: pattern {_short(pattern)} did not finish within its "
            f"{budget:.3g} s budget over {len(text)} characters of text (nested repeats "
            f"such as (a|a)+ backtrack exponentially); simplify the pattern or shorten "
            f"the text",
            details={"timeout": round(budget, 3)},
        ) from None
    return {"matches": matches, "groups": groups, "count": len(matches), "truncated": truncated}


def _short(pattern: str) -> str:
    return repr(pattern) if len(pattern) <= 80 else repr(pattern[:77] + "...")


_COUNT = re.compile(r"\{(\d*)(?:,(\d*))?\}")


def pattern_size(pattern: str) -> int:
    """An upper estimate of the elements ``pattern`` compiles to: every literal, class,
    escape or group counts 1, times the minimum of each counted repeat (``{n}``, ``{n,}``,
    ``{n,m}``) around it; capped just above :data:`MAX_PATTERN_SIZE`. Groups nested more
    than 200 deep count as too large.

    A scanner, not a parser: it may count a few characters of group syntax, which only
    makes the estimate larger.
    """
    over = MAX_PATTERN_SIZE + 1
    sizes = [0]  # per open group: the size of its content so far
    last = 0  # the size of the last element, which a quantifier repeats
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            j = i + 2
            if j < n and pattern[i + 1] in "pPNxuUgk" and pattern[j] in "{<":
                close = pattern.find("}" if pattern[j] == "{" else ">", j)
                j = n if close < 0 else close + 1
            last, i = 1, j
        elif c == "[":
            j = i + 1
            if j < n and pattern[j] == "^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            last, i = 1, j + 1
        elif c == "(":
            sizes.append(0)
            if len(sizes) > _MAX_GROUP_DEPTH:
                return over
            i += 1
            continue
        elif c == ")" and len(sizes) > 1:
            last, i = min(sizes.pop() + 1, over), i + 1
        elif c == "{" and (m := _COUNT.match(pattern, i)) and (m.group(1) or m.group(2)):
            times = max(int(m.group(1) or 0), 1) if len(m.group(1)) < 9 else over
            sizes[-1] = min(sizes[-1] + last * (times - 1), over)
            last = min(last * times, over)
            i = m.end()
            continue
        else:
            last, i = 1, i + 1
        sizes[-1] = min(sizes[-1] + last, over)
    return min(sum(sizes), over)


@tool
async def template(template: str, values: dict[str, Any]) -> TemplateOut:
    """{"template", "values"} → {"text"}: string.Template.safe_substitute; values that are
    not strings are inserted with str(). Refused (``chain_limit``) when the text would be
    over ``max_output_bytes``, computed from the placeholders before substituting."""
    size = len(template) + sum(len(v) if type(v) is str else 64 for v in values.values())
    return await offload(size, _substitute, template, values, output_cap())


def _substitute(text: str, values: dict[str, Any], max_bytes: int) -> TemplateOut:
    tpl = string.Template(text)
    lengths: dict[str, int] = {}
    chars = len('{"text":""}')
    for m in tpl.pattern.finditer(text):
        name = m.group("named") or m.group("braced")
        if name is None or name not in values:
            grown = 1 if m.group("escaped") is not None else len(m.group(0))
        elif name in lengths:
            grown = lengths[name]
        else:
            grown = lengths[name] = _inserted_length(name, values[name], max_bytes)
        chars += grown - len(m.group(0))
    chars += len(text)
    if chars > max_bytes:  # every character is at least one byte
        refuse_output("template", chars, "the text", at_least=True)
    return {"text": tpl.safe_substitute(values)}


def _inserted_length(name: str, value: Any, max_bytes: int) -> int:
    """Characters ``str(value)`` inserts, computed without building a huge string."""
    if type(value) is str:
        return len(value)
    if json_size_at_most(value, max_bytes) is None:  # str() is as long as JSON, roughly
        refuse_output(
            "template", max_bytes + 1, f"the value of ${name} written out", at_least=True
        )
    return len(str(value))


def make_tools(config: HostConfig) -> list[Tool]:
    """The text tools (they read nothing from ``config``)."""
    return [word_count, lines, regex_findall, template]


PACK = ToolPack(
    name="text",
    description="Text utilities: word_count, lines, regex_findall, template.",
    factory=make_tools,
)
