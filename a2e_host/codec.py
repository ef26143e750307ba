"""Encode and decode A2E messages: bytes ↔ Structs.

Layer: core (no I/O). One reusable msgspec decoder handles every message type, tagged
by ``type`` (PROTOCOL.md §1). The fast path is a single typed decode; only a message
that fails it is looked at again to say precisely what is wrong.

Errors: :func:`decode_message` raises only :class:`~a2e_host.exceptions.RemoteProtocolError`
subclasses (``parse_error``, ``invalid_message``, ``unknown_type``, ``schema_violation``,
``version_mismatch``), whatever the bytes; each carries ``req_id`` (the offending
message's ``id`` when readable, else ``""``).
"""

from __future__ import annotations

import math
import re
from typing import Any, Union

import msgspec

from .exceptions import (
    InvalidMessage,
    ParseError,
    RemoteProtocolError,
    SchemaViolation,
    UnknownType,
    VersionMismatch,
)
from .messages import MESSAGE_TYPES, PROTOCOL_VERSION, Message

__all__ = [
    "decode_message",
    "encode_message",
    "encode_line",
    "encode_value",
    "has_non_finite",
    "SUPPORTED_VERSIONS",
]

SUPPORTED_VERSIONS = "1.x"
"""The versions this host speaks, as named in ``version_mismatch`` errors."""

_AnyMessage = Union[tuple(MESSAGE_TYPES.values())]  # type: ignore[valid-type]  # noqa: UP007
_decoder: msgspec.json.Decoder[Message] = msgspec.json.Decoder(_AnyMessage)
_any_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()
_PATH = re.compile(r" - at `(\$[^`]*)`$")
_LS, _PS = "\u2028".encode(), "\u2029".encode()


def decode_message(data: bytes | str) -> Message:
    """Decode one JSON message into its Struct.

    Args:
        data: exactly one JSON object, UTF-8 bytes (or an already decoded ``str``).

    Returns:
        The message Struct for its ``type`` (unknown fields ignored; ``a2e`` read as an
        alias of ``version``).

    Raises:
        ParseError: not JSON, not UTF-8, or beyond the decoder's limits (an integer of
            thousands of digits, a non-finite number, nesting too deep) — PROTOCOL.md §8.
        InvalidMessage: not an object, or no string ``type``.
        UnknownType: a ``type`` this host does not know.
        SchemaViolation: a field of the wrong type; ``detail["path"]`` names it.
        VersionMismatch: a version other than ``1.x``.
    """
    try:
        msg = _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise _diagnose(data, exc) from None
    version = msg.protocol_version
    if version != PROTOCOL_VERSION and not version.startswith("1."):
        err = VersionMismatch(
            f"protocol version {version!r} is not supported; this host speaks {SUPPORTED_VERSIONS}",
            detail={"supported": [SUPPORTED_VERSIONS], "got": version},
        )
        err.req_id = msg.id  # type: ignore[attr-defined]
        raise err
    return msg


def _diagnose(data: bytes | str, exc: BaseException) -> RemoteProtocolError:
    """Turn a failed typed decode into the one error code that says what is wrong."""
    err: RemoteProtocolError
    try:
        obj = _any_decoder.decode(data)
    except RecursionError:
        return _with_id(ParseError("message is nested too deeply to decode"), None)
    except msgspec.ValidationError as e:  # valid JSON beyond the decoder's limits
        return _with_id(ParseError(f"message is not acceptable JSON: {_strip(e)}"), None)
    except msgspec.DecodeError as e:
        return _with_id(ParseError(f"message is not valid JSON (UTF-8): {_strip(e)}"), None)
    if not isinstance(obj, dict):
        kind = _json_kind(obj)
        return _with_id(InvalidMessage(f"a message must be a JSON object, got {kind}"), None)
    req_id = obj.get("id")
    mtype = obj.get("type")
    if mtype is None:
        err = InvalidMessage("message has no 'type' field; add e.g. \"type\": \"chain/req\"")
        return _with_id(err, req_id)
    if not isinstance(mtype, str):
        err = InvalidMessage(f"message 'type' must be a string, got {_json_kind(mtype)}")
        return _with_id(err, req_id)
    if mtype not in MESSAGE_TYPES:
        known = ", ".join(sorted(MESSAGE_TYPES))
        err = UnknownType(
            f"unknown message type {mtype!r}; this host knows: {known}",
            detail={"type": mtype, "known": sorted(MESSAGE_TYPES)},
        )
        return _with_id(err, req_id)
    version = obj.get("a2e", obj.get("version", PROTOCOL_VERSION))
    if isinstance(version, str) and version != PROTOCOL_VERSION and not version.startswith("1."):
        err = VersionMismatch(
            f"protocol version {version!r} is not supported; this host speaks {SUPPORTED_VERSIONS}",
            detail={"supported": [SUPPORTED_VERSIONS], "got": version},
        )
        return _with_id(err, req_id)
    text = _strip(exc)
    match = _PATH.search(str(exc))
    path = match.group(1) if match else "$"
    if isinstance(exc, RecursionError):
        return _with_id(ParseError("message is nested too deeply to decode"), req_id)
    if "out of range" in text:
        err = ParseError(f"{text} at {path}: a number beyond what this host decodes")
        err.detail = {"path": path}
        return _with_id(err, req_id)
    err = SchemaViolation(f"{mtype}: {text} at {path}", detail={"path": path, "type": mtype})
    return _with_id(err, req_id)


def _strip(exc: BaseException) -> str:
    return _PATH.sub("", str(exc))


def _with_id(err: RemoteProtocolError, req_id: object) -> RemoteProtocolError:
    err.req_id = req_id if isinstance(req_id, str) else ""  # type: ignore[attr-defined]
    return err


def _json_kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if value is None:
        return "null"
    return type(value).__name__


def encode_message(msg: Message) -> bytes:
    """Encode a message as compact one-line UTF-8 JSON (no trailing newline).

    U+2028 and U+2029 are escaped (PROTOCOL.md §8); a non-finite float encodes as
    ``null`` (node outputs are checked for them before they get here).
    """
    data = _encoder.encode(msg)
    if _LS in data or _PS in data:
        data = data.replace(_LS, b"\\u2028").replace(_PS, b"\\u2029")
    return data


def encode_line(msg: Message) -> bytes:
    """:func:`encode_message` plus the ``\\n`` that ends an NDJSON line."""
    return encode_message(msg) + b"\n"


def encode_value(value: Any) -> bytes:
    """Encode any JSON value compactly (used to measure outputs against ``max_output_bytes``).

    Raises:
        TypeError: the value is not JSON-encodable.
    """
    return _encoder.encode(value)


def has_non_finite(value: Any) -> bool:
    """Whether a JSON-like value contains NaN or ±Infinity anywhere (PROTOCOL.md §8)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, float):
            if not math.isfinite(v):
                return True
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list | tuple):
            stack.extend(v)
    return False
