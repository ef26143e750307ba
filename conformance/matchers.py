"""The matcher language: how a case says what a received value must look like.

Layer: pure. No I/O, no clock; imports only the standard library and jmespath.

A *matcher* is plain JSON. Anything that is not an operator object is a literal:

=========================================  =============================================
matcher                                    matches
=========================================  =============================================
``3``, ``"x"``, ``true``, ``null``         an equal value (``1 == 1.0``; ``true`` is not ``1``)
``[m0, m1]``                               a list of exactly that length, item by item
``{"k": m, ...}``                          an object with exactly those keys (see ``$partial``)
``{"$partial": {"k": m}}``                 an object with at least those keys; extra keys allowed
``{"$absent": true}``                      (as an object value) the key is not there
``{"$optional": m}``                       (as an object value) absent, or present matching m
``{"$any": true}``                         any value, even ``null``, but the key must be there
``{"$type": "str"}``                       a JSON type: str int float number bool null list dict,
                                           or a list of them (``["str", "null"]``)
``{"$regex": "^[0-9a-f]{8}$"}``            a string in which the pattern is found (``re.search``)
``{"$approx": 1.5, "tol": 0.1}``           a number within ``tol`` (default 1e-9) of the value
``{"$range": [lo, hi]}``                   a number ``lo <= x <= hi``; ``null`` = unbounded side;
                                           a bound may be ``{"$ref": ...}``
``{"$len": m}``                            a str/list/dict whose length matches ``m``
``{"$oneOf": [m, ...]}``                   a value matching at least one of the matchers
``{"$allOf": [m, ...]}``                   a value matching every matcher
``{"$not": m}``                            a value not matching ``m``
``{"$unordered": [m, ...]}``               a list of that length, matched as a multiset
``{"$contains": [m, ...]}``                a list holding distinct items matching each ``m``
``{"$each": m}``                           a list whose every item matches ``m``
``{"$seq": [m | {"$group": [...]}, ...]}`` a list in order, where a ``$group`` stands for
                                           ``len(group)`` consecutive items in any order
``{"$has": m}``                            the value, or any value nested in it, matches ``m``
``{"$ref": "expr"}``                       equal to a case variable (a JMESPath over them)
``{"$bind": "name"}``                      any value; it is stored as variable ``name``
``{"$literal": v}``                        exactly ``v`` (escapes objects with ``$`` keys)
=========================================  =============================================

Usage::

    problems = match(expected, actual, variables)   # [] when it matches
    problems == ["$.outputs.a.sum: expected 3, got 4"]

Each problem names the JSON path of the mismatch, so a failure report can be read
without the transcript.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import jmespath

__all__ = ["MatcherError", "match", "resolve_ref", "OPERATORS"]

_TYPES: dict[str, Callable[[Any], bool]] = {
    "str": lambda v: isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, float),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "list": lambda v: isinstance(v, list),
    "dict": lambda v: isinstance(v, dict),
}


class MatcherError(ValueError):
    """A matcher is malformed (a bug in a case, not in the host)."""


def resolve_ref(expression: str, variables: Mapping[str, Any]) -> Any:
    """Evaluate a ``$ref`` JMESPath ``expression`` against the case ``variables``.

    Raises:
        MatcherError: the expression does not compile.
    """
    try:
        return jmespath.search(expression, dict(variables))
    except jmespath.exceptions.JMESPathError as exc:
        raise MatcherError(f"bad $ref expression {expression!r}: {exc}") from exc


def _show(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _equal(expected: Any, actual: Any) -> bool:
    """JSON equality: numbers compare by value, but booleans are not numbers."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and bool(expected == actual)
    if _is_number(expected) and _is_number(actual):
        return bool(expected == actual)
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(
            _equal(expected[k], actual[k]) for k in expected
        )
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(
            _equal(e, a) for e, a in zip(expected, actual, strict=True)
        )
    return type(expected) is type(actual) and bool(expected == actual)


def _operator(matcher: Any) -> str | None:
    """The operator name of an operator object, else None."""
    if isinstance(matcher, dict) and matcher:
        keys = [k for k in matcher if k.startswith("$")]
        if len(keys) == 1 and keys[0] in OPERATORS:
            return str(keys[0])
        if keys:
            raise MatcherError(f"unknown or ambiguous matcher operator in {_show(matcher)}")
    return None


def match(expected: Any, actual: Any, variables: dict[str, Any] | None = None,
          path: str = "$") -> list[str]:
    """Match ``actual`` (decoded JSON) against the matcher ``expected``.

    Args:
        expected: a matcher (see the module docstring).
        actual: the received value.
        variables: case variables for ``$ref``; ``$bind`` adds to it (mutated).
        path: the JSON path of ``actual``, used in problem texts.

    Returns:
        A list of problems, each ``"<path>: <what is wrong>"``; empty on a match.

    Raises:
        MatcherError: the matcher itself is malformed.
    """
    variables = {} if variables is None else variables
    op = _operator(expected)
    if op is not None:
        return OPERATORS[op](expected, actual, variables, path)
    if isinstance(expected, dict):
        return _match_object(expected, actual, variables, path, partial=False)
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return [f"{path}: expected a list, got {_show(actual)}"]
        if len(actual) != len(expected):
            return [f"{path}: expected {len(expected)} items, got {len(actual)}: {_show(actual)}"]
        problems: list[str] = []
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            problems += match(e, a, variables, f"{path}[{i}]")
        return problems
    if _equal(expected, actual):
        return []
    return [f"{path}: expected {_show(expected)}, got {_show(actual)}"]


def _match_object(expected: dict[str, Any], actual: Any, variables: dict[str, Any],
                  path: str, *, partial: bool) -> list[str]:
    if not isinstance(actual, dict):
        return [f"{path}: expected an object, got {_show(actual)}"]
    problems: list[str] = []
    for key, sub in expected.items():
        if isinstance(sub, dict) and _operator(sub) == "$absent":
            if key in actual:
                problems.append(f"{path}.{key}: expected no such key, got {_show(actual[key])}")
            continue
        if isinstance(sub, dict) and _operator(sub) == "$optional":
            if key in actual:
                problems += match(sub["$optional"], actual[key], variables, f"{path}.{key}")
            continue
        if key not in actual:
            problems.append(f"{path}.{key}: missing")
            continue
        problems += match(sub, actual[key], variables, f"{path}.{key}")
    if not partial:
        extra = sorted(set(actual) - set(expected))
        if extra:
            problems.append(f"{path}: unexpected keys {extra}")
    return problems


def _op_partial(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    if not isinstance(m["$partial"], dict):
        raise MatcherError("$partial takes an object")
    return _match_object(m["$partial"], actual, v, path, partial=True)


def _op_absent(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    return [f"{path}: expected no such key, got {_show(actual)}"]


def _op_optional(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    return match(m["$optional"], actual, v, path)  # outside an object: just the matcher


def _op_each(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    if not isinstance(actual, list):
        return [f"{path}: expected a list, got {_show(actual)}"]
    problems: list[str] = []
    for i, item in enumerate(actual):
        problems += match(m["$each"], item, v, f"{path}[{i}]")
    return problems


def _op_any(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    return []


def _op_type(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    names = m["$type"] if isinstance(m["$type"], list) else [m["$type"]]
    for name in names:
        if name not in _TYPES:
            raise MatcherError(f"unknown $type {name!r}; use one of {sorted(_TYPES)}")
    if any(_TYPES[name](actual) for name in names):
        return []
    return [f"{path}: expected type {'|'.join(names)}, got {_show(actual)}"]


def _op_regex(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    if isinstance(actual, str) and re.search(m["$regex"], actual):
        return []
    return [f"{path}: expected a string matching /{m['$regex']}/, got {_show(actual)}"]


def _op_approx(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    tol = m.get("tol", 1e-9)
    if _is_number(actual) and math.isclose(actual, m["$approx"], rel_tol=0, abs_tol=tol):
        return []
    return [f"{path}: expected {m['$approx']} ± {tol}, got {_show(actual)}"]


def _op_range(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    lo, hi = (resolve_ref(b["$ref"], v) if isinstance(b, dict) and "$ref" in b else b
              for b in m["$range"])
    if _is_number(actual) and (lo is None or actual >= lo) and (hi is None or actual <= hi):
        return []
    return [f"{path}: expected a number in [{lo}, {hi}], got {_show(actual)}"]


def _op_len(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    if not isinstance(actual, (str, list, dict)):
        return [f"{path}: expected something with a length, got {_show(actual)}"]
    return match(m["$len"], len(actual), v, f"len({path})")


def _op_one_of(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    collected: list[str] = []
    for i, option in enumerate(m["$oneOf"]):
        trial = dict(v)
        problems = match(option, actual, trial, path)
        if not problems:
            v.update(trial)
            return []
        collected.append(f"option {i}: " + "; ".join(problems))
    return [f"{path}: matches none of $oneOf ({' | '.join(collected)})"]


def _op_all_of(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    problems: list[str] = []
    for option in m["$allOf"]:
        problems += match(option, actual, v, path)
    return problems


def _op_not(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    if match(m["$not"], actual, dict(v), path):
        return []
    return [f"{path}: expected not to match {_show(m['$not'])}, got {_show(actual)}"]


def _assign(matchers: list[Any], items: list[Any], v: dict[str, Any]) -> list[int] | None:
    """Bipartite matching (Kuhn): for each matcher the index of a distinct item, or None."""
    fits = [[not match(m, item, dict(v)) for item in items] for m in matchers]
    owner: dict[int, int] = {}

    def place(mi: int, seen: set[int]) -> bool:
        for ii, ok in enumerate(fits[mi]):
            if ok and ii not in seen:
                seen.add(ii)
                if ii not in owner or place(owner[ii], seen):
                    owner[ii] = mi
                    return True
        return False

    for mi in range(len(matchers)):
        if not place(mi, set()):
            return None
    chosen = [0] * len(matchers)
    for ii, mi in owner.items():
        chosen[mi] = ii
    return chosen


def _explain_unmatched(matchers: list[Any], items: list[Any], v: dict[str, Any],
                       path: str) -> list[str]:
    lonely = [m for m in matchers if all(match(m, item, dict(v)) for item in items)]
    detail = f"no item for {_show(lonely[0])}" if lonely else "no one-to-one assignment"
    return [f"{path}: {detail} among {_show(items, 400)}"]


def _bind_assigned(matchers: list[Any], items: list[Any], chosen: list[int],
                   v: dict[str, Any], path: str) -> None:
    for m, ii in zip(matchers, chosen, strict=True):
        match(m, items[ii], v, f"{path}[{ii}]")


def _op_unordered(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    matchers = m["$unordered"]
    if not isinstance(actual, list):
        return [f"{path}: expected a list, got {_show(actual)}"]
    if len(actual) != len(matchers):
        return [f"{path}: expected {len(matchers)} items in any order, got {len(actual)}: "
                f"{_show(actual, 400)}"]
    chosen = _assign(matchers, actual, v)
    if chosen is None:
        return _explain_unmatched(matchers, actual, v, path)
    _bind_assigned(matchers, actual, chosen, v, path)
    return []


def _op_contains(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    matchers = m["$contains"]
    if not isinstance(actual, list):
        return [f"{path}: expected a list, got {_show(actual)}"]
    chosen = _assign(matchers, actual, v)
    if chosen is None:
        return _explain_unmatched(matchers, actual, v, path)
    _bind_assigned(matchers, actual, chosen, v, path)
    return []


def _op_seq(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    if not isinstance(actual, list):
        return [f"{path}: expected a list, got {_show(actual)}"]
    parts = m["$seq"]
    size = sum(len(p["$group"]) if _operator(p) == "$group" else 1 for p in parts)
    if size != len(actual):
        return [f"{path}: expected {size} items, got {len(actual)}: {_show(actual, 400)}"]
    problems: list[str] = []
    at = 0
    for part in parts:
        if _operator(part) == "$group":
            group = part["$group"]
            window = actual[at:at + len(group)]
            problems += _op_unordered({"$unordered": group}, window, v,
                                      f"{path}[{at}:{at + len(group)}]")
            at += len(group)
        else:
            problems += match(part, actual[at], v, f"{path}[{at}]")
            at += 1
    return problems


def _op_group(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    raise MatcherError("$group is only valid directly inside $seq")


def _walk(value: Any) -> list[Any]:
    found = [value]
    if isinstance(value, dict):
        for sub in value.values():
            found += _walk(sub)
    elif isinstance(value, list):
        for sub in value:
            found += _walk(sub)
    return found


def _op_has(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    for candidate in _walk(actual):
        trial = dict(v)
        if not match(m["$has"], candidate, trial):
            v.update(trial)
            return []
    return [f"{path}: nothing in {_show(actual, 400)} matches {_show(m['$has'])}"]


def _op_ref(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    wanted = resolve_ref(m["$ref"], v)
    if _equal(wanted, actual):
        return []
    return [f"{path}: expected {_show(wanted)} (= {m['$ref']}), got {_show(actual)}"]


def _op_bind(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    v[m["$bind"]] = actual
    return []


def _op_literal(m: dict[str, Any], actual: Any, v: dict[str, Any], path: str) -> list[str]:
    if _equal(m["$literal"], actual):
        return []
    return [f"{path}: expected {_show(m['$literal'])}, got {_show(actual)}"]


OPERATORS: dict[str, Callable[[dict[str, Any], Any, dict[str, Any], str], list[str]]] = {
    "$partial": _op_partial,
    "$absent": _op_absent,
    "$optional": _op_optional,
    "$each": _op_each,
    "$any": _op_any,
    "$type": _op_type,
    "$regex": _op_regex,
    "$approx": _op_approx,
    "$range": _op_range,
    "$len": _op_len,
    "$oneOf": _op_one_of,
    "$allOf": _op_all_of,
    "$not": _op_not,
    "$unordered": _op_unordered,
    "$contains": _op_contains,
    "$seq": _op_seq,
    "$group": _op_group,
    "$has": _op_has,
    "$ref": _op_ref,
    "$bind": _op_bind,
    "$literal": _op_literal,
}
