"""A refusal is never wrong: whatever the static checks call sure to fail, msgspec's
conversion (what a tool's input goes through) refuses too (PROTOCOL.md §4 static checks)."""

from __future__ import annotations

import decimal
from typing import Annotated, Any, Literal

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a2e_host.chains.schema_fit import NEVER_FITS, check_value, fit
from a2e_host.chains.schema_types import Fuel, schema_type, type_of_value
from a2e_host.tools.model import json_schema


class Inner(msgspec.Struct):
    n: int
    s: str = ""


class Closed(msgspec.Struct, forbid_unknown_fields=True):
    a: float
    tags: list[str] = []


class Tagged(msgspec.Struct, tag="t"):
    v: int | None


TYPES: list[Any] = [
    int, float, str, bool, None, int | None, list[int], list[str], dict[str, int],
    Literal["x", "y"], decimal.Decimal, Inner, Closed, Tagged, list[Inner], dict[str, Inner],
    Annotated[int, msgspec.Meta(ge=0, le=10)], Annotated[str, msgspec.Meta(max_length=2)],
    Annotated[list[int], msgspec.Meta(min_length=1)], tuple[int, str], Inner | None,
]

KEYS = st.sampled_from(["n", "s", "a", "tags", "v", "type", "x", "t", "zz"])
SCALARS = (st.none() | st.booleans() | st.integers(-20, 20) | st.floats(-5, 5)
           | st.sampled_from(["x", "y", "t", "ab", "", "1.5"]))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)


def refused(value: Any, type_: Any) -> bool:
    try:
        msgspec.convert(value, type_)
    except msgspec.ValidationError:
        return True
    return False


@pytest.mark.parametrize("type_", TYPES, ids=[repr(t) for t in TYPES])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=VALUES)
def test_a_value_called_sure_to_fail_is_refused_by_msgspec(type_: Any, value: Any) -> None:
    want = schema_type(json_schema(type_))
    misfit = check_value(value, want, Fuel(10_000))
    if misfit is not None:
        assert refused(value, type_), (value, misfit)
    never = fit(type_of_value(value, Fuel(10_000)), want, Fuel(10_000))
    if never is not None and never.verdict == NEVER_FITS:
        assert refused(value, type_), (value, never)


def test_the_property_finds_refusals_at_all() -> None:
    # the test above is not vacuous: these are found and refused
    for value, type_ in [("1", int), (1.5, int), ({"s": "x"}, Inner), ({"a": 1, "b": 2}, Closed),
                         (11, Annotated[int, msgspec.Meta(ge=0, le=10)]), ("z", Literal["x"])]:
        assert check_value(value, schema_type(json_schema(type_)), Fuel(100)) is not None
        assert refused(value, type_)
