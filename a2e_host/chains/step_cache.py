"""The step cache: outputs of pure tools, by tool, version and input, held per host.

Layer: core (no anyio, no I/O; used from the event loop only). Source: PROTOCOL.md §5
Recovery (``cache``), DECISIONS.md "Step cache".

A key is the tool's name, its version and a digest of its resolved input encoded
canonically (JSON with sorted keys, :func:`msgspec.json.encode`), so two inputs that
differ only in key order share an entry and a tool's new version never answers from an
older one's outputs. An output is kept encoded: a hit decodes a fresh copy, so nothing a
later node does to its input can change what the cache holds.

It is bounded by entries and by encoded bytes (least recently used first out); an output
larger than an eighth of the byte bound is never kept. Two identical calls in flight at
once both run (no call waits for another's result).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

import msgspec

from ..codec import encode_value, has_non_finite
from ..sizes import json_size_at_most

__all__ = ["CacheKey", "MAX_KEY_INPUT_BYTES", "StepCache"]

CacheKey = tuple[str, str, bytes]
"""``(tool name, tool version, input digest)``."""

_key_encoder = msgspec.json.Encoder(order="sorted")  # keys only: outputs keep their order
MAX_KEY_INPUT_BYTES = 1024 * 1024
"""Inputs over this many encoded bytes are not looked up (``cache: "off"``): hashing them
on the event loop would cost more than most pure tools do."""
_ENCODE_FAILURES = (TypeError, ValueError, OverflowError, msgspec.EncodeError, RecursionError)


class StepCache:
    """A bounded, least-recently-used map of :data:`CacheKey` to encoded outputs.

    Args:
        max_entries: entries kept at most; 0 keeps none.
        max_bytes: encoded output bytes kept at most; 0 keeps none.

    Attributes:
        hits / misses / stored: counters since it was made.
        size: encoded bytes held now.
    """

    __slots__ = ("max_entries", "max_bytes", "max_entry_bytes", "size", "hits", "misses",
                 "stored", "_entries")

    def __init__(self, max_entries: int = 1024, max_bytes: int = 16 * 1024 * 1024) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_bytes // 8
        self.size = 0
        self.hits = 0
        self.misses = 0
        self.stored = 0
        self._entries: OrderedDict[CacheKey, bytes] = OrderedDict()

    @property
    def enabled(self) -> bool:
        """Whether it keeps anything at all."""
        return self.max_entries > 0 and self.max_entry_bytes > 0

    def __len__(self) -> int:
        return len(self._entries)

    def key(self, tool: str, version: str, args: Any) -> CacheKey | None:
        """The key of a call of ``tool`` at ``version`` with input ``args``, None when the
        input has no canonical encoding (a value JSON cannot carry, NaN or Infinity) or is
        over :data:`MAX_KEY_INPUT_BYTES` (measured first, in work bounded by the cap)."""
        try:
            if json_size_at_most(args, MAX_KEY_INPUT_BYTES) is None:
                return None
            encoded = _key_encoder.encode(args)
        except _ENCODE_FAILURES:
            return None
        if b"null" in encoded and has_non_finite(args):  # NaN and Infinity encode as null
            return None
        return tool, version, hashlib.blake2b(encoded, digest_size=20).digest()

    def get(self, key: CacheKey) -> tuple[bool, Any]:
        """``(True, output)`` for a kept output (a fresh copy; now the most recently
        used), else ``(False, None)``."""
        encoded = self._entries.get(key)
        if encoded is None:
            self.misses += 1
            return False, None
        self._entries.move_to_end(key)
        self.hits += 1
        return True, msgspec.json.decode(encoded)

    def put(self, key: CacheKey, output: Any, size: int | None = None) -> bool:
        """Keep ``output`` under ``key``, in its own key order, dropping the least recently
        used entries to stay within the bounds.

        Args:
            key: from :meth:`key`.
            output: the node's accepted output.
            size: its encoded size in bytes when already measured (the node's output
                check), so an output too big to keep is never encoded again.

        Returns:
            Whether it was kept: not when the cache is off, the output is over an eighth
            of ``max_bytes``, or it has no JSON encoding (NaN, Infinity, other types).
        """
        if not self.enabled or (size is not None and size > self.max_entry_bytes):
            return False
        try:
            encoded = encode_value(output)
        except _ENCODE_FAILURES:
            return False
        if len(encoded) > self.max_entry_bytes:
            return False
        if b"null" in encoded and has_non_finite(output):
            return False
        entries = self._entries
        old = entries.pop(key, None)
        if old is not None:
            self.size -= len(old)
        entries[key] = encoded
        self.size += len(encoded)
        self.stored += 1
        while len(entries) > self.max_entries or self.size > self.max_bytes:
            _, dropped = entries.popitem(last=False)
            self.size -= len(dropped)
        return True

    def clear(self) -> None:
        """Forget every entry (the counters stay)."""
        self._entries.clear()
        self.size = 0
