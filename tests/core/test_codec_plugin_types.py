"""The codec built from plugin-declared types (issue 14, item 1): a declared type's
``TYPE`` (what the host routes and lists) and its msgspec ``tag`` (what the decoder
matches on the wire) must be the same string, or the codec refuses it when built."""

from __future__ import annotations

from typing import ClassVar

import pytest

from a2e_host.codec import MessageCodec
from a2e_host.exceptions import RemoteProtocolError
from a2e_host.messages import CORE_MESSAGE_TYPES, Message


class Put(Message, tag="notes/put", kw_only=True):
    """A plugin author's slip: the tag says ``notes/put``, ``TYPE`` says ``notes/store``."""

    TYPE: ClassVar[str] = "notes/store"
    key: str = ""


def test_a_type_whose_TYPE_is_not_its_tag_is_refused_when_the_codec_is_built() -> None:
    """Reproduction: ``MessageCodec(CORE_MESSAGE_TYPES + (Put,))`` builds. Then
    ``{"type": "notes/put"}`` decodes into ``Put`` and is routed as ``notes/store``, while
    ``{"type": "notes/store"}`` (the name listed in ``unknown_type``'s ``detail.known``)
    is refused ``schema_violation`` "$.type: invalid value 'notes/store'"."""
    try:
        codec = MessageCodec(CORE_MESSAGE_TYPES + (Put,))
    except ValueError as exc:
        assert "notes/put" in str(exc) and "notes/store" in str(exc)
        return
    seen: dict[str, str] = {}
    for wire in ("notes/put", "notes/store"):
        try:
            seen[wire] = codec.decode(f'{{"type": "{wire}", "id": "1"}}').TYPE
        except RemoteProtocolError as exc:
            seen[wire] = exc.code
    pytest.fail(
        f"the codec took a type whose TYPE differs from its tag; on the wire: {seen} "
        "(each wire type should decode as itself)"
    )
