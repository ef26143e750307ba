"""One incoming frame → one message, within the size cap (PROTOCOL.md §1, §6).

Layer: runtime support (no anyio): what a connection's reader does with each frame a
transport delivers before it is dispatched. A frame over ``max_message_bytes`` (counted
in UTF-8 bytes, whether the transport gave bytes or text), a line the stdio framer
already refused as too long, and a WebSocket binary frame are refused with one clear
error each; everything else goes to the host's one :class:`~a2e_host.codec.MessageCodec`.
"""

from __future__ import annotations

import gc
import threading

from ..codec import MessageCodec
from ..exceptions import InvalidMessage, MessageTooLarge
from ..framing import LineTooLong
from ..messages import Message
from ..transports import BinaryFrame, Incoming

__all__ = ["decode_frame", "GC_PAUSED_DECODE_BYTES"]

GC_PAUSED_DECODE_BYTES = 256 * 1024
"""Messages over this many bytes are decoded with the cyclic garbage collector paused:
decoding 14 MB of nested lists took 2 s, most of it collections over its own new
containers. (A worker thread would not help: msgspec holds the interpreter lock while it
decodes.)"""

_gc_lock = threading.Lock()
_gc_pausers = 0  # decodes running with the cyclic collector paused
_gc_was_enabled = False


def decode_frame(
    codec: MessageCodec, frame: Incoming, limit: int, limit_name: str = "max_message_bytes"
) -> Message:
    """Decode one incoming frame, refusing it when it is over ``limit`` bytes.

    Args:
        codec: the host's codec.
        frame: what the transport delivered.
        limit: the effective ``max_message_bytes`` (the session's once there is one).
        limit_name: how the refusal names ``limit``.

    Returns:
        The decoded message.

    Raises:
        MessageTooLarge: over ``limit`` bytes (``detail``: ``size``, ``limit``).
        InvalidMessage: a binary WebSocket frame.
        RemoteProtocolError: whatever :meth:`MessageCodec.decode
            <a2e_host.codec.MessageCodec.decode>` refuses.
    """
    if isinstance(frame, LineTooLong):
        raise too_large(frame.size, frame.limit)
    if isinstance(frame, BinaryFrame):
        raise InvalidMessage(
            f"binary frame of {frame.size} bytes refused; send each message as one "
            "JSON text frame"
        )
    size = len(frame) if isinstance(frame, bytes) else _utf8_length(frame, limit)
    if size > limit:
        raise too_large(size, limit, limit_name)
    if size > GC_PAUSED_DECODE_BYTES:
        return _decode_without_gc(codec, frame)
    return codec.decode(frame)


def too_large(size: int, limit: int, limit_name: str = "max_message_bytes") -> MessageTooLarge:
    """The ``message_too_large`` refusal of a ``size``-byte message over ``limit``."""
    return MessageTooLarge(
        f"message of {size} bytes is over {limit_name} ({limit}); send a smaller "
        "message (e.g. pass large data by reference)",
        detail={"size": size, "limit": limit},
    )


def _decode_without_gc(codec: MessageCodec, frame: bytes | str) -> Message:
    """``codec.decode`` with the cyclic garbage collector paused: a decoded JSON
    value has no reference cycles, and collections triggered by its millions of new
    containers would scan the whole heap again and again (2.0 s → 0.6 s for 14 MB)."""
    global _gc_pausers, _gc_was_enabled
    with _gc_lock:
        if _gc_pausers == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pausers += 1
    try:
        return codec.decode(frame)
    finally:
        with _gc_lock:
            _gc_pausers -= 1
            if _gc_pausers == 0 and _gc_was_enabled:
                gc.enable()


def _utf8_length(text: str, limit: int) -> int:
    """Byte length of ``text`` as UTF-8, computed only when it may exceed ``limit``."""
    if len(text) * 4 <= limit:
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))
