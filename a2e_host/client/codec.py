"""The codec clients decode with: the core messages and every capability's the client
speaks (PROTOCOL.md §1–§2, §4–§5, §9).

Layer: client. The transports (:mod:`.websocket`, :mod:`.stdio`, :mod:`.memory`) decode
each incoming message with :data:`client_codec`.
"""

from __future__ import annotations

from ..chains.messages import CHAIN_MESSAGE_TYPES
from ..codec import MessageCodec
from ..messages import CORE_MESSAGE_TYPES, Message
from ..tools.messages import TOOL_MESSAGE_TYPES

__all__ = ["CLIENT_MESSAGE_TYPES", "client_codec"]

CLIENT_MESSAGE_TYPES: tuple[type[Message], ...] = (
    CORE_MESSAGE_TYPES + CHAIN_MESSAGE_TYPES + TOOL_MESSAGE_TYPES
)
"""Every message type a client decodes."""

client_codec = MessageCodec(CLIENT_MESSAGE_TYPES)
"""Decodes what a host sends a client (core, ``chain/*``, ``tool/*``)."""
