"""The ``proc`` capability's messages as msgspec Structs (PROTOCOL.md §10).

Layer: core (no I/O, no anyio). The nine messages of the public A2E SDK's
``a2e/caps/proc/protocol.py`` (commit c8fc1f87), every field name, type and default as
there, so the SDK's own models decode what this host sends; the *extension* fields are
new fields with defaults, listed in the capability's ``features``. The ``proc`` plugin
declares :data:`PROC_MESSAGE_TYPES` as its ``message_types``; clients decode them with
:data:`proc_codec`.

Read events (``proc/read/event``, an SDK ``A2EEvent``): ``req_id`` is the id of the
``proc/spawn/req`` that started the process, ``seq`` counts that process's events from 1
without a gap, and ``kind`` / ``data`` are one of :data:`READ_EVENT_KINDS`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from ..codec import MessageCodec
from ..messages import CORE_MESSAGE_TYPES, Message

__all__ = [
    "PROC_STATES",
    "READ_EVENT_KINDS",
    "PROC_MESSAGE_TYPES",
    "ProcKillRequest",
    "ProcKillResponse",
    "ProcReadEvent",
    "ProcSpawnRequest",
    "ProcSpawnResponse",
    "ProcStatus",
    "ProcStatusRequest",
    "ProcStatusResponse",
    "ProcWriteRequest",
    "ProcWriteResponse",
    "proc_codec",
]

PROC_STATES: tuple[str, ...] = ("running", "stopped", "crashed", "timedout")
"""The SDK's ``ProcState`` values: ``running``; ``stopped`` (exited with code 0, or ended
on request: ``proc/kill``, the session ending, the host stopping); ``crashed`` (exited
non-zero or by a signal nobody asked for, or its supervisor vanished); ``timedout``
(killed when its ``timeout`` passed)."""

READ_EVENT_KINDS: dict[str, str] = {
    "output": '{"text": str}: a chunk of the stream named by stream_type, UTF-8 decoded '
              "(invalid bytes as U+FFFD, a character never split between chunks), at most "
              "65,536 bytes of output per event",
    "dropped": '{"limit": int, "message": str}: the stream passed its byte cap; what it '
               "writes from now on is read and dropped (counted in the exit event)",
    "exit": '{"state": str, "exit_code": int | None, "dropped": {"stdout": int, "stderr": '
            'int}, "message": str}: the process tree has ended; the last event (stream_type "")',
}
"""``proc/read/event`` kinds and their ``data`` (PROTOCOL.md §10)."""


class ProcSpawnRequest(Message, tag="proc/spawn/req", kw_only=True):
    """Agent → host: start a long-lived process owned by the session (SDK
    ``ProcSpawnRequest``).

    Attributes:
        session_id: from ``handshake/resp`` (``""`` = this connection's session).
        cmd: the executable and its arguments; ``cmd[0]`` must be allowed exactly.
        cwd: working directory relative to (and confined to) the host's root; ``""`` =
            the root.
        env: extra environment variables; each key must be allowed by the operator
            (``proc_env_keys``), values strings.
        stdin_mode: ``"pipe"`` (``proc/write/req`` feeds it) or ``"null"``.
        timeout: int seconds before the process tree is killed; 0 = the session's
            ``max_timeout`` (never longer than that).
    """

    TYPE: ClassVar[str] = "proc/spawn/req"
    session_id: str = ""
    cmd: list[str] = []
    cwd: str = ""
    env: dict[str, Any] = {}
    stdin_mode: str = "pipe"
    timeout: int = 0


class ProcSpawnResponse(Message, tag="proc/spawn/resp", kw_only=True):
    """Host → agent: the answer to ``proc/spawn/req`` (SDK ``ProcSpawnResponse``).

    Attributes:
        req_id: the spawn request's id (also the ``req_id`` of the process's read events).
        proc_id: names the process in later ``proc/*`` requests; ``""`` when not started.
        ok: whether it runs.
        pid: the child's process id (0 when not started).
        error: why it was not started (one sentence), else ``""``.
        error_code: *extension*: ``proc_denied`` (``cmd[0]`` not allowed, or replaced
            since the host started), ``invalid_input`` (``cmd``, ``cwd``, ``env``,
            ``stdin_mode`` or ``timeout`` refused), ``spawn_failed`` (the system could
            not start it); ``""`` when ``ok``.
    """

    TYPE: ClassVar[str] = "proc/spawn/resp"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    proc_id: str = ""
    ok: bool = False
    pid: int = 0
    error: str = ""
    error_code: str = ""


class ProcWriteRequest(Message, tag="proc/write/req", kw_only=True):
    """Agent → host: write text to the process's stdin (SDK ``ProcWriteRequest``).

    Attributes:
        proc_id: the process.
        data: UTF-8 text written as is (may be ``""``).
        eof: close stdin after ``data``.
    """

    TYPE: ClassVar[str] = "proc/write/req"
    proc_id: str = ""
    data: str = ""
    eof: bool = False


class ProcWriteResponse(Message, tag="proc/write/resp", kw_only=True):
    """Host → agent: ``data`` was written (SDK ``ProcWriteResponse``), sent once the
    process's stdin took all of it.

    Attributes:
        req_id / proc_id / pid: the request, the process and its pid.
        ok: false when stdin is not open (``stdin_mode`` ``"null"``, closed by an earlier
            ``eof``, or closed by the process), with ``error``.
        error: one sentence, ``""`` when ``ok``.
        written: *extension*: bytes written (int).
    """

    TYPE: ClassVar[str] = "proc/write/resp"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    proc_id: str = ""
    ok: bool = False
    pid: int = 0
    error: str = ""
    written: int = 0


class ProcReadEvent(Message, tag="proc/read/event", kw_only=True):
    """Host → agent, pushed as the process writes output or ends (SDK ``ProcReadEvent``,
    an ``A2EEvent``): see the module docstring and :data:`READ_EVENT_KINDS`.

    Attributes:
        kind: ``output``, ``dropped`` or ``exit``.
        req_id: the ``proc/spawn/req`` id that started the process.
        data: the kind's payload.
        seq: the process's event count, from 1, no gap.
        proc_id: the process.
        stream_type: ``"stdout"`` or ``"stderr"``; ``""`` for ``exit``.
    """

    TYPE: ClassVar[str] = "proc/read/event"
    FROM_HOST: ClassVar[bool] = True
    kind: str = "output"
    req_id: str = ""
    data: dict[str, Any] = {}
    seq: int = 0
    proc_id: str = ""
    stream_type: str = "stdout"


class ProcKillRequest(Message, tag="proc/kill/req", kw_only=True):
    """Agent → host: end a process and its whole tree (SDK ``ProcKillRequest``).

    Attributes:
        proc_id: the process.
        signal: ``"SIGTERM"`` (default), ``"SIGINT"``, ``"SIGHUP"`` or ``"SIGKILL"``,
            sent to its process group first; what is left after the kill grace is killed.
    """

    TYPE: ClassVar[str] = "proc/kill/req"
    proc_id: str = ""
    signal: str = "SIGTERM"


class ProcKillResponse(Message, tag="proc/kill/resp", kw_only=True):
    """Host → agent, once the process tree is gone (SDK ``ProcKillResponse``).

    Attributes:
        req_id: the kill request's id.
        ok: true (the tree has ended).
        state: the final state (``stopped``, or ``crashed`` / ``timedout`` when it ended
            so on its own meanwhile).
        proc_id: *extension*: the process.
        exit_code: *extension*: its exit code, ``-signal`` when a signal ended it.
    """

    TYPE: ClassVar[str] = "proc/kill/resp"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    ok: bool = False
    state: str = ""
    proc_id: str = ""
    exit_code: int | None = None


class ProcStatusRequest(Message, tag="proc/status/req", kw_only=True):
    """Agent → host: one process's status, or (``proc_id`` ``""``) every process of the
    session (SDK ``ProcStatusRequest``)."""

    TYPE: ClassVar[str] = "proc/status/req"
    proc_id: str = ""


class ProcStatus(msgspec.Struct, kw_only=True):
    """One process as ``proc/status/resp.procs`` lists it (SDK ``ProcStatus``).

    Attributes:
        proc_id: the process.
        cmd: its command line, shell-quoted (``shlex.join``).
        state: one of :data:`PROC_STATES`.
        pid: the child's pid.
        exit_code: None while running; else the exit code, ``-signal`` when killed.
        started_at: Unix epoch seconds it started.
        ended_at: *extension*: Unix epoch seconds it ended, None while running.
    """

    proc_id: str
    cmd: str
    state: str
    pid: int = 0
    exit_code: int | None = None
    started_at: float = 0.0
    ended_at: float | None = None


class ProcStatusResponse(Message, tag="proc/status/resp", kw_only=True):
    """Host → agent (SDK ``ProcStatusResponse``).

    For one process: ``proc_id`` and ``status`` (its state) name it, ``error`` says why
    it ended when it crashed or timed out (``""`` otherwise), and ``procs`` holds its
    :class:`ProcStatus`. For the whole session (``proc_id`` ``""`` asked): ``proc_id``
    and ``status`` are ``""`` and ``procs`` lists every process the session still knows,
    oldest first (running ones, and the last ended ones: PROTOCOL.md §10).

    Attributes:
        procs: *extension*: the processes.
    """

    TYPE: ClassVar[str] = "proc/status/resp"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    proc_id: str
    status: str
    error: str
    procs: list[ProcStatus] = []


PROC_MESSAGE_TYPES: tuple[type[Message], ...] = (
    ProcSpawnRequest,
    ProcSpawnResponse,
    ProcWriteRequest,
    ProcWriteResponse,
    ProcReadEvent,
    ProcKillRequest,
    ProcKillResponse,
    ProcStatusRequest,
    ProcStatusResponse,
)
"""The messages of the ``proc`` capability, both directions (PROTOCOL.md §10)."""

proc_codec = MessageCodec(CORE_MESSAGE_TYPES + PROC_MESSAGE_TYPES)
"""Decodes the core messages plus the ``proc`` ones (for clients and tests)."""
