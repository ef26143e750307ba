"""Durable runs in the benchmark: the ``ours_durable`` slot, the replay figure, the report.

``ours_durable`` is ``ours`` (:mod:`bench.impl_ours`: a host built once per process, one
in-memory connection) with a run store: SQLite in a fresh temporary directory,
``synchronous=NORMAL`` (the default durability), and every ``chain/req`` sent with
``durable: true``. The host then answers ``chain/accepted`` first (dropped from the
events the harness checks, its ``run_id`` kept) and sends each frame only once its batch
is committed, the ``chain/resp`` last; the time is taken as for ``ours``, request bytes to
response bytes, so the ratio ``ours_durable ÷ ours`` of one run of ``python -m bench`` is
the price of durability (issue target: ≤ 1.5×). The same ratio in CPU time is given twice:
the process's (every thread: the store's writer thread included) and the event loop's
thread alone (what durability costs the loop every session shares); on a loaded machine
these are steadier than wall time.

Replay (:func:`replay_figure`), after the timed runs, two figures for the last run's log,
frames per second, best of :data:`REPLAY_ROUNDS`: read back through
:meth:`~a2e_host.store.RunStore.frames` a page of :data:`REPLAY_PAGE` at a time, on a
read-only connection; and replayed over a new in-memory connection
to the same host by ``chain/attach {run_id, since_seq: 0}``, request to ``chain/resp``
(the catch-up an agent reconnecting after the end gets).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

import msgspec

from bench.impl_ours import (
    BUFFER_FRAMES,
    EVENT,
    HANDSHAKE,
    OUTBOX_HIGH_WATER,
    RESPONSE,
    Call,
    Unavailable,
    connection_call,
)

__all__ = ["DURABLE_KEYS", "MAP_SIZES", "QUICK_MAP_SIZES", "RATIO_TARGET", "REPLAY_PAGE",
           "load", "map_argv", "map_lines", "replay_figure", "report_lines", "reset",
           "store_path"]

DURABLE_KEYS = ("a", "b", "c", "d")
"""The workloads whose durable ÷ in-memory ratio has a target (e only sleeps)."""
RATIO_TARGET = 1.5
REPLAY_PAGE = 1000
"""Frames per ``frames()`` call when replaying (what an attach's catch-up reads)."""
REPLAY_ROUNDS = 3
MAP_SIZES = (10_000, 100_000)
"""Items of the map ``python -m bench`` runs in memory and durably (``bench.map_memory``)."""
QUICK_MAP_SIZES = (2_000,)
REQUEST_HEAD = b'{"type":"chain/req",'
ACCEPTED = b'{"type":"chain/accepted",'

_state: dict[str, Any] = {"dir": None, "last_run": None, "host": None}


class _Accepted(msgspec.Struct):
    run_id: str = ""


_accepted = msgspec.json.Decoder(_Accepted)


def reset() -> None:
    """Forget this process's host, store and last run: the next :func:`load` opens a new
    store (in a new temporary directory), as a fresh process would."""
    _state.update(dir=None, last_run=None, host=None)


def store_path() -> str:
    """This process's store file (in a temporary directory removed at exit)."""
    if _state["dir"] is None:
        _state["dir"] = tempfile.mkdtemp(prefix="a2e-bench-store-")
        atexit.register(shutil.rmtree, _state["dir"], True)
    return os.path.join(_state["dir"], "runs.sqlite3")


def load() -> Call:
    """``async f(request, sink) -> response`` for the ``ours_durable`` slot.

    Raises:
        Unavailable: ``a2e_host`` cannot be imported.
    """
    try:
        from a2e_host.config import HostConfig
        from a2e_host.limits import Limits
        from a2e_host.logs import configure_logging
        from a2e_host.runtime.host import Host
    except ImportError as exc:
        raise Unavailable(f"a2e_host not importable: {exc}") from exc
    from bench.workloads import HOST_MAX_CONCURRENCY

    configure_logging("json", "info")
    limits = Limits(max_concurrency=HOST_MAX_CONCURRENCY)
    config = HostConfig(tools=("bench",), limits=limits, outbox_high_water=OUTBOX_HIGH_WATER,
                        store=store_path())
    _state["host"] = Host(config)
    return durable_call(_state["host"])


def durable_call(host: Any) -> Call:
    """Send each request with ``durable: true`` to ``host`` (configured with a store);
    the ``chain/accepted`` frame is kept out of the sink, its ``run_id`` remembered."""
    inner = connection_call(host, on_frame=_note_accepted)

    async def call(request: bytes, sink: Callable[[bytes], None]) -> bytes:
        if not request.startswith(REQUEST_HEAD):
            raise AssertionError("a chain/req must begin with its type")
        durable = REQUEST_HEAD + b'"durable":true,' + request[len(REQUEST_HEAD):]
        return await inner(durable, sink)

    return call


def _note_accepted(frame: bytes) -> bool:
    if frame.startswith(ACCEPTED):
        _state["last_run"] = _accepted.decode(frame).run_id
        return True
    return False


async def replay_figure() -> dict[str, Any]:
    """Read the last run's stored frames back, :data:`REPLAY_PAGE` at a time.

    Returns:
        ``{"frames", "replay_frames_per_s", "replay_s"}`` (best of
        :data:`REPLAY_ROUNDS`), or ``{}`` when no run was stored.

    Raises:
        AssertionError: the log read back is not the run's ``seq`` 1, 2, 3 … gapless.
    """
    from a2e_host.store import open_store

    run_id = _state["last_run"]
    if not run_id:
        return {}
    store = await open_store(store_path(), readonly=True)
    try:
        best = float("inf")
        count = 0
        for _ in range(REPLAY_ROUNDS):
            started, count, after = time.perf_counter(), 0, 0
            while True:
                page = await store.frames(run_id, after=after, limit=REPLAY_PAGE)
                for frame in page:
                    count += 1
                    if frame.seq != count:
                        raise AssertionError(f"replay: seq {frame.seq} where {count} was due")
                if len(page) < REPLAY_PAGE:
                    break
                after = page[-1].seq
            best = min(best, time.perf_counter() - started)
    finally:
        await store.aclose()
    figure = {"frames": count, "replay_s": best,
              "replay_frames_per_s": count / best if best > 0 else 0.0}
    figure.update(await _attach_figure(_state["host"], run_id, count))
    return figure


async def _attach_figure(host: Any, run_id: str, frames: int) -> dict[str, Any]:
    """``chain/attach {run_id, since_seq: 0}`` on a new connection to ``host``: the
    finished run's stored events, then its ``chain/resp``, timed from the request to the
    response (best of :data:`REPLAY_ROUNDS`).

    Raises:
        AssertionError: not every stored event came back, or an error did.
    """
    from a2e_host.transports.memory import open_memory_connection

    best = float("inf")
    async with host.running(), open_memory_connection(
        host.serve_connection, buffer_frames=BUFFER_FRAMES
    ) as client:
        client.send(HANDSHAKE)
        if b'"ok":true' not in await client.receive():
            raise AssertionError("attach: the handshake was refused")
        for round_ in range(REPLAY_ROUNDS):
            started, events = time.perf_counter(), 0
            client.send(b'{"type":"chain/attach","id":"attach-%d","run_id":"%s",'
                        b'"since_seq":0}' % (round_, run_id.encode()))
            ended = False
            while not ended:
                for frame in await client.receive_some():
                    if frame.startswith(EVENT):
                        events += 1
                    elif frame.startswith(RESPONSE):
                        ended = True
                    elif not frame.startswith(ACCEPTED):
                        raise AssertionError(f"attach: the host answered {frame[:300]!r}")
            best = min(best, time.perf_counter() - started)
            if events != frames:
                raise AssertionError(f"attach: {events} events replayed, {frames} stored")
    return {"attach_s": best, "attach_frames_per_s": frames / best if best > 0 else 0.0}


def map_argv(sizes: tuple[int, ...]) -> list[str]:
    """``bench.map_memory``'s arguments for each size in memory, then durably (one JSON
    line per size and mode)."""
    return ["-m", "bench.map_memory", *map(str, sizes)]


# ── the report ──────────────────────────────────────────────────────────────


def map_lines(results: list[dict[str, Any]]) -> list[str]:
    """The report's lines for the map runs of :func:`map_argv`."""
    out = ["", "## A map's memory, in memory and durable (`python -m bench.map_memory`, "
           "one process each)", "",
           "| items | run | peak RSS added, MB | most tasks alive | wall s | store on disk, MB "
           "| correct |", "|---|---|---|---|---|---|---|"]
    in_memory = {x["items"]: x["peak_rss_added_mb"] for x in results
                 if x.get("status") == "ok" and not x.get("durable")}
    extra = []
    for x in results:
        run = "durable" if x.get("durable") else "in memory"
        if x.get("status") != "ok":
            out.append(f"| {x.get('items', '?'):,} | {run} | *{x.get('status')}*: "
                       f"{x.get('error') or x.get('reason')} | | | | |")
            continue
        disk = f"{x['store_mb']:.1f}" if "store_mb" in x else "—"
        out.append(f"| {x['items']:,} | {run} | {x['peak_rss_added_mb']:+.1f} | "
                   f"{x['most_tasks_alive']} | {x['wall_s']:.2f} | {disk} | "
                   f"{'yes' if x.get('correct') else '**no**'} |")
        if x.get("durable") and x["items"] in in_memory:
            extra.append(f"{x['items']:,} items "
                         f"{x['peak_rss_added_mb'] - in_memory[x['items']]:+.1f} MB")
    if extra:  # bounded: the same whatever the item count
        out += ["", "What durability adds to the peak, per size: " + ", ".join(extra) + "."]
    return out


def report_lines(inp: dict[str, dict[str, Any]], keys: list[str]) -> list[str]:
    """The report's durable section: per workload ``ours`` and ``ours_durable`` (µs per
    node), their ratio against :data:`RATIO_TARGET`, and the replay figure; ``[]``
    when ``ours_durable`` was not measured."""
    keys = [k for k in keys if "ours_durable" in inp.get(k, {})]
    if not keys:
        return []
    out = ["", "## Durable runs: SQLite run store, synchronous=NORMAL (`durable: true`, each "
           "frame sent once its batch is committed); same run as the in-memory figures", "",
           "| workload | in-memory µs/node | durable µs/node | durable ÷ in-memory "
           f"(target ≤ {RATIO_TARGET}×) | the same in CPU time: all threads / the loop's "
           "| replay frames/s: store `frames()` | replay frames/s: `chain/attach` |",
           "|---|---|---|---|---|---|---|"]
    for k in keys:
        base, dur = inp[k].get("ours") or {}, inp[k]["ours_durable"]
        if dur.get("status") != "ok":
            why = dur.get("error") or dur.get("reason")
            out.append(f"| {k} | — | *{dur.get('status')}*: {why} | — | — | — | — |")
            continue
        ratio = cpu_ratio = "—"
        if base.get("status") == "ok":
            r = dur["median_s"] / base["median_s"]
            mark = ("✓" if r <= RATIO_TARGET else "✗") if k in DURABLE_KEYS else "(no target)"
            ratio = f"{r:.2f}× {mark}"
            if base.get("loop_cpu_median_s") and dur.get("loop_cpu_median_s"):
                cpu_ratio = (f"{dur['cpu_median_s'] / base['cpu_median_s']:.2f}× / "
                             f"{dur['loop_cpu_median_s'] / base['loop_cpu_median_s']:.2f}×")
        replay = dur.get("replay") or {}
        rate = (f"{replay['replay_frames_per_s']:,.0f} ({replay['frames']:,} frames)"
                if replay.get("replay_frames_per_s") else "—")
        attach = (f"{replay['attach_frames_per_s']:,.0f}"
                  if replay.get("attach_frames_per_s") else "—")
        in_mem = f"{base['us_per_unit']:.1f}" if base.get("status") == "ok" else "—"
        out.append(f"| {k} | {in_mem} | {dur['us_per_unit']:.1f} | {ratio} | {cpu_ratio} | "
                   f"{rate} | {attach} |")
    return out

