"""Types in words, for the ``expected`` and ``inferred`` of a static-check problem.

Layer: core (pure). Source: PROTOCOL.md §4 (static checks): the words are the JSON kinds
(``null``, ``boolean``, ``integer``, ``number``, ``float``, ``string``, ``array``,
``object``), joined with ``or``; ``array of …``, ``object with fields …``, ``one of …``
for enums and literals, ``any`` for what is not known.
"""

from __future__ import annotations

from typing import Any

from .schema_types import (
    ALL,
    ARRAY,
    BOOLEAN,
    FLOAT,
    INTEGER,
    NULL,
    NUMBER,
    OBJECT,
    STRING,
    SchemaType,
    kind_of,
    scalar,
)

__all__ = ["describe", "describe_value"]

_WIDTH = 100


def describe(t: SchemaType, depth: int = 2) -> str:
    """``t`` in words for a problem's ``expected`` / ``inferred``: ``"integer"``,
    ``"string or null"``, ``"array of string"``, ``"object with fields a, b"``,
    ``"one of 'x', 'y'"``, ``"any"``; at most about 100 characters."""
    text = _describe(t, depth)
    return text if len(text) <= _WIDTH else text[: _WIDTH - 1] + "…"


def _describe(t: SchemaType, depth: int) -> str:
    if t.kinds == ALL:
        return "any"
    if t.kinds == 0:
        return "nothing"
    if t.values is not None and len(t.values) == 1:
        return describe_value(next(iter(t.values))[1])
    if t.values is not None and 0 < len(t.values) <= 6:
        return "one of " + ", ".join(sorted(_literal(v) for _, v in t.values))
    words = []
    kinds = t.kinds
    if kinds & NUMBER == NUMBER:
        words.append("number")
    elif kinds & INTEGER:
        words.append("integer")
    elif kinds & FLOAT:
        words.append("float")
    if kinds & STRING:
        words.append("string")
    if kinds & BOOLEAN:
        words.append("boolean")
    if kinds & ARRAY:
        inner = t.items
        if inner is not None and inner.kinds != ALL and depth > 0:
            part = _describe(inner, depth - 1)
            words.append(f"array of ({part})" if " or " in part else f"array of {part}")
        else:
            words.append("array")
    if kinds & OBJECT:
        if t.props and depth > 0:
            names = sorted(t.props)
            listed = ", ".join(names[:5]) + (", …" if len(names) > 5 else "")
            words.append(f"object with fields {listed}")
        else:
            words.append("object")
    if kinds & NULL:
        words.append("null")
    return " or ".join(words)


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return repr(value if len(value) <= 24 else value[:24] + "…")
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def describe_value(value: Any) -> str:
    """A literal in words: its kind and, for a scalar, the value (``"string 'one'"``)."""
    kind = kind_of(value)
    if kind & (ARRAY | OBJECT) or kind == ALL:
        return _describe(scalar(kind), 0)
    if kind == NULL:
        return "null"
    return f"{_describe(scalar(kind), 0)} {_literal(value)}"
