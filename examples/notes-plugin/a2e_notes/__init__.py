"""``notes``: an example third-party capability with its own messages.

An agent that asks for ``notes`` in its handshake may keep short text notes for the life
of its session::

    → {"type": "notes/put", "id": "1", "key": "plan", "text": "read, then count"}
    ← {"type": "notes/ack", "req_id": "1", "key": "plan", "count": 1, ...}
    → {"type": "notes/get", "id": "2", "key": "plan"}
    ← {"type": "notes/note", "req_id": "2", "key": "plan", "found": true,
       "text": "read, then count", ...}

It uses only the host's public plugin API (:mod:`a2e_host.plugin`, :mod:`a2e_host.messages`,
:mod:`a2e_host.exceptions`): it declares its message Structs in ``message_types``, so the
host decodes them, and refuses malformed ones with ``schema_violation`` naming the field
(``$.key``), exactly as it does its own messages.
"""

from __future__ import annotations

from typing import Any, ClassVar

from a2e_host.exceptions import Busy, InvalidMessage
from a2e_host.messages import Message
from a2e_host.plugin import Plugin, PluginContext, SessionInfo

__all__ = ["NotesPlugin", "NotePut", "NoteGet", "NoteAck", "Note", "MAX_NOTES"]

MAX_NOTES = 1000
"""Notes one session may keep; a put past it is refused ``busy``."""


class NotePut(Message, tag="notes/put", kw_only=True):
    """Agent → host: keep ``text`` under ``key`` (replacing any earlier note)."""

    TYPE: ClassVar[str] = "notes/put"
    key: str
    text: str = ""


class NoteGet(Message, tag="notes/get", kw_only=True):
    """Agent → host: read the note kept under ``key``."""

    TYPE: ClassVar[str] = "notes/get"
    key: str


class NoteAck(Message, tag="notes/ack", kw_only=True):
    """Host → agent: the note was kept; ``count`` notes are now kept for the session."""

    TYPE: ClassVar[str] = "notes/ack"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    key: str = ""
    count: int = 0


class Note(Message, tag="notes/note", kw_only=True):
    """Host → agent: the note under ``key``; ``found`` is false (and ``text`` empty)
    when there is none."""

    TYPE: ClassVar[str] = "notes/note"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    key: str = ""
    found: bool = False
    text: str = ""


class NotesPlugin(Plugin):
    """Per-session notes, forgotten when the session's connection closes."""

    capability: ClassVar[str] = "notes"
    namespace: ClassVar[str] = "notes/*"
    priority: ClassVar[int] = 50
    message_types: ClassVar[tuple[type[Message], ...]] = (NotePut, NoteGet, NoteAck, Note)

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self._notes: dict[str, dict[str, str]] = {}

    async def handle(self, message: Message, ctx: PluginContext) -> None:
        """Answer ``notes/put`` with ``notes/ack`` and ``notes/get`` with ``notes/note``.

        Raises:
            Busy: the session already keeps :data:`MAX_NOTES` notes.
            InvalidMessage: a message type only the host sends.
        """
        notes = self._notes.setdefault(ctx.session.session_id, {})
        if isinstance(message, NotePut):
            if message.key not in notes and len(notes) >= MAX_NOTES:
                raise Busy(f"this session keeps {MAX_NOTES} notes already; overwrite one")
            notes[message.key] = message.text
            ctx.outbox.send_nowait(NoteAck(req_id=message.id, key=message.key, count=len(notes)))
        elif isinstance(message, NoteGet):
            text = notes.get(message.key)
            ctx.outbox.send_nowait(
                Note(req_id=message.id, key=message.key, found=text is not None, text=text or "")
            )
        else:
            raise InvalidMessage(f"{message.TYPE!r} is sent by hosts; send notes/put or notes/get")

    async def session_closed(self, session: SessionInfo) -> None:
        """Forget the session's notes."""
        self._notes.pop(session.session_id, None)
