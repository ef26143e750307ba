"""a2e-host: an asyncio A2E protocol host that validates and runs chain DAGs.

Agents connect over WebSocket (``a2e-host serve``) or spawn the host as a stdio
subprocess (``a2e-host stdio``), send ``chain/req`` and receive sequenced
``chain/event`` frames and one ``chain/resp``.

The message types below are imported when first read (``a2e_host.ChainRequest``, or
``from a2e_host import ChainRequest``), not with the package: a command that needs no
message (``a2e-host --help``, ``--version``, a usage error) starts without msgspec and
the protocol modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .chains.messages import ChainEvent, ChainNode, ChainRequest, ChainResponse
    from .messages import Message

__version__ = "0.1.0"

__all__ = ["ChainEvent", "ChainNode", "ChainRequest", "ChainResponse", "Message", "__version__"]

_CHAIN_MESSAGES = frozenset({"ChainEvent", "ChainNode", "ChainRequest", "ChainResponse"})


def __getattr__(name: str) -> Any:
    """The message types of :data:`__all__`, imported on first use (PEP 562).

    Raises:
        AttributeError: ``name`` is not one of them.
    """
    if name in _CHAIN_MESSAGES:
        from .chains import messages as chain_messages

        value = getattr(chain_messages, name)
    elif name == "Message":
        from .messages import Message as value
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
