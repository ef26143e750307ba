"""The benchmark driver: ``python -m bench [--quick] [--runs N] [--workloads a,b,..] [--out DIR]``.

For every workload × implementation it starts a fresh ``python -m bench.measure IMPL KEY``
(so peak RSS belongs to that pair alone), then the end-to-end runs (``bench.e2e``: the
real ``a2e-host`` over stdio and WebSocket, and the minimal reference behind
``bench.fake_host`` as the wire yardstick) and the micro figures (``bench.micro``).
Writes ``<out>/latest.json`` and ``<out>/latest.md`` (``--quick``: ``quick.json`` /
``quick.md``). Exit status 1 when any result was wrong (a wrong result is an error, never
a number) or a reference failed; "unavailable" (the host's API or CLI not there yet) is
not a failure.

``--quick``: small versions of each workload, 1 run, no warm-up, no micro figures, one
measurement process per implementation running every workload in turn (``bench.measure
--quick-sizes``), three at once (``--jobs``), and end to end one host process per host and
transport running every workload in turn: a correctness check for CI.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from bench import durable, pg, telemetry
from bench.measure import DEFAULT_IMPLS, IMPLS
from bench.peers import PEERS
from bench.workloads import HOST_MAX_CONCURRENCY, NAMES, QUICK_SIZES

ROOT = Path(__file__).resolve().parent.parent
LABELS = {
    "spec": "spec reference design (a thread per node and per map item, 10 ms poll)",
    "spec_tick": "spec design, each pass waits a full 10 ms tick",
    "spec_pooled_map": "spec design, map items on a pool of 64 threads",
    "minimal": "minimal asyncio scheduler (readiness counters, expr cache, msgspec)",
    "minimal_fast": "minimal + fast path for dotted paths",
    "ours": "**a2e-host, in-process** (in-memory connection)",
    "ours_durable": "a2e-host, durable runs (SQLite store, synchronous=NORMAL)",
    "ours_durable_pg": "a2e-host, durable runs (PostgreSQL store, synchronous_commit=on)",
    "chainweaver": "chainweaver 0.14.1 (DAGFlow, async lane; events from the node callable)",
    "langgraph": "langgraph 1.2.24 (StateGraph, Send map; events from the node callable)",
}
COLS = {"a": "a linear 1000", "b": "b fan-out 1000", "c": "c map 10k (per item)",
        "d": "d diamond 5000", "e": "e 100×50 ms sleep (wall)"}
#: The README's medians (2-core machine), µs per node; e in ms. For the ratio comparison.
README_FIGURES = {
    "minimal": {"a": 69, "b": 63, "c": 17, "d": 123, "e": 56},
    "minimal_fast": {"a": 37, "b": 48, "c": 20, "d": 55, "e": 56},
    "spec": {"a": 317, "b": 300, "c": 289, "d": 642, "e": 143},
}
SUBPROCESS_TIMEOUT = 1800  # seconds, per measurement process


def _run_json(argv: list[str]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    try:
        p = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=SUBPROCESS_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "error": f"timed out after {SUBPROCESS_TIMEOUT} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = p.stderr.strip().splitlines()[-5:]
        return {"status": "failed", "error": f"exit {p.returncode}, no result", "stderr": tail}
    res: dict[str, Any] = json.loads(lines[-1])
    return res


def _run_json_lines(argv: list[str], expected: int) -> list[dict[str, Any]]:
    """Like :func:`_run_json` for a command printing one JSON line per result."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    try:
        p = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=SUBPROCESS_TIMEOUT)
    except subprocess.TimeoutExpired:
        return [{"status": "failed", "error": f"timed out after {SUBPROCESS_TIMEOUT} s"}
                ] * expected
    found = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    if len(found) != expected:
        tail = p.stderr.strip().splitlines()[-5:]
        return [{"status": "failed", "error": f"exit {p.returncode}, {len(found)} of "
                 f"{expected} results", "stderr": tail}] * expected
    return found


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def merge_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One result from several rounds of the same measurement: all timed runs pooled
    (median, min, max over them), memory figures the worst round's."""
    if len(rounds) == 1 or any(r.get("status") != "ok" for r in rounds):
        bad = [r for r in rounds if r.get("status") != "ok"]
        return bad[0] if bad else rounds[0]
    times = [t for r in rounds for t in r["times_s"]]
    cpu = [t for r in rounds for t in r.get("cpu_times_s", [])]
    loop_cpu = [t for r in rounds for t in r.get("loop_cpu_times_s", [])]
    med = statistics.median(times)
    units, events = rounds[0]["units"], rounds[0]["events"]
    per = 1e6 / units
    out = dict(rounds[0])
    out.update(
        runs=len(times), rounds=len(rounds), times_s=times, median_s=med, min_s=min(times),
        max_s=max(times), us_per_unit=med * per, us_per_unit_min=min(times) * per,
        us_per_unit_max=max(times) * per, events_per_s=events / med,
        loadavg=[r.get("loadavg") for r in rounds],
        **({"cpu_times_s": cpu, "cpu_median_s": statistics.median(cpu),
            "loop_cpu_times_s": loop_cpu, "loop_cpu_median_s": statistics.median(loop_cpu)}
           if cpu and loop_cpu else {}),
        **{k: max(r[k] for r in rounds)
           for k in ("rss_peak_mb", "rss_added_mb", "py_heap_peak_mb")})
    return out


def _run_all(tasks: list[Callable[[], Any]], jobs: int) -> list[Any]:
    """Call each task in a thread, ``jobs`` at once (each starts and waits for a
    measurement process); results in task order."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(lambda task: task(), tasks))


def collect(keys: list[str], impls: list[str], runs: int, warmup: int, quick: bool,
            e2e: bool, micro: bool, e2e_runs: int, rounds: int = 1,
            jobs: int = 1) -> dict[str, Any]:
    """Run every measurement. ``jobs`` > 1 runs that many measurement processes at once
    (for ``--quick``, where only correctness counts: concurrent runs disturb the times);
    with 1 they run one after another, as timing needs."""
    results: dict[str, Any] = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "python": platform.python_version(), "processor": platform.processor()},
        "settings": {"runs": runs, "warmup": warmup, "quick": quick, "rounds": rounds,
                     "jobs": jobs},
        "loadavg_at_start": os.getloadavg(),
        "inprocess": {}, "e2e": [], "micro": None,
    }
    if jobs > 1 or quick:
        return _collect_concurrently(results, keys, impls, runs, warmup, quick, e2e, micro,
                                     e2e_runs, rounds, jobs)
    for k in keys:
        size = QUICK_SIZES[k] if quick else None
        by_impl: dict[str, list[dict[str, Any]]] = {i: [] for i in impls}
        gone: set[str] = set()  # unavailable here: not retried in later rounds
        for rnd in range(rounds):  # rounds interleave the implementations: load drift is shared
            for impl in impls:
                if impl in gone:
                    continue
                res = _run_json(_measure_argv(impl, k, runs, warmup, size))
                by_impl[impl].append(res)
                _progress(f"{NAMES[k]:>18} {impl:>13} (round {rnd + 1}): {_brief(res)}")
                if res.get("status") == "unavailable":
                    gone.add(impl)
        results["inprocess"][k] = {i: merge_rounds(rs) for i, rs in by_impl.items() if rs}
    if e2e and quick:
        for host in ("reference", "ours"):
            for transport in ("stdio", "ws"):
                found = _run_json_lines(_e2e_quick_argv(transport, keys, host, e2e_runs,
                                                        warmup), len(keys))
                _add_e2e(results, host, transport, keys, found)
    elif e2e:
        for host in ("reference", "ours"):
            for transport in ("stdio", "ws"):
                for k in keys:
                    res = _e2e_result(_run_json(_e2e_argv(transport, k, host, e2e_runs,
                                                          warmup)), host, transport, k)
                    results["e2e"].append(res)
                    _progress(f"{NAMES[k]:>18} {host}/{transport}: {_brief(res)}")
                    if res.get("status") == "unavailable":
                        break  # the same for every workload
    if micro:
        results["micro"] = _run_json(["-m", "bench.micro"])
    if not quick and {"a", "b", "c", "d"} & set(keys):  # tracing off / on (bench.telemetry)
        results["telemetry"] = _run_json(
            ["-m", "bench.telemetry", "--workloads", ",".join(k for k in keys if k != "e")])
    return results


def _measure_argv(impl: str, k: str, runs: int, warmup: int, size: int | None) -> list[str]:
    argv = ["-m", "bench.measure", impl, k, "--runs", str(runs), "--warmup", str(warmup)]
    return argv + (["--size", str(size)] if size else [])


def _measure_quick_argv(impl: str, keys: list[str], runs: int, warmup: int) -> list[str]:
    """Every workload, at its quick size, in one ``bench.measure`` process."""
    return ["-m", "bench.measure", impl, ",".join(keys), "--runs", str(runs), "--warmup",
            str(warmup), "--quick-sizes"]


def _e2e_argv(transport: str, k: str, host: str, e2e_runs: int, warmup: int) -> list[str]:
    """One workload on a host process of its own (a full run)."""
    return ["-m", "bench.e2e", transport, k, "--host", host, "--runs", str(e2e_runs),
            "--warmup", str(warmup)]


def _e2e_quick_argv(transport: str, keys: list[str], host: str, e2e_runs: int,
                    warmup: int) -> list[str]:
    """Every workload, at its quick size, on one host process (``bench.e2e``)."""
    return ["-m", "bench.e2e", transport, ",".join(keys), "--host", host, "--runs",
            str(e2e_runs), "--warmup", str(warmup), "--quick-sizes"]


def _add_e2e(results: dict[str, Any], host: str, transport: str, keys: list[str],
             found: list[dict[str, Any]]) -> None:
    """Record one host/transport's results, one per workload; an "unavailable" host
    is recorded once, as for one process per workload."""
    for k, res in zip(keys, found, strict=True):
        res = _e2e_result(dict(res), host, transport, k)
        results["e2e"].append(res)
        _progress(f"{NAMES[k]:>18} {host}/{transport}: {_brief(res)}")
        if res.get("status") == "unavailable":
            break


def _e2e_result(res: dict[str, Any], host: str, transport: str, k: str) -> dict[str, Any]:
    res.setdefault("host", host)
    res.setdefault("transport", transport)
    res.setdefault("key", k)
    return res


def _collect_concurrently(results: dict[str, Any], keys: list[str], impls: list[str],
                          runs: int, warmup: int, quick: bool, e2e: bool, micro: bool,
                          e2e_runs: int, rounds: int, jobs: int) -> dict[str, Any]:
    """:func:`collect` with ``jobs`` measurement processes at once; the same results."""

    def measure(k: str, rnd: int, impl: str) -> dict[str, Any]:
        res = _run_json(_measure_argv(impl, k, runs, warmup, QUICK_SIZES[k] if quick else None))
        _progress(f"{NAMES[k]:>18} {impl:>13} (round {rnd + 1}): {_brief(res)}")
        return res

    def measure_quick(rnd: int, impl: str) -> list[dict[str, Any]]:
        """Every workload of one implementation in one process (correctness only)."""
        found = _run_json_lines(_measure_quick_argv(impl, keys, runs, warmup), len(keys))
        for k, res in zip(keys, found, strict=True):
            _progress(f"{NAMES[k]:>18} {impl:>13} (round {rnd + 1}): {_brief(res)}")
        return found

    def end_to_end(host: str, transport: str) -> list[dict[str, Any]]:
        if quick:  # one host process for every workload: correctness only
            return _run_json_lines(_e2e_quick_argv(transport, keys, host, e2e_runs, warmup),
                                   len(keys))
        return [_run_json(_e2e_argv(transport, k, host, e2e_runs, warmup)) for k in keys]

    inproc = [(k, rnd, impl) for k in keys for rnd in range(rounds) for impl in impls]
    ends = [(host, transport) for host in ("reference", "ours")
            for transport in ("stdio", "ws")] if e2e else []
    tasks: list[Callable[[], Any]] = [partial(end_to_end, h, t) for h, t in ends]
    if quick:  # one process per implementation and round: ~5 processes, not ~25
        pairs = [(rnd, impl) for rnd in range(rounds) for impl in impls]
        tasks += [partial(measure_quick, rnd, impl) for rnd, impl in pairs]
    else:
        tasks += [partial(measure, k, rnd, impl) for k, rnd, impl in inproc]
    if micro:
        tasks.append(partial(_run_json, ["-m", "bench.micro"]))
    everything = _run_all(tasks, jobs)
    for (host, transport), found in zip(ends, everything, strict=False):
        _add_e2e(results, host, transport, keys, found)
    measured = everything[len(ends):]
    if quick:  # back to one result per (workload, round, implementation), as inproc
        by_pair = dict(zip(pairs, measured[:len(pairs)], strict=True))
        measured = [by_pair[rnd, impl][keys.index(k)] for k, rnd, impl in inproc]
    for k in keys:
        by_impl: dict[str, list[dict[str, Any]]] = {i: [] for i in impls}
        for (key, _, impl), res in zip(inproc, measured, strict=False):
            if key == k and not (by_impl[impl] and by_impl[impl][0].get("status")
                                 == "unavailable"):
                by_impl[impl].append(res)
        results["inprocess"][k] = {i: merge_rounds(rs) for i, rs in by_impl.items() if rs}
    if micro:
        results["micro"] = everything[-1]
    return results


def _brief(res: dict[str, Any]) -> str:
    if res.get("status") == "ok":
        return f"ok, {res['us_per_unit']:.1f} µs/unit, median {res['median_s'] * 1e3:.1f} ms"
    return f"{res.get('status')}: {res.get('reason') or res.get('error')}"


# --------------------------------------------------------------------------- report

def _cell(res: dict[str, Any] | None, key: str) -> str:
    if not res:
        return "—"
    if res.get("status") != "ok":
        return f"*{res.get('status')}*"
    if key == "e":
        return (f"{res['median_s'] * 1e3:.1f} ms ({res['min_s'] * 1e3:.1f}–"
                f"{res['max_s'] * 1e3:.1f})")
    return (f"{res['us_per_unit']:.1f} ({res['us_per_unit_min']:.1f}–"
            f"{res['us_per_unit_max']:.1f})")


def _ratio(base: dict[str, Any] | None, res: dict[str, Any] | None) -> str:
    if not base or not res or base.get("status") != "ok" or res.get("status") != "ok":
        return "—"
    return f"{base['median_s'] / res['median_s']:.2f}×"


def report(r: dict[str, Any]) -> str:
    inp: dict[str, dict[str, Any]] = r["inprocess"]
    keys = list(inp)
    impls: list[str] = []
    for k in keys:
        impls += [i for i in inp[k] if i not in impls]
    s = r["settings"]
    m = r["machine"]
    rounds = f" × {s['rounds']} interleaved rounds" if s.get("rounds", 1) > 1 else ""
    at_once = (f", {s['jobs']} measurements at once" if s.get("jobs", 1) > 1 else "")
    kind = (f"quick check: small sizes, one run{at_once}, every workload of an "
            "implementation in one process, end to end one host per transport for all "
            "workloads, correctness only; the times are not comparable with a full run"
            if s["quick"] else "full")
    out = [f"# a2e-host benchmark ({kind})", "",
           f"{r['when']} · {m['platform']} · {m['cpus']} CPUs · Python {m['python']} · "
           f"load average at start {r.get('loadavg_at_start', ['?'])[0]:.2f} · "
           f"median of {s['runs']} runs after {s['warmup']} warm-up"
           f"{rounds}"
           " · each implementation × "
           "workload in a fresh process · time = request bytes → response bytes (decode, "
           "validate, schedule, encode events into an in-memory sink, encode the response) · "
           "every run's final_output, nodes_run and event seq verified · a2e-host runs with "
           f"max_concurrency {HOST_MAX_CONCURRENCY} (its default ceiling is 64; workload e "
           "has 100 independent sleepers and the references have no ceiling).", ""]
    hdr = "| implementation | " + " | ".join(COLS[k] for k in keys) + " |"
    sep = "|---|" + "---|" * len(keys)

    out += ["## In-process: µs per node, median (min–max); e: wall time", "", hdr, sep]
    for i in impls:
        out.append(f"| {LABELS.get(i, i)} | " + " | ".join(_cell(inp[k].get(i), k)
                                                          for k in keys) + " |")
    out += ["", "## Speed-up against the spec's reference design (its median ÷ this median; "
            "> 1 is faster)", "", hdr, sep]
    for i in impls:
        if i == "spec":
            continue
        out.append(f"| {LABELS.get(i, i)} | " + " | ".join(
            _ratio(inp[k].get("spec"), inp[k].get(i)) for k in keys) + " |")
    out.append("| *README's figures, same ratio: minimal* | " + " | ".join(
        f"*{README_FIGURES['spec'][k] / README_FIGURES['minimal'][k]:.2f}×*" for k in keys)
        + " |")
    out += ["", "## Memory: peak RSS added over the process baseline, MB "
            "(Python heap peak of one run, tracemalloc, MB)", "", hdr, sep]
    for i in impls:
        cells = []
        for k in keys:
            x = inp[k].get(i)
            cells.append(f"{x['rss_added_mb']:+.1f} ({x['py_heap_peak_mb']:.1f})"
                         if x and x.get("status") == "ok" else "—")
        out.append(f"| {LABELS.get(i, i)} | " + " | ".join(cells) + " |")
    out += ["", "## Events per second (in-process sink, median run)", "", hdr, sep]
    for i in impls:
        cells = []
        for k in keys:
            x = inp[k].get(i)
            cells.append(f"{x['events_per_s']:,.0f}" if x and x.get("status") == "ok" else "—")
        out.append(f"| {LABELS.get(i, i)} | " + " | ".join(cells) + " |")

    unavailable = sorted({f"{i}: {inp[k][i].get('reason')}" for k in keys for i in inp[k]
                          if inp[k][i].get("status") == "unavailable"})
    unsupported = [f"{i} on {NAMES[k]}: {inp[k][i].get('reason')}" for k in keys
                   for i in inp[k] if inp[k][i].get("status") == "unsupported"]
    bad = [f"{i} on {k}: {inp[k][i].get('status')}: {inp[k][i].get('error')}" for k in keys
           for i in inp[k]
           if inp[k][i].get("status") not in ("ok", "unavailable", "unsupported")]
    if unavailable or unsupported or bad:
        out += ["", *[f"- unavailable — {u}" for u in unavailable],
                *[f"- unsupported — {u}" for u in unsupported],
                *[f"- **{b}**" for b in bad]]

    out += durable.report_lines(inp, keys)
    out += telemetry.report_lines(r.get("telemetry"))
    out += pg.report_lines(inp, r.get("postgres"))
    if r.get("durable_map"):
        out += durable.map_lines(r["durable_map"])
    if r["e2e"]:
        out += ["", "## End to end (one client, requests one at a time)", "",
                "`reference` = the minimal scheduler (fast paths) behind `bench.fake_host`, a "
                "bare stdio/WebSocket front-end: the wire yardstick. Latency = a node's "
                "`start` minus its last predecessor's `done`, from the events' `ts` (host "
                "clock) and from receive times.", "",
                "| host | transport | workload | µs per node (median) | events/s | "
                "latency p50 / p99, µs (ts) | p50 / p99 (received) | host peak RSS MB |",
                "|---|---|---|---|---|---|---|---|"]
        for x in r["e2e"]:
            name = NAMES.get(x.get("key", ""), x.get("workload", "?"))
            if x.get("status") != "ok":
                why = x.get("reason") or x.get("error")
                out.append(f"| {x.get('host')} | {x.get('transport')} | {name} | "
                           f"*{x.get('status')}*: {why} | | | | |")
                continue
            lat = x.get("latency") or {}

            def f(v: float | None) -> str:
                return "—" if v is None else f"{v:.0f}"

            rss = x.get("host_rss_peak_mb")
            out.append(
                f"| {x['host']} | {x['transport']} | {name} | {x['us_per_unit']:.1f} | "
                f"{x['events_per_s']:,.0f} | {f(lat.get('p50_us_ts'))} / "
                f"{f(lat.get('p99_us_ts'))} | {f(lat.get('p50_us_recv'))} / "
                f"{f(lat.get('p99_us_recv'))} | {'—' if rss is None else f'{rss:.0f}'} |")
    mic = r.get("micro")
    if mic:
        out += ["", "## Micro figures (µs per operation, median of 7 loops)", "",
                "| figure | µs |", "|---|---|"]
        out += [f"| {k} | {v:.2f} |" for k, v in mic.items() if isinstance(v, float)]
    return "\n".join(out) + "\n"


def failed(r: dict[str, Any]) -> list[str]:
    """Wrong results anywhere, and references that did not produce a number."""
    out = []
    for k, by in r["inprocess"].items():
        for impl, x in by.items():
            st = x.get("status")
            if impl in PEERS and st in ("unavailable", "unsupported"):
                continue  # optional peers: not installed, or a chain they cannot express
            if st == "error" or (st != "ok" and impl not in ("ours", "ours_durable",
                                                             "ours_durable_pg")):
                out.append(f"{impl} on {NAMES[k]}: {st}: {x.get('error')}")
            elif st not in ("ok", "unavailable"):
                out.append(f"{impl} on {NAMES[k]}: {st}: {x.get('error')}")
    for x in r.get("durable_map") or []:
        if x.get("status") not in ("ok", "unavailable") or x.get("correct") is False:
            out.append(f"map of {x.get('items')} items (durable={x.get('durable')}): "
                       f"{x.get('status')}: {x.get('error')}")
    for x in r["e2e"]:
        if x.get("status") == "error" or (x.get("host") == "reference"
                                          and x.get("status") != "ok"):
            out.append(f"e2e {x.get('host')}/{x.get('transport')} {x.get('key')}: "
                       f"{x.get('status')}: {x.get('error')}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0],
                         allow_abbrev=False)
    ap.add_argument("--quick", action="store_true",
                    help="small sizes, 1 run, correctness only (for CI)")
    ap.add_argument("--runs", type=int, default=None, help="timed runs (default 7; quick 1)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed runs first (default 1)")
    ap.add_argument("--workloads", default="a,b,c,d,e", help="comma list of a..e or names")
    ap.add_argument("--impls", default=",".join(DEFAULT_IMPLS),
                    help=f"comma list of {', '.join(IMPLS)}")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    ap.add_argument("--no-e2e", action="store_true", help="skip the stdio/WebSocket runs")
    ap.add_argument("--pg", metavar="URL", help="PostgreSQL server for ours_durable_pg "
                    "(default: a throwaway cluster, where initdb/pg_ctl exist)")
    ap.add_argument("--e2e-runs", type=int, default=None, help="default: 5 (quick 1)")
    ap.add_argument("--no-micro", action="store_true")
    ap.add_argument("--jobs", type=int, default=None,
                    help="measurement processes at once (default 1; quick 3: the quick "
                    "check's times are not comparable anyway)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat each workload's implementations R times, interleaved, and "
                    "pool the runs (evens out load drift on a shared machine)")
    a = ap.parse_args(argv)
    keys = []
    for part in filter(None, a.workloads.split(",")):
        k = next((k for k, v in NAMES.items() if part.strip() in (k, v)), None)
        if k is None:
            ap.error(f"unknown workload {part!r}")
        keys.append(k)
    impls = [i.strip() for i in a.impls.split(",") if i.strip()]
    if a.quick and a.impls == ",".join(DEFAULT_IMPLS):  # quick: no database to start
        impls.remove("ours_durable_pg")
    if "ours_durable_pg" in impls:  # one server for every measurement process (bench.pg)
        pg.ensure_server(a.pg)
    for i in impls:
        if i not in IMPLS:
            ap.error(f"unknown implementation {i!r}")
    runs = a.runs or (1 if a.quick else 7)
    warmup = a.warmup if a.warmup is not None else (0 if a.quick else 1)
    if not a.quick and runs < 5:
        _progress(f"note: --runs {runs} < 5: medians of so few runs are noisy")
    e2e_runs = a.e2e_runs or (1 if a.quick else 5)
    jobs = a.jobs or (3 if a.quick else 1)
    if not a.quick and jobs > 1:
        _progress(f"note: --jobs {jobs}: concurrent measurements disturb each other's times")
    r = collect(keys, impls, runs, warmup, a.quick, not a.no_e2e,
                not (a.quick or a.no_micro), e2e_runs, a.rounds, jobs)
    if "ours_durable_pg" in impls:  # events/s: one durable run, then 10 at once
        r["postgres"] = _run_json(["-m", "bench.pg", "--json"])
    if "ours_durable" in impls and "c" in keys:  # the 100,000-item map, memory and store
        sizes = durable.QUICK_MAP_SIZES if a.quick else durable.MAP_SIZES
        r["durable_map"] = _run_json_lines(durable.map_argv(sizes), 2 * len(sizes))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "quick" if a.quick else "latest"
    (out / f"{stem}.json").write_text(json.dumps(r, indent=1) + "\n")
    md = report(r)
    (out / f"{stem}.md").write_text(md)
    print(md)
    problems = failed(r)
    for p in problems:
        _progress(f"FAILED: {p}")
    return 1 if problems else 0
