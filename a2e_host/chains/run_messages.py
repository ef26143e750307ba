"""The ``runs`` capability's messages: operators' view of durable runs (PROTOCOL.md §5
Durable runs, *Operators*).

Layer: core (no I/O, no anyio). ``run/list`` pages through the principal's runs, newest
first; ``run/get`` answers one run's record and, when asked, a page of its events. The
plugin serving them (``a2e_chains:RunsPlugin``) declares :data:`RUN_MESSAGE_TYPES`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from ..messages import Message

__all__ = [
    "MAX_RUN_EVENTS",
    "MAX_RUN_LIST",
    "RUN_MESSAGE_TYPES",
    "RUN_STATUSES",
    "RunGet",
    "RunGetResponse",
    "RunInfo",
    "RunList",
    "RunListResponse",
]

RUN_STATUSES: tuple[str, ...] = (
    "running", "succeeded", "failed", "cancelled", "timeout", "interrupted",
    "budget_exhausted", "expired",
)
"""A run's statuses: ``running``, then how it ended; ``expired`` once pruned."""

MAX_RUN_LIST = 500
"""Runs one ``run/list/resp`` lists at most (a ``limit`` above it is refused with
``schema_violation``)."""

MAX_RUN_EVENTS = 1000
"""Events one ``run/get/resp`` carries at most (a ``limit`` above it is refused with
``schema_violation``)."""


class RunInfo(msgspec.Struct, kw_only=True):
    """One durable run's record, as operators see it.

    Attributes:
        run_id: 32 hex digits.
        req_id / chain_id: of its ``chain/req``.
        status: one of :data:`RUN_STATUSES`.
        created / updated: Unix time, float seconds.
        last_seq: the ``seq`` of its last recorded event.
        idempotency_key: as the request gave it (``""``: none).
        retention_until: Unix time after which it may be pruned (0: while running).
        response: its ``chain/resp`` as an object once it ended (``run/get`` only),
            else null.
    """

    run_id: str
    req_id: str = ""
    chain_id: str = ""
    status: str = "running"
    created: float = 0.0
    updated: float = 0.0
    last_seq: int = 0
    idempotency_key: str = ""
    retention_until: float = 0.0
    response: Any = None


class RunList(Message, tag="run/list", kw_only=True):
    """Agent → host: list the principal's durable runs, newest first.

    Attributes:
        status: only runs with this status (one of :data:`RUN_STATUSES`); ``""``: all.
        cursor: ``next_cursor`` of the previous page; ``""`` for the first.
        limit: runs per page, 1 to :data:`MAX_RUN_LIST`.
    """

    TYPE: ClassVar[str] = "run/list"
    session_id: str = ""
    status: str = ""
    cursor: str = ""
    limit: int = 50


class RunListResponse(Message, tag="run/list/resp", kw_only=True):
    """Host → agent: a page of runs.

    Attributes:
        req_id: the ``run/list`` id.
        runs: :class:`RunInfo` records (``response`` null).
        next_cursor: pass as ``cursor`` for the next page; ``""`` when this is the last.
    """

    TYPE: ClassVar[str] = "run/list/resp"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    runs: list[RunInfo] = []
    next_cursor: str = ""


class RunGet(Message, tag="run/get", kw_only=True):
    """Agent → host: one durable run's record, and a page of its events when asked.

    Attributes:
        run_id: the run.
        events: include the run's stored events.
        since_seq: events with ``seq`` above this (paging).
        limit: events per page, 1 to :data:`MAX_RUN_EVENTS`.
    """

    TYPE: ClassVar[str] = "run/get"
    session_id: str = ""
    run_id: str = ""
    events: bool = False
    since_seq: int = 0
    limit: int = MAX_RUN_EVENTS


class RunGetResponse(Message, tag="run/get/resp", kw_only=True):
    """Host → agent: the run's record.

    Attributes:
        req_id: the ``run/get`` id.
        run: the :class:`RunInfo` (with ``response`` once it ended).
        events: its ``chain/event`` messages as objects, ``seq`` ascending (empty unless
            asked).
        next_since_seq: pass as ``since_seq`` for the next page of events; 0 when there
            are no more.
    """

    TYPE: ClassVar[str] = "run/get/resp"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    run: RunInfo | None = None
    events: list[Any] = []
    next_since_seq: int = 0


RUN_MESSAGE_TYPES: tuple[type[Message], ...] = (RunList, RunListResponse, RunGet, RunGetResponse)
"""The runs capability's messages, as its plugin declares them."""
