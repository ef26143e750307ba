"""A run store file with known runs, written through the store's own write API, for the
commands that read it (``a2e-host runs``, ``a2e-host graph --run``).

:func:`write_store` opens the store at a path (creating it), queues each run's
``create`` and its frames' ``append`` (and ``finish`` when asked), waits until all is
committed and closes it, so a subprocess reading the file sees exactly those runs.
:func:`event` and :func:`response` build the frames as the host encodes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec

from a2e_host.chains.messages import ChainEvent, ChainNode, ChainRequest, ChainResponse
from a2e_host.codec import encode_message, encode_value
from a2e_host.errors import ChainFailure
from a2e_host.store import RunRecord, RunStatus, StoredFrame, open_store

__all__ = ["StoredRun", "event", "request_bytes", "response", "write_store"]


@dataclass
class StoredRun:
    """One run to store: its record, its frames in ``seq`` order (``(node_id, phase,
    extra)``: ``extra`` holds ``output``, ``error`` or ``data`` for :func:`event`, and for
    an ``error`` a ``failure`` (a :class:`~a2e_host.errors.ChainFailure`) kept beside the
    frame as a durable run keeps it), and a ``finish`` to queue after them (``(status,
    response bytes)``) or None."""

    record: RunRecord
    events: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    finish: tuple[RunStatus, bytes] | None = None


def request_bytes(nodes: list[dict[str, Any]], entry: str, *, req_id: str,
                  chain_id: str) -> bytes:
    """An encoded, valid-shaped ``chain/req``."""
    return encode_message(ChainRequest(id=req_id, chain_id=chain_id, entry_node=entry,
                                       nodes=[ChainNode(**n) for n in nodes]))


def event(req_id: str, seq: int, node_id: str, phase: str, **extra: Any) -> bytes:
    """An encoded ``chain/event`` (``ts`` 0, so the bytes are the same on every run)."""
    return encode_message(ChainEvent(id=f"e{seq}", ts=0.0, req_id=req_id, seq=seq,
                                     node_id=node_id, phase=phase, **extra))


def response(req_id: str, chain_id: str, *, success: bool, final_output: Any = None,
             duration_ms: int = 0, nodes_run: int = 0,
             error: ChainFailure | None = None) -> bytes:
    """An encoded ``chain/resp``."""
    return encode_message(ChainResponse(
        id=f"resp-{req_id}", ts=0.0, req_id=req_id, chain_id=chain_id, success=success,
        final_output=final_output, duration_ms=duration_ms, nodes_run=nodes_run,
        error=error))


def write_store(path: Path, runs: list[StoredRun], *, prune_at: float | None = None) -> None:
    """Create the store at ``path`` holding ``runs`` (committed, the store closed); with
    ``prune_at`` (unix seconds), then expire the finished runs whose retention ended by
    then (:meth:`~a2e_host.store.RunStore.prune`)."""

    async def write() -> None:
        store = await open_store(str(path))
        try:
            for run in runs:
                store.create(run.record)
                for seq, (node_id, phase, extra) in enumerate(run.events, start=1):
                    fields = dict(extra)
                    failure = fields.pop("failure", None)
                    kept = (encode_value(fields.get("output")) if phase == "done"
                            else msgspec.json.encode(failure) if failure is not None else None)
                    store.append(run.record.run_id, StoredFrame(
                        seq, node_id, phase, event(run.record.req_id, seq, node_id, phase,
                                                   **fields), kept))
                if run.finish is not None:
                    status, body = run.finish
                    store.finish(run.record.run_id, status, body, len(run.events))
            await store.flush()
            if prune_at is not None:
                while await store.prune(prune_at) == 100:
                    pass
        finally:
            await store.aclose()

    anyio.run(write)
