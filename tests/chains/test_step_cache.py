"""The step cache keeps pure tools' outputs by tool, version and canonical input, within
its bounds (PROTOCOL.md §5 Recovery, DECISIONS.md "Step cache")."""

from __future__ import annotations

import msgspec

from a2e_host.chains.step_cache import StepCache


def test_a_key_ignores_key_order_and_tells_tools_versions_and_inputs_apart() -> None:
    cache = StepCache()
    key = cache.key("t", "1", {"a": 1, "b": {"y": [1, 2], "x": None}})
    assert key == cache.key("t", "1", {"b": {"x": None, "y": [1, 2]}, "a": 1})
    assert key is not None and key[:2] == ("t", "1") and len(key[2]) == 20
    others = [cache.key("u", "1", {"a": 1, "b": {"y": [1, 2], "x": None}}),
              cache.key("t", "2", {"a": 1, "b": {"y": [1, 2], "x": None}}),
              cache.key("t", "1", {"a": 1, "b": {"y": [2, 1], "x": None}}),
              cache.key("t", "1", {"a": 1.5, "b": {"y": [1, 2], "x": None}})]
    assert len({key, *others}) == 5


def test_an_input_json_cannot_carry_has_no_key() -> None:
    cache = StepCache()
    assert cache.key("t", "1", {"x": float("nan")}) is None
    assert cache.key("t", "1", {"x": float("inf")}) is None
    assert cache.key("t", "1", {"x": object()}) is None
    assert cache.key("t", "1", {"x": None}) is not None  # null itself is fine


def test_a_hit_returns_a_fresh_copy_and_counts() -> None:
    cache = StepCache()
    key = cache.key("t", "1", {})
    assert key is not None
    assert cache.get(key) == (False, None)
    assert cache.put(key, {"items": [1, 2]})
    hit, first = cache.get(key)
    assert hit and first == {"items": [1, 2]}
    first["items"].append(3)
    assert cache.get(key) == (True, {"items": [1, 2]})
    assert (cache.hits, cache.misses, cache.stored) == (2, 1, 1)


def test_entries_are_bounded_least_recently_used_first_out() -> None:
    cache = StepCache(max_entries=2)
    keys = [cache.key("t", "1", {"i": i}) for i in range(3)]
    assert all(k is not None for k in keys)
    k0, k1, k2 = keys  # type: ignore[misc]
    cache.put(k0, 0)
    cache.put(k1, 1)
    assert cache.get(k0) == (True, 0)  # now k1 is the least recently used
    cache.put(k2, 2)
    assert len(cache) == 2
    assert cache.get(k1) == (False, None)
    assert cache.get(k0) == (True, 0) and cache.get(k2) == (True, 2)


def test_bytes_are_bounded_and_a_large_output_is_never_kept() -> None:
    cache = StepCache(max_entries=100, max_bytes=800)  # an entry may take 100 bytes
    big = "x" * 120
    key = cache.key("t", "1", {"big": True})
    assert key is not None and not cache.put(key, big)
    sizes = []
    for i in range(12):
        k = cache.key("t", "1", {"i": i})
        assert k is not None and cache.put(k, "y" * 90)  # 92 bytes encoded
        sizes.append(cache.size)
    assert max(sizes) <= 800
    assert len(cache) == 8 and cache.size == 8 * 92
    cache.clear()
    assert (len(cache), cache.size) == (0, 0)


def test_an_output_json_cannot_carry_is_not_kept_and_a_cache_of_size_zero_keeps_nothing() -> None:
    cache = StepCache()
    key = cache.key("t", "1", {})
    assert key is not None
    assert not cache.put(key, {"x": float("nan")})
    assert not cache.put(key, {"x": object()})
    off = StepCache(max_entries=0)
    assert not off.enabled and not off.put(key, 1)
    assert not StepCache(max_bytes=7).enabled


def test_replacing_an_entry_keeps_the_byte_count_exact() -> None:
    cache = StepCache()
    key = cache.key("t", "1", {})
    assert key is not None
    cache.put(key, "a" * 10)
    cache.put(key, "b" * 20)
    assert len(cache) == 1 and cache.size == len(msgspec.json.encode("b" * 20))


def test_a_hit_gives_the_output_in_the_tools_own_key_order() -> None:
    cache = StepCache(8, 1 << 20)
    key = cache.key("t", "1", {"b": 1, "a": 2})
    assert key is not None and cache.put(key, {"z": 1, "a": 2}, 15)
    hit, output = cache.get(key)
    assert hit and list(output) == ["z", "a"]


def test_an_input_over_the_key_bound_is_not_looked_up_and_a_big_output_not_encoded() -> None:
    from a2e_host.chains.step_cache import MAX_KEY_INPUT_BYTES

    cache = StepCache(8, 1 << 20)
    assert cache.key("t", "1", {"s": "x" * MAX_KEY_INPUT_BYTES}) is None
    assert cache.key("t", "1", {"s": "x" * 1000}) is not None
    key = cache.key("t", "1", {})
    assert key is not None
    assert cache.put(key, object(), size=cache.max_entry_bytes + 1) is False  # not encoded
