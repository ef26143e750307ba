"""``python -m bench.telemetry [--quick] [--runs N] [--workloads a,b,c,d]``: what
tracing and metrics cost a2e-host, in one process, runs interleaved.

One host in-process (the ``ours`` slot: :mod:`bench.impl_ours`), one connection, and for
every workload each round runs the same request once per **mode**, the modes' order
rotating from round to round so load drift and order effects are shared:

- ``absent``: the telemetry hooks replaced by stubs that do nothing (the engine's
  per-run and per-chain questions answered by built-ins, the chain counters no-ops): the
  yardstick of a build without them;
- ``off``: the default: no exporter configured (no span is ever made);
- ``on``: tracing on, every span kept by OpenTelemetry's ``InMemorySpanExporter``
  through a ``SimpleSpanProcessor`` (exported synchronously, on the loop: the whole cost
  lands in the timed path), no console output;
- ``timing``: node durations measured for the metrics, as ``serve`` does while it has a
  ``/metrics`` endpoint.

Prints one JSON line: per workload the median seconds per mode (wall, and CPU seconds of
the event loop's thread, which a loaded machine's waits do not inflate) and each mode's
overhead over ``absent`` in percent (``overhead_pct`` on the loop's CPU time,
``wall_overhead_pct`` on wall time), and ``off_hooks_ns_per_chain``: what the off path's hooks cost
per chain request measured directly (a few function calls per chain and per run, none per
node), the bound the noisy A/B difference cannot resolve.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import time
import timeit
from typing import Any

from bench.workloads import NAMES, QUICK_SIZES, Workload, check_response

MODES = ("absent", "off", "on", "timing")


class Modes:
    """Switches the host's telemetry between the modes (outside the timed region)."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        from a2e_host.telemetry import chain_spans, metrics

        self.chain_spans, self.metrics = chain_spans, metrics
        self.real = {name: getattr(chain_spans, name) for name in (
            "attempt_runner", "item_runner", "reports_for_run", "chain_span_needed")}
        self.real_counters = (metrics.chain_started, metrics.chain_finished)
        self.exporter_class = InMemorySpanExporter
        self.exporter = InMemorySpanExporter()
        self.processor = SimpleSpanProcessor
        self.spans = 0

    def enter(self, mode: str) -> None:
        cs, m = self.chain_spans, self.metrics
        if mode == "absent":
            cs.attempt_runner = cs.item_runner = _same  # type: ignore[assignment]
            cs.reports_for_run = dict  # type: ignore[assignment]
            cs.chain_span_needed = bool  # type: ignore[assignment]
            m.chain_started = _nothing  # type: ignore[assignment]
            m.chain_finished = _nothing  # type: ignore[assignment]
        elif mode == "on":
            from a2e_host.telemetry import tracing

            self.exporter = self.exporter_class()  # a disabled provider shut the last down
            tracing.enable(self.processor(self.exporter))
        elif mode == "timing":
            m.NODE_TIMING = True

    def leave(self, mode: str) -> None:
        cs, m = self.chain_spans, self.metrics
        for name, fn in self.real.items():
            setattr(cs, name, fn)
        m.chain_started, m.chain_finished = self.real_counters
        m.NODE_TIMING = False
        if mode == "on":
            from a2e_host.telemetry import tracing

            self.spans = len(self.exporter.get_finished_spans())
            tracing.disable()


def _same(fn: Any) -> Any:
    return fn


def _nothing(*_args: Any, **_kwargs: Any) -> None:
    return None


class _Stream:
    """Stands for a request's event stream (the counters read its ``seq``)."""

    __slots__ = ("seq",)

    def __init__(self) -> None:
        self.seq = 0


def off_hooks_ns_per_chain(n: int = 200_000) -> float:
    """Nanoseconds the off path's hooks add to one chain request of one run and one map
    (what the engine calls: the run's attempt and reports, the map's item runner, the
    chain span question, the two chain counters), over the same calls stubbed."""
    from a2e_host.chains.attempt import run_attempt
    from a2e_host.telemetry import chain_spans as cs
    from a2e_host.telemetry import metrics as m

    stream = _Stream()

    def hooks() -> None:
        cs.reports_for_run()
        cs.attempt_runner(run_attempt)
        cs.item_runner(run_attempt)
        cs.chain_span_needed()
        m.chain_started(stream)
        m.chain_finished("ok", stream=stream)

    def stubs() -> None:  # what ``absent`` calls in their place
        _nothing()
        _same(run_attempt)
        _same(run_attempt)
        _nothing(stream)
        _nothing("ok", stream=stream)

    # n calls of each, best of 5, on this thread's CPU time (a loaded machine's waits are
    # not counted)
    real = min(timeit.repeat(hooks, number=n, repeat=5, timer=time.thread_time)) / n
    stub = min(timeit.repeat(stubs, number=n, repeat=5, timer=time.thread_time)) / n
    m.reset()
    return max(0.0, real - stub) * 1e9


def measure(keys: list[str], runs: int, warmup: int, quick: bool) -> dict[str, Any]:
    from bench import impl_ours

    call = impl_ours.load()
    modes = Modes()
    out: dict[str, Any] = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           "loadavg_at_start": os.getloadavg(), "runs": runs,
                           "warmup": warmup, "quick": quick, "workloads": {}}
    for key in keys:
        w = Workload(key, QUICK_SIZES[key] if quick else None)
        times, cpu, spans = asyncio.run(_session(call, modes, w, runs, warmup))
        med = {mode: statistics.median(ts) for mode, ts in times.items()}
        med_cpu = {mode: statistics.median(ts) for mode, ts in cpu.items()}
        out["workloads"][key] = {
            "name": NAMES[key], "units": w.units, "spans_per_run": spans,
            "median_s": med, "cpu_median_s": med_cpu,
            "min_s": {mode: min(ts) for mode, ts in times.items()},
            "overhead_pct": {mode: 100 * (med_cpu[mode] / med_cpu["absent"] - 1)
                             for mode in MODES if mode != "absent"},
            "cpu_min_s": (low := {mode: min(ts) for mode, ts in cpu.items()}),
            "min_overhead_pct": {mode: 100 * (low[mode] / low["absent"] - 1)
                                 for mode in MODES if mode != "absent"},
            # each round's own ratio (the same few seconds of machine), then their median
            "paired_overhead_pct": {
                mode: 100 * (statistics.median(
                    m / a for m, a in zip(cpu[mode], cpu["absent"], strict=True)) - 1)
                for mode in MODES if mode != "absent"},
            "wall_overhead_pct": {mode: 100 * (med[mode] / med["absent"] - 1)
                                  for mode in MODES if mode != "absent"},
        }
        print(f"{NAMES[key]:>18}: " + ", ".join(
            f"{mode} {med[mode] * 1e3:.1f} ms" for mode in MODES), file=sys.stderr,
            flush=True)
    out["off_hooks_ns_per_chain"] = off_hooks_ns_per_chain(10_000 if quick else 200_000)
    out["loadavg_at_end"] = os.getloadavg()
    return out


async def _session(call: Any, modes: Modes, w: Workload, runs: int, warmup: int
                   ) -> tuple[dict[str, list[float]], dict[str, list[float]], int]:
    """Each round runs ``w`` once per mode, the order rotating (reversed every other
    cycle); wall and loop-thread CPU
    seconds per mode (after ``warmup`` rounds), and the spans of the last ``on`` run."""
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    cpu: dict[str, list[float]] = {mode: [] for mode in MODES}
    spans = 0
    for r in range(warmup + runs):
        order = [MODES[(r + j) % len(MODES)] for j in range(len(MODES))]
        if (r // len(MODES)) % 2:  # every mode follows each other one as often
            order.reverse()
        for mode in order:
            events: list[bytes] = []
            req = w.request()
            modes.enter(mode)
            gc.collect()
            try:
                t, c = time.perf_counter(), time.thread_time()
                resp = await call(req, events.append)
                dt, dc = time.perf_counter() - t, time.thread_time() - c
                for _ in range(3):  # untimed: the run ends (its chain span too) after its response
                    await asyncio.sleep(0)
            finally:
                modes.leave(mode)
            if mode == "on":
                spans = modes.spans
            if events and events[-1] == resp:
                events.pop()
            check_response(w, resp, events)
            if r >= warmup:
                times[mode].append(dt)
                cpu[mode].append(dc)
    return times, cpu, spans


def report_lines(r: dict[str, Any] | None) -> list[str]:
    """The markdown section of ``python -m bench``'s report."""
    if not r or "workloads" not in r:
        return [] if not r else ["", f"Telemetry overhead: *{r.get('status')}*: "
                                 f"{r.get('error')}"]
    out = ["", "## Telemetry overhead (one process, modes interleaved per round)", "",
           f"{r['when']} · load average {r['loadavg_at_start'][0]:.2f} at start, "
           f"{r['loadavg_at_end'][0]:.2f} at end · median of {r['runs']} runs per mode · "
           "`absent`: hooks stubbed out; `off`: the default (no exporter); `on`: every "
           "span to an in-memory exporter, synchronously; `timing`: node durations for "
           "`/metrics`. Overhead = CPU time of the event loop's thread ÷ `absent`'s − 1: "
           "of the medians, of the minima (contention only adds), and paired (the median "
           "of each round's own ratio: the same seconds of machine). The off path's hooks "
           f"measured alone: {r['off_hooks_ns_per_chain']:.0f} ns per chain request "
           "(nothing per node).", "",
           "| workload | absent: loop CPU ms, median (wall) | off: median / min / paired | "
           "on: median / min / paired (spans per run) | timing: median / min / paired |",
           "|---|---|---|---|---|"]
    for x in r["workloads"].values():
        med, pct = x["cpu_median_s"], x["overhead_pct"]
        low = x.get("min_overhead_pct", pct)
        pair = x.get("paired_overhead_pct", pct)

        def both(mode: str, pct: dict[str, float] = pct, low: dict[str, float] = low,
                 pair: dict[str, float] = pair) -> str:
            return f"{pct[mode]:+.1f} / {low[mode]:+.1f} / {pair[mode]:+.1f} %"

        out.append(
            f"| {x['name']} | {med['absent'] * 1e3:.1f} ({x['median_s']['absent'] * 1e3:.1f})"
            f" | {both('off')} | {both('on')} ({x['spans_per_run']}) | {both('timing')} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.telemetry",
                                 description=__doc__.split("\n")[0], allow_abbrev=False)
    ap.add_argument("--quick", action="store_true", help="small sizes (correctness)")
    ap.add_argument("--runs", type=int, default=None, help="timed runs per mode (default 9)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--workloads", default="a,b,c,d")
    a = ap.parse_args(argv)
    keys = [k.strip() for k in a.workloads.split(",") if k.strip()]
    for k in keys:
        if k not in NAMES or k == "e":
            ap.error(f"unknown workload {k!r}: one of a, b, c, d")
    runs = a.runs or (1 if a.quick else 9)
    json.dump(measure(keys, runs, a.warmup, a.quick), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
