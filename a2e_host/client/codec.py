"""The one decoder the client reads host messages with.

Layer: client (no I/O). The core messages and those of every capability the client
speaks (``chain/*``, ``run/*``, ``skill/*``, ``proc/*``, ``tool/*``); a type it does not
know ends the connection as unreadable, so each capability the client serves is listed here.
"""

from __future__ import annotations

from ..chains.messages import CHAIN_MESSAGE_TYPES
from ..chains.proc_messages import PROC_MESSAGE_TYPES
from ..chains.run_messages import RUN_MESSAGE_TYPES
from ..chains.skill_messages import SKILL_MESSAGE_TYPES
from ..codec import MessageCodec
from ..messages import CORE_MESSAGE_TYPES
from ..tools.messages import TOOL_MESSAGE_TYPES

__all__ = ["client_codec"]

client_codec = MessageCodec(
    CORE_MESSAGE_TYPES + CHAIN_MESSAGE_TYPES + RUN_MESSAGE_TYPES + SKILL_MESSAGE_TYPES
    + PROC_MESSAGE_TYPES + TOOL_MESSAGE_TYPES
)
"""Decodes every message a host sends this client."""
