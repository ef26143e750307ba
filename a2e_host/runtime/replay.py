"""Replaying a durable run's stored frames to a connection (``chain/attach`` behind the
live position, or after the run's end).

Layer: runtime (no anyio of its own: it awaits the store and the outbox it is given).
"""

from __future__ import annotations

from ..store import RunStore, StoredFrame, StoreError
from .runs import FrameOutbox

__all__ = ["replay_stored", "send_page"]


async def replay_stored(
    store: RunStore, run_id: str, outbox: FrameOutbox, *, after: int = 0,
    until: int | None = None, page_size: int = 256,
) -> int:
    """Send a run's stored frames with ``after < seq <= until`` to ``outbox``, page by
    page, waiting for the outbox between pages (a finished run's replay: ``chain/attach``
    after its end). Sends the stored response too when the run is finished and ``until``
    is None.

    Args:
        after: the last ``seq`` the client has (0: from the start).
        until: the last ``seq`` to send; None: every stored frame.
        page_size: frames read per store call.

    Returns:
        The last ``seq`` sent (``after`` when none).

    Raises:
        StoreError: the store failed, or its log has a gap (a ``seq`` missing).
    """
    sent = after
    while until is None or sent < until:
        limit = page_size if until is None else min(page_size, until - sent)
        page = await store.frames(run_id, after=sent, limit=limit)
        if not page:
            break
        sent = send_page(page, sent, outbox, run_id)
        await outbox.wait_writable()
    if until is None:
        record = await store.get(run_id)
        if record is not None and record.response is not None:
            outbox.send_frame_nowait(record.response)
    return sent


def send_page(page: list[StoredFrame], sent: int, outbox: FrameOutbox, run_id: str) -> int:
    """Send a page of stored frames that must follow ``seq`` ``sent`` one by one.

    Returns:
        The last ``seq`` sent.

    Raises:
        StoreError: a ``seq`` is missing (the log has a gap).
    """
    for stored in page:
        if stored.seq != sent + 1:
            raise StoreError(f"the stored log of run {run_id!r} has a gap: seq {sent + 1} "
                             f"is missing (next stored is {stored.seq})")
        outbox.send_frame_nowait(stored.frame)
        sent = stored.seq
    return sent
