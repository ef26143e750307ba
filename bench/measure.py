"""One measurement, in its own process: ``python -m bench.measure IMPL WORKLOAD``.

Prints one JSON object on stdout. Run by ``bench.run`` in a fresh subprocess per
implementation × workload, so peak RSS belongs to that pair alone.

Procedure: load the workload and the implementation, ``gc.collect()``, note the current RSS
(the baseline), run ``--warmup`` untimed runs then ``--runs`` timed ones (each a fresh
request id, ``gc.collect()`` before, timed from request bytes to response bytes: decode,
validation, scheduling, event and response encoding), verify *every* run's response and
events (a wrong result exits 1 with ``status: "error"``), then read the peak RSS
(``ru_maxrss``) and finally do one extra run under ``tracemalloc`` for the Python-heap peak.

Implementations (``IMPLS``): ``spec`` (a thread per node and per map item, 10 ms poll),
``spec_tick`` (the same, each pass sleeping a full tick), ``spec_pooled_map`` (map items on
a pool of 64 threads instead),
``minimal`` (asyncio, readiness counters),
``minimal_fast`` (+ dotted-path fast path), ``ours`` (a host, over its in-memory
connection), ``ours_durable`` (the same host with a SQLite run store, every request
``durable``; plus the replay figure: ``bench.durable``), ``ours_durable_pg`` (the same
with the store in PostgreSQL: ``bench.pg``); optional peers ``chainweaver``
and ``langgraph`` (``bench.peers``: "unavailable" when not installed, "unsupported" for a
chain they cannot express).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from bench.impl_ours import Unavailable
from bench.peers import PEERS, Unsupported, installed
from bench.workloads import NAMES, QUICK_SIZES, Workload, check_response

IMPLS = ["spec", "spec_tick", "spec_pooled_map", "minimal", "minimal_fast", "ours",
         "ours_durable", "ours_durable_pg", *PEERS]
#: The peers join the default run only when their library is installed.
DEFAULT_IMPLS = ["spec", "minimal", "minimal_fast", "ours", "ours_durable", "ours_durable_pg",
                 *[p for p in PEERS if installed(p)]]

Runner = Callable[[bytes, Callable[[bytes], None]], Any]


def load(impl: str) -> tuple[bool, Runner]:
    """Return (is_async, f(request, sink) -> response or awaitable of it)."""
    if impl.startswith("spec"):
        from bench import reference_spec

        tick, per_item = impl == "spec_tick", impl != "spec_pooled_map"
        return False, lambda r, s: reference_spec.run_request(
            r, sink=s, tick_wait=tick, thread_per_item=per_item)
    if impl in ("minimal", "minimal_fast"):
        from bench import reference_minimal

        fast = impl == "minimal_fast"
        return True, lambda r, s: reference_minimal.run_request(r, sink=s, fast=fast)
    if impl == "ours":
        from bench import impl_ours

        return True, impl_ours.load()
    if impl == "ours_durable":
        from bench import durable

        return True, durable.load()
    if impl == "ours_durable_pg":
        from bench import pg

        return True, pg.load()
    if impl in PEERS:
        from bench import peers

        return True, peers.load(impl)
    raise SystemExit(f"unknown implementation {impl!r}; one of {', '.join(IMPLS)}")


def current_rss() -> int:
    """Resident set size now, in bytes (Linux /proc)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def peak_rss() -> int:
    """Peak resident set size of this process so far, in bytes."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(impl: str, key: str, runs: int, warmup: int, size: int | None) -> dict[str, Any]:
    w = Workload(key, size)
    out: dict[str, Any] = {"impl": impl, "workload": w.name, "key": key, "size": size,
                           "units": w.units, "events": w.events}
    try:
        is_async, fn = load(impl)
    except Unavailable as exc:
        return out | {"status": "unavailable", "reason": str(exc)}

    times: list[float] = []
    cpu_times: list[float] = []  # process CPU seconds (every thread) of each timed run
    loop_cpu_times: list[float] = []  # CPU seconds of the thread running the event loop

    async def one_async(req: bytes, sink: Callable[[bytes], None]) -> tuple[float, bytes]:
        t = time.perf_counter()
        resp = await fn(req, sink)
        return time.perf_counter() - t, resp

    def one_sync(req: bytes, sink: Callable[[bytes], None]) -> tuple[float, bytes]:
        t = time.perf_counter()
        resp = fn(req, sink)
        return time.perf_counter() - t, resp

    async def session(n: int, traced: bool = False) -> int | None:
        peak = None
        for r in range(n):
            events: list[bytes] = []
            req = w.request()
            gc.collect()
            if traced:
                tracemalloc.start()
            cpu, loop_cpu = time.process_time(), time.thread_time()
            dt, resp = await one_async(req, events.append) if is_async else \
                one_sync(req, events.append)
            cpu, loop_cpu = time.process_time() - cpu, time.thread_time() - loop_cpu
            if traced:
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
            if events and events[-1] == resp:  # a sink that also receives the chain/resp
                events.pop()
            check_response(w, resp, events)
            if r >= warmup and not traced:
                times.append(dt)
                cpu_times.append(cpu)
                loop_cpu_times.append(loop_cpu)
        return peak

    gc.collect()
    base = current_rss()
    try:
        asyncio.run(session(warmup + runs))
        peak = peak_rss()
        py_peak = asyncio.run(session(1, traced=True))
    except AssertionError as exc:
        return out | {"status": "error", "error": str(exc)}
    except Unsupported as exc:
        return out | {"status": "unsupported", "reason": str(exc)}
    if impl == "ours_durable":
        from bench import durable

        try:
            out["replay"] = asyncio.run(durable.replay_figure())
        except AssertionError as exc:
            return out | {"status": "error", "error": str(exc)}
    med = statistics.median(times)
    per = 1e6 / w.units
    return out | {
        "status": "ok", "runs": len(times), "warmup": warmup, "loadavg": os.getloadavg(),
        "times_s": times, "median_s": med,
        "min_s": min(times), "max_s": max(times),
        "cpu_times_s": cpu_times, "cpu_median_s": statistics.median(cpu_times),
        "loop_cpu_times_s": loop_cpu_times,
        "loop_cpu_median_s": statistics.median(loop_cpu_times),
        "us_per_unit": med * per, "us_per_unit_min": min(times) * per,
        "us_per_unit_max": max(times) * per,
        "events_per_s": w.events / med,
        "rss_base_mb": base / 2**20, "rss_peak_mb": peak / 2**20,
        "rss_added_mb": (peak - base) / 2**20,
        "py_heap_peak_mb": (py_peak or 0) / 2**20,
    }


def _fresh_state(impl: str) -> None:
    """Before another workload in the same process: a durable host and store of its own
    (the replay figure reads the last run of *this* workload's store)."""
    if impl == "ours_durable":
        from bench import durable

        durable.reset()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.measure",
                         description=__doc__.split("\n")[0], allow_abbrev=False)
    ap.add_argument("impl", choices=IMPLS)
    ap.add_argument("workload", type=str,
                    help="a..e or a workload name; with --quick-sizes a comma list")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--size", type=int, default=None, help="a smaller version of the shape")
    ap.add_argument("--quick-sizes", action="store_true",
                    help="every workload listed, each at its quick size, one JSON line each, "
                    "in this one process (the quick check: correctness, not RSS per pair)")
    a = ap.parse_args(argv)
    keys = []
    for part in a.workload.split(",") if a.quick_sizes else [a.workload]:
        key = next((k for k, v in NAMES.items() if part.strip() in (k, v)), None)
        if key is None:
            ap.error(f"unknown workload {part!r}")
        keys.append(key)
    failed = False
    for n, key in enumerate(keys):
        if n:
            _fresh_state(a.impl)
        res = measure(a.impl, key, a.runs, a.warmup,
                      QUICK_SIZES[key] if a.quick_sizes else a.size)
        json.dump(res, sys.stdout)
        sys.stdout.write("\n")
        sys.stdout.flush()
        failed = failed or res["status"] == "error"
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
