"""Logical JSON sizes, counted without encoding (PROTOCOL.md §6 ``max_output_bytes``,
``max_chain_output_bytes``).

Layer: core (no I/O, no anyio, no clock). Imports only msgspec.

A value's *logical* size is the length of its JSON encoding as a message would carry it
(:func:`a2e_host.codec.encode_value`: compact, UTF-8, U+2028 / U+2029 escaped). It can be
far larger than the memory the value takes: ``[s] * 10**6`` holds one string a million
times, and a shared reference counts each time it appears, as encoding would write it.
Encoding such a value just to learn it is too big could take gigabytes, so this module
walks it instead:

* the walk is iterative (no recursion, whatever the nesting) and stops as soon as the
  count passes the limit, so its work is bounded by the limit, not by the value;
* a string's bytes are known without encoding when it is printable ASCII with no ``"``
  or ``\\``; otherwise that one string (at most the remaining allowance long) is encoded;
* containers add their brackets, colons and commas when they are entered, so the count
  is a true lower bound at every moment;
* the walk is resumable (:meth:`JsonSizer.advance`), so a caller on an event loop can
  measure a large value in slices and let other work run in between.

The count is exact for ``dict`` (any key type msgspec encodes), ``list``, ``tuple``,
``set``, ``frozenset``, ``str``, ``int``, ``float``, ``bool`` and ``None``. Any other value
(a Struct, a dataclass, ``bytes``, a datetime …) is measured by encoding that value alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import msgspec

__all__ = ["SHOWN_CHARS", "JsonSizer", "clip", "json_size_at_most", "quick_json_size"]

_encode = msgspec.json.Encoder().encode
_NULL_ENTRY = 7  # bytes of '{' ':null}' around one key of a one-entry object
_STRING_SLICE = 4096  # string bytes that cost one step of work
_SHORT_STRING = 256  # characters under which a string is checked rather than encoded
_ARRAYS = (list, tuple, set, frozenset)
_SCALARS = frozenset({int, float, bool, type(None)})
_QUICK_ELEMENTS = 1000  # elements, all containers together, a "small" value may hold
_QUICK_STRING = 512  # characters of the longest string in a "small" value
_LS, _PS = "\u2028".encode(), "\u2029".encode()


def _str_size(text: str) -> int:
    """Exact encoded size of one string (quotes included)."""
    if text.isascii():
        if (
            len(text) < _SHORT_STRING
            and text.isprintable()
            and '"' not in text
            and "\\" not in text
        ):
            return len(text) + 2
        return len(_encode(text))
    return len(_encode(text)) + 3 * (text.count("\u2028") + text.count("\u2029"))


def quick_json_size(value: Any) -> tuple[int, bool] | None:
    """``(size, non_finite)`` of a *small* value, or None when it is not small.

    Small: a scalar, a string of at most 512 characters, or dicts (string keys) and
    lists holding at most 1,000 elements in all (a shared one counts each time), strings
    of at most 512 characters and scalars. Such a value encodes to at most ~3 MiB, so it
    is simply encoded (msgspec, in C) and measured: the fast path for the outputs most
    nodes produce. Anything else needs :class:`JsonSizer`.

    Returns:
        The exact encoded size in bytes and whether a NaN / ±Infinity float was seen.

    Raises:
        TypeError, ValueError: as :func:`~a2e_host.codec.encode_value` would.
    """
    t = type(value)
    non_finite = False
    if t is dict or t is list:
        room = _QUICK_ELEMENTS - len(value)
        if room < 0:
            return None
        todo: list[Any] | None = None
        container: Any = value
        while True:
            if type(container) is dict:
                for key in container:
                    if type(key) is not str or len(key) > _QUICK_STRING:
                        return None
                container = container.values()
            for x in container:
                tx = type(x)
                if tx is str:
                    if len(x) > _QUICK_STRING:
                        return None
                elif tx is int or tx is bool or x is None:
                    pass
                elif tx is dict or tx is list:
                    room -= len(x)
                    if room < 0:
                        return None
                    if todo is None:
                        todo = [x]
                    else:
                        todo.append(x)
                elif tx is float:
                    non_finite = non_finite or not math.isfinite(x)
                else:
                    return None
            if not todo:
                break
            container = todo.pop()
    elif t is str:
        if len(value) > _QUICK_STRING:
            return None
    elif t is float:
        non_finite = not math.isfinite(value)
    elif t not in _SCALARS:
        return None
    data = _encode(value)
    size = len(data)
    if not data.isascii():
        size += 3 * (data.count(_LS) + data.count(_PS))
    return size, non_finite


def _key_size(key: Any) -> int:
    """Exact encoded size of one object key (quotes included, colon excluded)."""
    if type(key) is str:
        return _str_size(key)
    return len(_encode({key: None})) - _NULL_ENTRY


class JsonSizer:
    """Counts the JSON size of one value up to a limit, in resumable slices.

    Args:
        value: a JSON-like value (see the module docstring for the exact types).
        limit: bytes; the walk stops as soon as the count is above it.

    Attributes:
        size: bytes counted so far. Once :attr:`done`, it is the exact encoded size when
            :attr:`over` is false, and a lower bound above ``limit`` when it is true.
        over: the value's encoded size is above ``limit``.
        non_finite: a NaN or ±Infinity float was seen (JSON cannot carry it; encoding
            would write ``null``, counted as 4 bytes).
        done: the walk has finished (whole value counted, or stopped past the limit).

    Raises (from :meth:`advance`):
        TypeError: a value or key msgspec cannot encode.
        ValueError: an integer of more than 4,300 digits, or a string with a lone
            surrogate (``UnicodeEncodeError``).
    """

    __slots__ = ("limit", "size", "over", "non_finite", "done", "_stack")

    def __init__(self, value: Any, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.over = False
        self.non_finite = False
        self.done = False
        self._stack: list[Iterator[Any]] = [iter((value,))]

    def advance(self, steps: int) -> bool:
        """Count for about ``steps`` values (a string costs one step per 4 KiB).

        Returns:
            True when the walk is :attr:`done`; call again while it returns False.
        """
        stack = self._stack
        limit = self.limit
        total = self.size
        work = 0
        while stack:
            if work >= steps:
                self.size = total
                return False
            for v in stack[-1]:
                work += 1
                t = type(v)
                if t is str:
                    n = len(v) + 2
                    if n > limit - total:  # every character takes at least one byte
                        total += n
                        break
                    total += _str_size(v)
                    work += n // _STRING_SLICE
                elif t is int:
                    total += len(str(v))
                elif t is float:
                    if math.isfinite(v):
                        total += len(_encode(v))
                    else:
                        self.non_finite = True
                        total += 4
                elif t is bool:
                    total += 4 if v else 5
                elif v is None:
                    total += 4
                elif t is dict:
                    n = len(v)
                    if not n:
                        total += 2
                    else:
                        total += 2 * n + 1  # braces, colons, commas
                        for key in v:
                            total += _key_size(key)
                            if total > limit:
                                break
                        else:
                            stack.append(iter(v.values()))
                            work += n >> 4
                            break
                elif t in _ARRAYS:
                    n = len(v)
                    if not n:
                        total += 2
                    else:
                        total += n + 1  # brackets, commas
                        if total <= limit:
                            stack.append(iter(v))
                            break
                else:
                    total += len(_encode(v))
                if total > limit or work >= steps:
                    break
            else:
                stack.pop()
                continue
            if total > limit:
                stack.clear()
                self.over = True
        self.size = total
        self.done = True
        return True


def json_size_at_most(value: Any, limit: int) -> int | None:
    """The encoded size of ``value`` in bytes when it is at most ``limit``, else None.

    Work is bounded by ``limit`` (not by the value's logical size); nothing is encoded
    but single strings and leaves of types the walk does not know.

    Raises:
        TypeError, ValueError: see :class:`JsonSizer`.
    """
    sizer = JsonSizer(value, limit)
    while not sizer.advance(1 << 30):
        pass  # pragma: no cover - one call finishes
    return None if sizer.over else sizer.size


SHOWN_CHARS = 256
"""The most characters of a refused field an error's ``detail`` repeats."""


def clip(text: str, width: int = 60) -> str:
    """``repr(text)``, cut to about ``width`` characters (for error messages): a refusal
    never repeats a field it refuses in full, so a megabyte field never makes a megabyte
    answer."""
    if len(text) <= width:
        return repr(text)
    return repr(text[:width]) + f"… ({len(text):,} characters)"
