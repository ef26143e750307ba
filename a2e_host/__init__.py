"""a2e-host: an asyncio A2E protocol host that validates and runs chain DAGs.

Agents connect over WebSocket (``a2e-host serve``) or spawn the host as a stdio
subprocess (``a2e-host stdio``), send ``chain/req`` and receive sequenced
``chain/event`` frames and one ``chain/resp``.
"""

from .chains.messages import ChainEvent, ChainNode, ChainRequest, ChainResponse
from .messages import Message

__version__ = "0.1.0"

__all__ = ["ChainEvent", "ChainNode", "ChainRequest", "ChainResponse", "Message", "__version__"]
