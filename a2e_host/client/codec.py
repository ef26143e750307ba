"""What the client decodes: :data:`client_codec`.

Layer: client (no I/O). The core messages plus every capability's messages the client
speaks (``chain/*``, ``proc/*``); a capability's types are added here as one line.
"""

from __future__ import annotations

from ..chains.messages import CHAIN_MESSAGE_TYPES
from ..chains.proc_messages import PROC_MESSAGE_TYPES
from ..codec import MessageCodec
from ..messages import CORE_MESSAGE_TYPES

__all__ = ["client_codec"]

client_codec = MessageCodec(CORE_MESSAGE_TYPES + CHAIN_MESSAGE_TYPES + PROC_MESSAGE_TYPES)
"""Decodes every message a host sends this client (PROTOCOL.md §1)."""
