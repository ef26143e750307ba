"""Encode and decode A2E messages: bytes ↔ Structs.

Layer: core (no I/O, no anyio, no clock). A :class:`MessageCodec` is built once per host
from the core message types plus every enabled plugin's (:attr:`a2e_host.plugin.Plugin.
message_types`): one reusable msgspec decoder over their tagged union, tagged by
``type`` (PROTOCOL.md §1), so a plugin's messages are decoded, and refused, exactly as
core ones. The fast path is one typed decode; only a message that fails it is decoded
again, untyped, to say precisely what is wrong (and to apply "the last duplicate key
wins" to the ``type`` tag too, PROTOCOL.md §8).

Errors: :meth:`MessageCodec.decode` raises only
:class:`~a2e_host.exceptions.RemoteProtocolError` subclasses (``parse_error``,
``invalid_message``, ``unknown_type``, ``schema_violation``, ``version_mismatch``),
whatever the bytes; each carries ``req_id``: the offending message's ``id`` when it was
readable as a string, else ``""``."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Union

import msgspec

from . import secrets as _secrets
from .exceptions import (
    InvalidMessage,
    ParseError,
    RemoteProtocolError,
    SchemaViolation,
    UnknownType,
    VersionMismatch,
)
from .messages import CORE_MESSAGE_TYPES, PROTOCOL_VERSION, Message
from .sizes import SHOWN_CHARS, clip

__all__ = [
    "MessageCodec",
    "core_codec",
    "encode_message",
    "encode_line",
    "encode_value",
    "has_non_finite",
    "json_kind",
    "SUPPORTED_VERSIONS",
]

SUPPORTED_VERSIONS = "1.x"
"""The versions this host speaks, as named in ``version_mismatch`` errors (PROTOCOL.md §1)."""

_any_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()
_DECODE_FAILURES = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeError)
_AT_PATH = re.compile(r" - at `(\$[^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `([^`]*)`$")
_LS, _PS = "\u2028".encode(), "\u2029".encode()


class _IdOnly(msgspec.Struct):
    """Reads just the envelope ``id`` of a message that decoded but must be refused."""

    id: str = ""


_id_decoder = msgspec.json.Decoder(_IdOnly)


class MessageCodec:
    """Decodes the messages of a fixed set of types with one reusable decoder.

    Args:
        types: the message Structs (subclasses of :class:`~a2e_host.messages.Message`
            with a ``tag``), e.g. ``CORE_MESSAGE_TYPES + plugin.message_types``.

    Attributes:
        types: ``type`` tag → Struct, every type this codec decodes.
        host_sent: the tags only a host sends (``FROM_HOST``).
        example: the tag error hints give as an example of a request: the first
            agent-sent type a plugin declared (``chain/req`` on a host serving chains),
            else ``handshake/req``.

    Raises:
        ValueError: two types share a tag, a type has none, or a type's ``TYPE`` (what
            the host routes and lists) is not its msgspec ``tag`` (what the decoder
            matches on the wire).
    """

    __slots__ = ("types", "host_sent", "example", "decoder")

    def __init__(self, types: Iterable[type[Message]]) -> None:
        by_tag: dict[str, type[Message]] = {}
        for cls in types:
            if not cls.TYPE:
                raise ValueError(f"message type {cls.__name__} has no TYPE tag")
            tag = cls.__struct_config__.tag
            if tag != cls.TYPE:
                raise ValueError(
                    f"message type {cls.__name__} is tagged {tag!r} on the wire but its "
                    f"TYPE is {cls.TYPE!r}; declare it with tag={cls.TYPE!r} or set TYPE "
                    f"to {tag!r}, so it is decoded and routed under one name"
                )
            if by_tag.get(cls.TYPE, cls) is not cls:
                raise ValueError(
                    f"message type {cls.TYPE!r} is declared twice ({by_tag[cls.TYPE].__name__}"
                    f" and {cls.__name__})"
                )
            by_tag[cls.TYPE] = cls
        self.types: Mapping[str, type[Message]] = MappingProxyType(by_tag)
        self.host_sent = frozenset(tag for tag, cls in by_tag.items() if cls.FROM_HOST)
        self.example = next(
            (tag for tag, cls in by_tag.items()
             if not cls.FROM_HOST and cls not in CORE_MESSAGE_TYPES),
            "handshake/req",
        )
        union = Union[tuple(by_tag.values())]  # type: ignore[valid-type]  # noqa: UP007
        self.decoder: msgspec.json.Decoder[Message] = msgspec.json.Decoder(union)

    def decode(self, data: bytes | bytearray | memoryview | str) -> Message:
        """Decode one JSON message into its Struct (PROTOCOL.md §1, §2, §8).

        Args:
            data: exactly one JSON object: UTF-8 bytes (one NDJSON line without its ``\\n``,
                or one WebSocket frame), or an already decoded ``str``.

        Returns:
            The Struct of its ``type`` (see :attr:`types`): unknown
            fields ignored, absent fields at their defaults, ``a2e`` read as an alias of
            ``version`` (and then unset), the last of duplicate keys winning.

        Raises:
            ParseError: ``parse_error``: not JSON, not UTF-8 (a lone surrogate escape
                included), or valid JSON beyond the decoder's limits: an integer of more
                than ~4,300 digits, a float beyond ±1.8e308, nesting too deep.
            InvalidMessage: ``invalid_message``: not a JSON object, or no string ``type``.
            UnknownType: ``unknown_type``: a ``type`` not in :attr:`types`.
            SchemaViolation: ``schema_violation``: a field of the wrong type or a missing
                required one; ``detail["path"]`` names it, e.g. ``$.nodes[2].kind``.
            VersionMismatch: ``version_mismatch``: a ``version`` (or ``a2e``) whose major
                version is not 1.

            Every error has ``req_id`` (the message's ``id`` when readable, else ``""``) and
            no other exception escapes, whatever the bytes.
        """
        try:
            msg = self.decoder.decode(data)
        except _DECODE_FAILURES as exc:
            return _decode_slowly(self, data, exc)
        if not (type(data) is bytes and data.isascii()) and not isinstance(data, str):
            _check_utf8(data)  # the typed decode skipped unknown fields unread
        if msg.a2e is not msgspec.UNSET or not _speaks(msg.version):
            unspoken = _adopt_version(msg)
            if unspoken is not None:
                raise _version_error(unspoken, _read_id(data))
        return msg


def _check_utf8(data: bytes | bytearray | memoryview) -> None:
    """Refuse bytes that are not UTF-8 anywhere, fields the decoder skipped included.

    The typed decoder checks the strings it keeps but skips unknown fields unread, so a
    message that decoded may still hold invalid bytes (PROTOCOL.md §2: not UTF-8 is
    ``parse_error``). ASCII, by far the common case, is checked by ``isascii`` alone.

    Raises:
        ParseError: naming the first invalid byte and its offset.
    """
    raw = data if not isinstance(data, memoryview) else data.tobytes()
    if raw.isascii():
        return
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start]
        err = ParseError(
            f"message is not valid UTF-8 (byte 0x{bad:02x} at offset {exc.start}); "
            "send UTF-8 JSON",
            detail={"offset": exc.start},
        )
        raise err from None


def _read_id(data: bytes | bytearray | memoryview | str) -> str:
    """The ``id`` of a message that decoded, or ``""`` when it sent none."""
    try:
        return _id_decoder.decode(data).id
    except _DECODE_FAILURES:  # pragma: no cover - the message just decoded
        return ""


def _speaks(version: str) -> bool:
    """Whether this host speaks ``version``: major version 1 (``"1.0"``, ``"1.7"``…)."""
    return version == PROTOCOL_VERSION or version.partition(".")[0] == "1"


def _version_error(version: str, req_id: str) -> VersionMismatch:
    return VersionMismatch(
        f"protocol version {version!r} is not supported; send version "
        f"{PROTOCOL_VERSION!r} (this host speaks {SUPPORTED_VERSIONS})",
        detail={"supported": [SUPPORTED_VERSIONS], "got": version},
        req_id=req_id,
    )


def _adopt_version(msg: Message) -> str | None:
    """Check ``version`` and its alias ``a2e``; move ``a2e`` into ``version``. Returns the
    first version this host does not speak, else None."""
    if msg.a2e is not msgspec.UNSET:
        for version in (msg.a2e, msg.version):
            if not _speaks(version):
                return version
        msg.version = msg.a2e
        msg.a2e = msgspec.UNSET
        return None
    return None if _speaks(msg.version) else msg.version


def _decode_slowly(
    codec: MessageCodec, data: bytes | bytearray | memoryview | str, exc: BaseException
) -> Message:
    """After a failed typed decode: decode untyped, then either raise the one error
    that says what is wrong, or return the message (duplicate ``type`` keys)."""
    try:
        obj = _any_decoder.decode(data)
    except RecursionError:
        raise ParseError(
            "message is nested too deeply to decode; flatten its structure"
        ) from None
    except UnicodeError:
        raise ParseError(
            "message text is not valid Unicode (it has a lone surrogate); send UTF-8 JSON"
        ) from None
    except msgspec.ValidationError as e:  # valid JSON beyond the decoder's limits
        # The typed decoder names struct fields (``$.output``), the untyped one only
        # ``$[...]``: prefer the former when it saw the same problem.
        typed = isinstance(exc, msgspec.ValidationError) and "out of range" in str(exc)
        path = _path_of(exc if typed else e)
        err = ParseError(
            f"message has a number beyond what this host decodes ({_reason(e).lower()} "
            f"at {path}); send such numbers as strings",
            detail={"path": path},
        )
        raise err from None
    except msgspec.DecodeError as e:
        err = ParseError(
            f"message is not valid UTF-8 JSON ({_reason(e)}); send one complete JSON object "
            "with no unpaired \\ud800-\\udfff escapes"
        )
        raise err from None
    result = _classify(codec, obj, exc)
    if isinstance(result, Message):
        return result
    raise result from None


def _classify(codec: MessageCodec, obj: Any, exc: BaseException) -> Message | RemoteProtocolError:
    """The error for a JSON value the typed decoder refused, or the message a retry decoded."""
    if not isinstance(obj, dict):
        return InvalidMessage(f"a message must be a JSON object, got {json_kind(obj)}")
    sent_id = obj.get("id")
    req_id = sent_id if isinstance(sent_id, str) else ""
    mtype = obj.get("type")
    if mtype is None:
        return InvalidMessage(
            f"message has no 'type' field; add one, e.g. \"type\": \"{codec.example}\"",
            req_id=req_id,
        )
    if not isinstance(mtype, str):
        return InvalidMessage(
            f"message 'type' must be a string such as \"{codec.example}\", got "
            f"{json_kind(mtype)}",
            req_id=req_id,
        )
    if mtype not in codec.types:
        known = sorted(tag for tag in codec.types if tag not in codec.host_sent)
        return UnknownType(
            f"unknown message type {clip(mtype)}; an agent may send {', '.join(known)}",
            detail={"type": mtype[:SHOWN_CHARS], "known": known},
            req_id=req_id,
        )
    for key in ("a2e", "version"):
        version = obj.get(key)
        if isinstance(version, str) and not _speaks(version):
            return _version_error(version, req_id)
    if isinstance(exc, msgspec.ValidationError):
        # The typed decoder may have refused only a repeated ``type`` key (the last one
        # wins, PROTOCOL.md §8): retry once on the de-duplicated object.
        try:
            msg = codec.decoder.decode(_encoder.encode(obj))
        except msgspec.ValidationError as e:
            exc = e
        except (msgspec.DecodeError, RecursionError, ValueError, TypeError):
            pass
        else:
            unspoken = _adopt_version(msg)
            return msg if unspoken is None else _version_error(unspoken, req_id)
    if isinstance(exc, RecursionError):
        return ParseError(
            "message is nested too deeply to decode; flatten its structure", req_id=req_id
        )
    return _schema_violation(mtype, exc, req_id)


def _schema_violation(mtype: str, exc: BaseException, req_id: str) -> SchemaViolation:
    reason = _reason(exc)
    path = _path_of(exc)
    missing = _MISSING.match(reason)
    if missing:
        path = f"{path}.{missing.group(1)}"
        text = f"{mtype} is missing the required field {path}; add it"
    else:
        where = path
        if path.endswith("[...]"):  # a value inside a dict: name the dict
            path = path[: -len("[...]")]
            where = f"a value of {path}"
        text = f"{mtype} has an invalid field: {where}: {reason[:1].lower()}{reason[1:]}"
    return SchemaViolation(text, detail={"path": path, "type": mtype}, req_id=req_id)


def _path_of(exc: BaseException) -> str:
    match = _AT_PATH.search(str(exc))
    return match.group(1) if match else "$"


def _reason(exc: BaseException) -> str:
    return _AT_PATH.sub("", str(exc))


def json_kind(value: object) -> str:
    """How an error message names a JSON value's type: ``"a number"``, ``"an array"`` …"""
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
    return "an object"


def encode_message(msg: Message, *, redact: bool = True) -> bytes:
    """Encode a message as compact, one-line UTF-8 JSON, with no trailing newline.

    Every field is written, defaults included, ``type`` first (PROTOCOL.md §1).
    U+2028 and U+2029 are written as ``\\u2028`` / ``\\u2029`` and a non-finite float as
    ``null``, so the output never holds bare NaN or Infinity (PROTOCOL.md §8; node
    outputs are checked with :func:`has_non_finite` before they get here).

    Every secret value the process knows is replaced by ``«secret:NAME»``
    (:data:`a2e_host.secrets.active_redactor`; PROTOCOL.md §5 Secrets), so no frame the host
    writes or stores holds one; a client encoding its own request passes
    ``redact=False`` (its ``secrets`` are meant for the host).

    Raises:
        TypeError: a field holds a value msgspec cannot encode (not JSON-like).
        ValueError: an integer of more than 4,300 digits (Python's conversion limit; the
            decoder refuses those too, so decoded values always re-encode).
    """
    data = _escape_separators(_encoder.encode(msg))
    current = _secrets.active_redactor  # None, the common case: one attribute read
    return current.redact_frame(data) if redact and current is not None else data


def _escape_separators(data: bytes) -> bytes:
    """Write U+2028 / U+2029 as JSON escapes (``isascii`` first: it is far cheaper)."""
    if not data.isascii() and (_LS in data or _PS in data):
        data = data.replace(_LS, b"\\u2028").replace(_PS, b"\\u2029")
    return data


def encode_line(msg: Message, *, redact: bool = True) -> bytes:
    """:func:`encode_message` plus the ``\\n`` that ends an NDJSON line (PROTOCOL.md §1).

    Raises:
        TypeError, ValueError: as :func:`encode_message`.
    """
    return encode_message(msg, redact=redact) + b"\n"


def encode_value(value: Any) -> bytes:
    """Encode any JSON value exactly as it would appear inside a message.

    Used to measure a node's output against ``max_output_bytes`` (PROTOCOL.md §6): the
    byte count equals the value's share of the encoded ``chain/event``.

    Raises:
        TypeError: the value is not JSON-encodable.
        ValueError: an integer of more than 4,300 digits.
    """
    data = _encoder.encode(value)
    return _escape_separators(data)


def has_non_finite(value: Any) -> bool:
    """Whether a JSON-like value holds NaN or ±Infinity anywhere (PROTOCOL.md §8).

    Args:
        value: nested dicts, lists and tuples of scalars (a node's output).

    Returns:
        True when some float inside is not finite (such an output fails its node).
    """
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


core_codec = MessageCodec(CORE_MESSAGE_TYPES)
"""A codec for the core messages alone (PROTOCOL.md §2)."""
