"""The logical JSON size walk (a2e_host/sizes.py): exact where it finishes, a lower bound
above the limit where it stops, work bounded by the limit whatever the value shares."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from a2e_host.codec import encode_value
from a2e_host.sizes import JsonSizer, json_size_at_most, quick_json_size

BIG_INT = 10**4299 - 1
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-BIG_INT, max_value=BIG_INT)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.sampled_from(["\u2028", "a\u2029b", '"', "\\", "\x00\x1f\x7f", "é€😀", "\t\n"])
)
keys = st.text() | st.integers() | st.sampled_from(["\u2028", '"q"', "\\"])
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=6)
    | st.tuples(inner, inner)
    | st.dictionaries(keys, inner, max_size=6),
    max_leaves=40,
)


@settings(max_examples=150, deadline=None)
@given(values)
def test_the_count_equals_the_encoded_length_for_any_json_value(value: Any) -> None:
    expected = len(encode_value(value))
    assert json_size_at_most(value, expected) == expected
    assert json_size_at_most(value, 1 << 40) == expected


@settings(max_examples=150, deadline=None)
@given(values, st.integers(min_value=0, max_value=400))
def test_a_value_over_the_limit_gives_none_and_a_lower_bound_above_the_limit(
    value: Any, limit: int
) -> None:
    expected = len(encode_value(value))
    sizer = JsonSizer(value, limit)
    assert sizer.advance(1 << 30) is True and sizer.done
    if expected <= limit:
        assert (sizer.over, sizer.size) == (False, expected)
        assert json_size_at_most(value, limit) == expected
    else:
        assert sizer.over and limit < sizer.size <= expected, (sizer.size, expected, limit)
        assert json_size_at_most(value, limit) is None


@settings(max_examples=200, deadline=None)
@given(values, st.integers(min_value=1, max_value=7))
def test_counting_in_slices_gives_the_same_answer_as_in_one_go(value: Any, steps: int) -> None:
    whole = JsonSizer(value, 300)
    whole.advance(1 << 30)
    sliced = JsonSizer(value, 300)
    rounds = 0
    while not sliced.advance(steps):
        rounds += 1
        assert not sliced.done and rounds < 10_000
    assert (sliced.size, sliced.over) == (whole.size, whole.over)


@pytest.mark.parametrize(
    ("value", "size"),
    [
        ({"data": "x" * 2000}, 2011),  # the counted part: braces, key, colon, the string
        ({"s": "y" * 5000}, 5008),
        ("z" * 10_000, 10_002),
    ],
)
def test_the_lower_bound_of_a_single_oversized_leaf_is_exact(value: Any, size: int) -> None:
    sizer = JsonSizer(value, 1000)
    sizer.advance(1 << 30)
    assert (sizer.over, sizer.size) == (True, size)


def test_shared_references_count_each_time_and_stop_the_walk_early() -> None:
    """issue 12.1: ``[big] * 10**6`` shares one 1 MiB string: its logical size is ~1 TB;
    the walk must refuse it after a few elements, fast, encoding nothing large."""
    big = "x" * 2**20
    huge = [big] * 10**6
    t = time.perf_counter()
    sizer = JsonSizer(huge, 8 * 2**20)
    sizer.advance(1 << 30)
    elapsed = time.perf_counter() - t
    assert sizer.over and 8 * 2**20 < sizer.size <= 10 * 2**20 + 10**6, sizer.size
    assert elapsed < 1.0, f"the walk took {elapsed:.2f} s over a shared-reference bomb"
    nested: list[Any] = ["ab"]
    for _ in range(60):  # 2**60 logical copies of "ab", a few hundred objects in memory
        nested = [nested, nested]
    assert json_size_at_most(nested, 10**6) is None


def test_nesting_far_deeper_than_the_recursion_limit_is_counted_iteratively() -> None:
    value: Any = 0
    for _ in range(100_000):
        value = {"a": value}
    assert json_size_at_most(value, 10**7) == 100_000 * len('{"a":}') + 1


def test_a_self_referencing_list_is_over_any_limit_not_a_hang() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    assert json_size_at_most(loop, 10_000) is None


def test_non_finite_floats_are_flagged_and_counted_as_null() -> None:
    sizer = JsonSizer({"a": [1.5, math.nan]}, 100)
    sizer.advance(100)
    assert (sizer.non_finite, sizer.size) == (True, len('{"a":[1.5,null]}'))
    finite = JsonSizer({"a": [1.5, 2e300]}, 100)
    finite.advance(100)
    assert finite.non_finite is False


@pytest.mark.parametrize(
    ("value", "error"),
    [(object(), TypeError), ({(1, 2): 1}, TypeError), ("\udc80", ValueError),
     (10**5000, ValueError)],
    ids=["object", "tuple-key", "lone-surrogate", "5001-digit-int"],
)
def test_values_json_cannot_carry_raise_as_encoding_would(value: Any, error: type) -> None:
    with pytest.raises(error):
        json_size_at_most(value, 10**6)


def test_leaves_of_other_types_are_measured_by_encoding_them() -> None:
    value = {"b": b"abc", "s": {3, 1}, "f": frozenset()}
    assert json_size_at_most(value, 1000) == len(encode_value(value))


@settings(max_examples=150, deadline=None)
@given(values)
def test_the_quick_count_of_a_small_value_equals_the_encoded_length(value: Any) -> None:
    quick = quick_json_size(value)
    if quick is not None:
        assert quick == (len(encode_value(value)), False)


@pytest.mark.parametrize(
    "value",
    [
        ["x" * 513],
        list(range(1001)),
        {"a": [[0] * 500, [0] * 500]},
        [["shared"] * 100] * 10,  # 10 + 1,000 elements: sharing counts each time
        {1: 2},
        ("a", "b"),
        b"bytes",
    ],
    ids=["long-string", "1001-elements", "1002-nested", "shared", "int-key", "tuple", "bytes"],
)
def test_a_value_that_is_not_small_is_left_to_the_full_walk(value: Any) -> None:
    assert quick_json_size(value) is None
    assert json_size_at_most(value, 10**6) == len(encode_value(value))


def test_the_quick_count_flags_non_finite_floats() -> None:
    assert quick_json_size({"a": [1.0, math.inf]}) == (len('{"a":[1.0,null]}'), True)
    assert quick_json_size(-math.inf) == (4, True)
    assert quick_json_size({"a": "\u2028"}) == (len('{"a":"\\u2028"}'), False)
