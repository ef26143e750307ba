"""``a2e-host runs show RUN [--events [--after SEQ] [--limit N]] [--json] [--store PATH]``:
one run of a run store: its record, a summary of its response, and its stored frames.

Layer: command (reads the store read-only, prints to stdout; errors one line on stderr).

Text (control characters shown as ``\\xNN``: a run's ids, outputs and errors come from
an untrusted request): one ``field: value`` line per record field, then ``response:``
(success, nodes run, duration, ``final_output`` or the error, each value clipped to
:data:`CLIP` characters).
``--events`` adds one line per stored frame, in ``seq`` order, read from the store a page
at a time (:data:`~a2e_host.commands.store_access.FRAME_PAGE`), so a run of 100,000
events prints in bounded memory: ``seq  node_id  phase  detail`` where the detail is the
output (``done``; the stored output when the wire frame carried none), the error and its
code (``error``; the code of the failure kept with it, else its ``data.code``), a
recovery's or a tool's ``data`` (``kind`` other than ``status``), and ``resumed`` for a
terminal event sent after a restart (``data.resumed``).

``--json``: the first line is ``{"run": {…record…}, "response": {…chain/resp…} | null}``;
with ``--events`` each stored frame follows as one line, exactly as it was sent.

Exit codes: 0 shown; 1 unknown run, or an expired one (retention pruned its events and
response); 2 usage or a store that is missing or unreadable.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec

from ..store import RunRecord, StoredFrame
from .run_outcomes import error_code
from .runs_list import record_summary
from .store_access import (
    StoreAccessError,
    fail,
    find_run,
    format_duration,
    format_time,
    iter_frames,
    open_readonly,
    printable,
    resolve_store,
)

__all__ = ["CLIP", "frame_line", "response_summary", "runs_show_main"]

CLIP = 160
"""Characters of a value (an output, an error) shown on one line before ``…``."""
_NODE_WIDTH = 12  # node ids are padded to it (the frames come a page at a time)


def runs_show_main(
    run_id: str,
    *,
    events: bool,
    after: int,
    limit: int | None,
    json_out: bool,
    store: str | None,
    config_path: str | None,
) -> int:
    """Show the run ``run_id``.

    Args:
        run_id: the run's id (``runs list`` shows them).
        events: also print its stored frames.
        after: with ``events``: start after this ``seq``.
        limit: with ``events``: at most this many frames; None: all.
        json_out: JSON lines instead of text (see the module docstring).
        store: ``--store``; None: ``A2E_STORE`` or the configuration's ``store``.
        config_path: ``--config``.

    Returns:
        The exit code (see the module docstring).
    """
    try:
        path = resolve_store(store, config_path)
        anyio.run(_show, path, run_id, events, after, limit, json_out)
    except StoreAccessError as exc:
        return fail("runs show", exc)
    return 0


async def _show(path: Path | str, run_id: str, events: bool, after: int, limit: int | None,
                json_out: bool) -> None:
    async with open_readonly(path) as store:
        record = await find_run(store, run_id, path)
        response = _decode(record.response)
        write = sys.stdout.write
        if json_out:
            head = {"run": record_summary(record, time.time()), "response": response}
            write(json.dumps(head, ensure_ascii=False) + "\n")
        else:
            write("".join(printable(line) + "\n" for line in _record_lines(record, response)))
        if not events:
            return
        if not json_out:
            write("events:\n")
        shown = 0
        async for frame in iter_frames(store, run_id, after=after, limit=limit):
            write(frame.frame.decode("utf-8", "replace") + "\n" if json_out
                  else printable(frame_line(frame)) + "\n")
            shown += 1
        if not json_out and not shown:
            write(f"  (none after seq {after})\n" if after else "  (none)\n")


def _record_lines(record: RunRecord, response: dict[str, Any] | None) -> list[str]:
    fields = [
        ("run", record.run_id),
        ("status", str(record.status)),
        ("chain", record.chain_id or "-"),
        ("req", record.req_id or "-"),
        ("principal", record.principal or "-"),
        ("created", format_time(record.created)),
        ("updated", format_time(record.updated)),
        ("duration", format_duration(record, time.time())),
        ("deadline", format_time(record.deadline)),
        ("last seq", str(record.last_seq)),
        ("idempotency key", record.idempotency_key or "-"),
        ("retained until", format_time(record.retention_until)),
        ("owner", f"{record.owner or '-'} (epoch {record.epoch})"),
    ]
    if record.cancel_requested:
        fields.append(("cancel", "requested"))
    fields.append(("response", response_summary(response)))
    width = max(len(name) for name, _ in fields)
    return [f"{name + ':':<{width + 1}} {value}" for name, value in fields]


def response_summary(response: dict[str, Any] | None) -> str:
    """One line about a ``chain/resp`` (decoded): ``succeeded in 245 ms, 3 nodes run;
    final_output: …`` or ``failed (code) at node 'b' in …: message``; ``none yet`` for
    None."""
    if response is None:
        return "none yet"
    timing = f"in {response.get('duration_ms', 0)} ms, {response.get('nodes_run', 0)} " \
             f"node{'s' if response.get('nodes_run', 0) != 1 else ''} run"
    if response.get("success"):
        return f"succeeded {timing}; final_output: {_clip(response.get('final_output'))}"
    error = response.get("error") or {}
    code = f" ({error['code']})" if error.get("code") else ""
    node = f" at node {error['node_id']!r}" if error.get("node_id") else ""
    message = _clip_text(str(error.get("message") or ""))
    return f"failed{code}{node} {timing}" + (f": {message}" if message else "")


def frame_line(frame: StoredFrame) -> str:
    """One stored frame as one line: ``seq  node_id  phase  detail`` (see the module
    docstring); a frame that is not a ``chain/event`` shows its ``type``."""
    body = _decode(frame.frame) or {}
    if body.get("type") not in (None, "chain/event"):
        return f"{frame.seq:>6}  {body.get('type')}"
    detail: list[str] = []
    kind = body.get("kind", "status")
    data = body.get("data") or {}
    if kind != "status":
        detail.append(f"{kind} {_clip(data)}")
    if frame.phase == "done":
        output = body.get("output")
        if output is None and frame.output is not None:
            output = _decode_any(frame.output)
        detail.append(f"output: {_clip(output)}")
    elif frame.phase == "error":
        found = error_code(b"", frame.output) or data.get("code")
        code = f" [{found}]" if isinstance(found, str) and found else ""
        detail.append(f"error{code}: {_clip_text(str(body.get('error', '')))}")
    if kind == "status" and data.get("resumed"):
        detail.append("(resumed)")
    text = f"{frame.seq:>6}  {frame.node_id or '-':<{_NODE_WIDTH}}  {frame.phase or '-':<5}"
    return f"{text}  {'  '.join(detail)}" if detail else text.rstrip()


def _decode(data: bytes | None) -> dict[str, Any] | None:
    value = _decode_any(data) if data else None
    return value if isinstance(value, dict) else None


def _decode_any(data: bytes) -> Any:
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError:
        return data[:CLIP].decode("utf-8", "replace")


def _clip(value: Any) -> str:
    return _clip_text(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _clip_text(text: str) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= CLIP else text[:CLIP - 1] + "…"
