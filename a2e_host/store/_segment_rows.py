"""Segments: a run's consecutive frames as one row (DECISIONS.md "Run store shape").

Layer: store backend (msgspec; no I/O). The rows the SQLite writer thread inserts for a
run's frames, and the check that none of them must go to ``blobs`` instead.
"""

from __future__ import annotations

import operator
from typing import Any

import msgspec

__all__ = ["INSERT_SEGMENT", "ROWS_PER_STATEMENT", "SEGMENT_FRAMES", "insert_segments",
           "none_for_blobs", "segment_rows"]

INSERT_SEGMENT = "INSERT INTO segments(run, first_seq, last_seq, frames) VALUES (?, ?, ?, ?)"
"""Consecutive frames of one run as one row: ``frames`` is the msgpack array of one
``[node_id, phase, frame, output]`` array per frame, in ``seq`` order. One row, one index
entry and one step of the SQLite VM for a batch's frames of a run, where a row per frame
cost the writer 4–6 µs per event (DECISIONS.md "Run store shape")."""
SEGMENT_FRAMES = 1024
"""Frames one segment holds at most: a read decodes a whole segment to page inside it."""

ROWS_PER_STATEMENT = 64
"""Segment rows one ``INSERT`` carries at most (:func:`insert_segments`)."""
_INSERTS: dict[int, str] = {}  # rows → the INSERT statement of that many rows

_encode = msgspec.msgpack.Encoder().encode
"""A segment's items → its ``frames`` bytes (one C call for the whole segment)."""

_frame_of = operator.itemgetter(2)
_output_of = operator.itemgetter(3)


def none_for_blobs(items: list[tuple[Any, ...]], threshold: int) -> bool:
    """Whether no frame nor output of ``items`` is over ``threshold`` bytes (none goes to
    ``blobs``): C loops over the items (``map``), no interpreter step per frame."""
    if not items:
        return True
    if max(map(len, map(_frame_of, items))) > threshold:
        return False
    outputs = list(filter(None, map(_output_of, items)))
    return not outputs or max(map(len, outputs)) <= threshold


def segment_rows(run: int, first: int, items: list[tuple[Any, ...]]
                 ) -> list[tuple[int, int, int, bytes]]:
    """The :data:`INSERT_SEGMENT` rows of frames ``first``, ``first + 1``, … of ``run``
    (``items``): :data:`SEGMENT_FRAMES` a row at most."""
    count = len(items)
    if not count:  # an append of no frames writes no row
        return []
    if count <= SEGMENT_FRAMES:
        return [(run, first, first + count - 1, _encode(items))]
    return [(run, first + at, first + min(at + SEGMENT_FRAMES, count) - 1,
             _encode(items[at:at + SEGMENT_FRAMES])) for at in range(0, count, SEGMENT_FRAMES)]


def insert_segments(conn: Any, segments: list[tuple[int, int, int, bytes]]) -> None:
    """Insert ``segments`` (:func:`segment_rows`) with one multi-row ``INSERT`` per
    :data:`ROWS_PER_STATEMENT`: one call into SQLite, so one release and one re-take of
    the interpreter lock, where a statement per row made the writer thread take the lock
    back from the busy event loop once per row (each a forced switch of the loop).
    Atomic only inside a transaction the caller opened: in autocommit mode each
    statement is its own."""
    for at in range(0, len(segments), ROWS_PER_STATEMENT):
        chunk = segments[at:at + ROWS_PER_STATEMENT]
        sql = _INSERTS.get(len(chunk))
        if sql is None:
            sql = _INSERTS[len(chunk)] = (
                INSERT_SEGMENT.split(" VALUES ")[0] + " VALUES "
                + ", ".join(["(?, ?, ?, ?)"] * len(chunk)))
        conn.execute(sql, [value for row in chunk for value in row])
