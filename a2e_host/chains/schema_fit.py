"""Whether a value, or every value of a type, fits a type: the verdicts static checks give.

Layer: core (pure: no I/O, no clock, no anyio). Types are
:class:`~a2e_host.chains.schema_types.SchemaType`; the semantics are msgspec's, which
converts tool inputs (PROTOCOL.md §4 static checks, DECISIONS.md).

* :func:`check_value` holds a literal (a node's static ``input``) to a type, exactly: the
  first place where msgspec would refuse it (wrong kind, a value outside an ``enum``, a
  bound such as ``minimum``, a required field missing, an unknown field of a closed object).
* :func:`fit` holds an inferred type to an expected one and answers :data:`FITS`,
  :data:`MAY_NOT_FIT` (some values would be refused: a warning) or :data:`NEVER_FITS`
  (every value would be: an error). An array whose elements may not fit only *may* fail (it
  may be empty); an object fails for sure only when a field it always has, or lacks, is
  refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .schema_types import (
    ALL,
    ANY,
    ARRAY,
    FLOAT,
    INTEGER,
    NEVER,
    NULL,
    OBJECT,
    STRING,
    Fuel,
    SchemaType,
    kind_of,
    may_be_a_tag,
)
from .schema_words import describe, describe_value

__all__ = ["FITS", "MAY_NOT_FIT", "NEVER_FITS", "Misfit", "check_value", "fit"]

FITS, MAY_NOT_FIT, NEVER_FITS = 0, 1, 2

_NUMBERS = INTEGER | FLOAT
# a bound keyword's last five letters → the kind it applies to (others: numbers)
_BOUND_KINDS = {"ength": STRING, "Items": ARRAY, "rties": OBJECT}


@dataclass(frozen=True, slots=True)
class Misfit:
    """Where and how a value (or type) does not fit.

    Attributes:
        verdict: :data:`MAY_NOT_FIT` or :data:`NEVER_FITS`.
        path: where inside the value, ``""`` for the value itself (``.a``, ``[2]``).
        expected: the expected type there, in words.
        got: what is there, in words.
        reason: a clause for what is wrong there when it is not the kind ("is missing",
            "is not accepted", "is below the minimum 0"); ``""`` otherwise.
    """

    verdict: int
    path: str
    expected: str
    got: str
    reason: str = ""


# ── literal values ──────────────────────────────────────────────────────────


def check_value(value: Any, want: SchemaType, fuel: Fuel, path: str = "") -> Misfit | None:
    """The first place where ``value`` does not fit ``want``, or None.

    Raises:
        OutOfFuel: the fuel ran out (nothing is known then).
    """
    fuel.spend()
    if want is ANY:
        return None
    kind = kind_of(value)
    if kind == ALL:
        return None
    if not kind & want.kinds:
        return Misfit(NEVER_FITS, path, describe(want), describe_value(value))
    if want.values is not None and (kind, value) not in want.values:
        return Misfit(NEVER_FITS, path, describe(want), describe_value(value))
    reason = _bound_broken(value, kind, want)
    if reason:
        return Misfit(NEVER_FITS, path, describe(want), describe_value(value), reason)
    if kind == ARRAY and want.items is not None:
        for i, element in enumerate(value):
            found = check_value(element, want.items, fuel, f"{path}[{i}]")
            if found is not None:
                return found
    elif kind == OBJECT:
        return _check_object(value, want, fuel, path)
    return None


def _check_object(value: dict[str, Any], want: SchemaType, fuel: Fuel, path: str) -> Misfit | None:
    for name in sorted(want.required):
        if name not in value and not may_be_a_tag(_prop(want, name)):
            return Misfit(NEVER_FITS, f"{path}.{name}", describe(_prop(want, name)), "nothing",
                          "is missing")
    props = want.props
    for name, element in value.items():
        sub: SchemaType | None = props.get(name) if props is not None else None
        if sub is None:
            if want.extra is NEVER:
                return Misfit(NEVER_FITS, f"{path}.{name}", "no such field",
                              describe_value(element), "is not accepted")
            sub = want.extra
        if sub is not None:
            found = check_value(element, sub, fuel, f"{path}.{name}")
            if found is not None:
                return found
    return None


def _bound_broken(value: Any, kind: int, want: SchemaType) -> str:
    """Which of ``want``'s bounds ``value`` breaks, as a clause; ``""`` when none."""
    if not want.bounds:
        return ""
    size: float
    if kind & (ARRAY | OBJECT | STRING):
        size = len(value)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        size = value
    else:
        return ""
    for keyword, bound in want.bounds:
        if not kind & _BOUND_KINDS.get(keyword[-5:], _NUMBERS):
            continue
        if keyword.startswith("min") and size < bound:
            return f"is below the {keyword} {bound}"
        if keyword.startswith("max") and size > bound:
            return f"is above the {keyword} {bound}"
        if keyword == "exclusiveMinimum" and size <= bound:
            return f"is not above the exclusiveMinimum {bound}"
        if keyword == "exclusiveMaximum" and size >= bound:
            return f"is not below the exclusiveMaximum {bound}"
    return ""


# ── inferred types ──────────────────────────────────────────────────────────


def fit(got: SchemaType, want: SchemaType, fuel: Fuel, path: str = "") -> Misfit | None:
    """Whether every value of ``got`` fits ``want``: None when they all do (or nothing is
    known of ``got``), else the :class:`Misfit` with its verdict.

    ``got`` is taken as exact but for null (an inferred value may be null where its type
    says it is not: a node read may have been skipped): where ``want`` accepts null, a
    mismatch is only :data:`MAY_NOT_FIT`, at every level.

    Raises:
        OutOfFuel: the fuel ran out (nothing is known then).
    """
    found = _fit(got, want, fuel, path)
    if found is not None and found.verdict == NEVER_FITS and want.kinds & NULL:
        return Misfit(MAY_NOT_FIT, found.path, found.expected, found.got, found.reason)
    return found


def _fit(got: SchemaType, want: SchemaType, fuel: Fuel, path: str) -> Misfit | None:
    if want is ANY or got is ANY or got.kinds == ALL or got.kinds == 0:
        return None
    fuel.spend()
    passing = got.kinds & want.kinds
    if not passing:
        return Misfit(NEVER_FITS, path, describe(want), describe(got))
    worst: Misfit | None = None
    if got.kinds & ~want.kinds:
        worst = Misfit(MAY_NOT_FIT, path, describe(want), describe(got))
    if want.values is not None:
        found = _fit_values(got, want, path)
        if found is not None:
            if found.verdict == NEVER_FITS:
                return found
            worst = worst or found
    if got.values is not None and want.bounds:
        broken = [v for k, v in got.values if _bound_broken(v, k, want)]
        if broken:
            verdict = NEVER_FITS if len(broken) == len(got.values) else MAY_NOT_FIT
            found = Misfit(verdict, path, describe(want), describe(got),
                           _bound_broken(broken[0], kind_of(broken[0]), want))
            if verdict == NEVER_FITS:
                return found
            worst = worst or found
    if passing & ARRAY and want.items is not None and got.items is not None:
        found = fit(got.items, want.items, fuel, f"{path}[]")
        if found is not None:  # an empty array fits: never worse than a warning
            worst = worst or Misfit(MAY_NOT_FIT, found.path, found.expected, found.got,
                                    found.reason)
    if passing & OBJECT:
        found = _fit_object(got, want, fuel, path)
        if found is not None:
            if found.verdict == NEVER_FITS and passing == OBJECT:
                return found  # every object is refused, and nothing else fits
            worst = worst or Misfit(MAY_NOT_FIT, found.path, found.expected, found.got,
                                    found.reason)
    return worst


def _fit_values(got: SchemaType, want: SchemaType, path: str) -> Misfit | None:
    assert want.values is not None
    if got.values is None:
        return Misfit(MAY_NOT_FIT, path, describe(want), describe(got))
    if got.values <= want.values:
        return None
    verdict = NEVER_FITS if got.values.isdisjoint(want.values) else MAY_NOT_FIT
    return Misfit(verdict, path, describe(want), describe(got))


def _fit_object(got: SchemaType, want: SchemaType, fuel: Fuel, path: str) -> Misfit | None:
    if got.props is None or (want.props is None and want.extra is None and not want.required):
        return None  # nothing declared on one side: left to run time
    fuel.spend(len(got.props))
    worst: Misfit | None = None
    found: Misfit | None
    for name in sorted(want.required):
        if name in got.props:
            if name not in got.required:
                worst = worst or Misfit(MAY_NOT_FIT, f"{path}.{name}", describe(
                    _prop(want, name)), describe(got.props[name]), "may be missing")
            continue
        sure = got.extra is NEVER and not may_be_a_tag(_prop(want, name))
        verdict = NEVER_FITS if sure else MAY_NOT_FIT
        found = Misfit(verdict, f"{path}.{name}", describe(_prop(want, name)), "nothing",
                       "is missing")
        if verdict == NEVER_FITS:
            return found
        worst = worst or found
    for name, t in got.props.items():
        sub: SchemaType | None = want.props.get(name) if want.props is not None else None
        if sub is None:
            if want.extra is NEVER:
                verdict = NEVER_FITS if name in got.required else MAY_NOT_FIT
                found = Misfit(verdict, f"{path}.{name}", "no such field", describe(t),
                               "is not accepted")
                if verdict == NEVER_FITS:
                    return found
                worst = worst or found
                continue
            sub = want.extra
        if sub is None:
            continue
        found = fit(t, sub, fuel, f"{path}.{name}")
        if found is None:
            continue
        if found.verdict == NEVER_FITS and name in got.required:
            return found
        worst = worst or Misfit(MAY_NOT_FIT, found.path, found.expected, found.got,
                                found.reason)
    return worst


def _prop(t: SchemaType, name: str) -> SchemaType:
    return t.props.get(name, ANY) if t.props is not None else ANY
