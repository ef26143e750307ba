"""End-to-end measurements through the real CLI: ``python -m bench.e2e {stdio|ws} WORKLOAD``.

Starts ``a2e-host`` (``stdio --tools bench`` or ``serve --host 127.0.0.1 --port P --tools
bench``), handshakes (``handshake/req`` with ``agent_caps: ["chains"]``; the
``handshake/resp``'s ``session_id`` goes into each ``chain/req``), then sends the workload
``--warmup`` + ``--runs`` times, one at a time, and for each run records the wall time
from sending the request to receiving its ``chain/resp``, the events received (verified
like the in-process runs), events/s on the wire, and the scheduling latency of every node
that has predecessors: its ``start`` event minus the last predecessor's ``done`` event,
once from the events' ``ts`` fields (host clock) and once from our receive times.
The host's peak RSS (VmHWM) is read from /proc at the end.

Prints one JSON object; ``status: "unavailable"`` when the CLI does not exist yet.
``WORKLOAD`` may be a comma list (``a,b,c``): the workloads then run one after another on
one host process and session, one JSON line each (``bench --quick`` does this: it checks
correctness, and a host start per workload costs more than the workload).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from bench.common import REQUEST_DECODER, Plan
from bench.workloads import NAMES, QUICK_SIZES, Workload, check_response

STDIO_ARGV = ["stdio", "--tools", "bench"]
SERVE_ARGV = ["serve", "--host", "127.0.0.1", "--port", "{port}", "--tools", "bench"]
SUBPROTOCOL = "a2e.v1"
STREAM_LIMIT = 512 * 2**20  # longest line we accept from the host, bytes
HANDSHAKE_TIMEOUT = 15.0  # seconds from start-up to handshake/resp
CHAIN_TIMEOUT = 300.0  # seconds from sending a chain/req to its chain/resp



def _host_env() -> dict[str, str]:
    """The host's environment: ours gets ``max_concurrency`` raised as in-process runs do
    (``bench.workloads.HOST_MAX_CONCURRENCY``); the reference front-end ignores it."""
    from bench.workloads import HOST_MAX_CONCURRENCY

    return {**os.environ, "A2E_MAX_CONCURRENCY": str(HOST_MAX_CONCURRENCY)}

def host_executable() -> str | None:
    """The ``a2e-host`` console script next to this interpreter, else on PATH."""
    cand = Path(sys.executable).parent / "a2e-host"
    if cand.exists():
        return str(cand)
    return shutil.which("a2e-host")


def handshake_req() -> bytes:
    return msgspec.json.encode({
        "type": "handshake/req", "id": os.urandom(16).hex(), "version": "1.0",
        "ts": time.time(), "agent_id": "bench", "agent_caps": ["chains"], "auth_token": "",
    })


def _pctl(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def latencies(w: Workload, events: list[tuple[float, dict[str, Any]]]) -> dict[str, Any]:
    """done(last predecessor) → start(node) gaps in µs, by host ``ts`` and by receive time."""
    plan = Plan(REQUEST_DECODER.decode(w.request()), {"noop": 0, "sleep_ms": 0})
    start: dict[str, tuple[float, float]] = {}
    done: dict[str, tuple[float, float]] = {}
    for t_recv, e in events:
        if e.get("phase") == "start":
            start[e["node_id"]] = (e["ts"], t_recv)
        elif e.get("phase") == "done":
            done[e["node_id"]] = (e["ts"], t_recv)
    by_ts: list[float] = []
    by_recv: list[float] = []
    for i, preds in enumerate(plan.preds):
        nid = plan.ids[i]
        if not preds or nid not in start:
            continue
        pd = [done[plan.ids[p]] for p, _ in preds if plan.ids[p] in done]
        if len(pd) != len(preds):
            continue
        by_ts.append((start[nid][0] - max(p[0] for p in pd)) * 1e6)
        by_recv.append((start[nid][1] - max(p[1] for p in pd)) * 1e6)
    return {"n": len(by_ts),
            "p50_us_ts": _pctl(by_ts, 0.5), "p99_us_ts": _pctl(by_ts, 0.99),
            "p50_us_recv": _pctl(by_recv, 0.5), "p99_us_recv": _pctl(by_recv, 0.99)}


class _Stdio:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data + b"\n")
        await self.proc.stdin.drain()

    async def recv(self) -> bytes:
        assert self.proc.stdout is not None
        line = await self.proc.stdout.readline()
        if not line:
            raise ConnectionError("host closed stdout")
        return line


class _Ws:
    def __init__(self, ws: Any) -> None:
        self.ws = ws

    async def send(self, data: bytes) -> None:
        await self.ws.send(data.decode())  # text frame (PROTOCOL.md §1)

    async def recv(self) -> bytes:
        m = await self.ws.recv()
        return m.encode() if isinstance(m, str) else m


def _host_rss(pid: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmHWM:", "VmRSS:")):
                k, v = line.split(":")
                out[k + ":"] = int(v.split()[0]) / 1024
    return out


class _NotUp(Exception):
    """The host did not get as far as a successful handshake: reported as unavailable."""


async def _session(conn: Any, ws: list[Workload], runs: int, warmup: int, pid: int,
                   results: list[dict[str, Any]]) -> None:
    """Handshake, then run each workload in turn, appending its result to ``results``."""
    try:
        async with asyncio.timeout(HANDSHAKE_TIMEOUT):
            sid = await _handshake(conn)
    except (OSError, ConnectionError, KeyError, ValueError, RuntimeError, TimeoutError) as exc:
        raise _NotUp(f"{type(exc).__name__}: {exc}") from exc
    for w in ws:
        results.append(await _runs(conn, sid, w, runs, warmup, pid))


async def _handshake(conn: Any) -> str:
    await conn.send(handshake_req())
    while True:
        hs = msgspec.json.decode(await conn.recv())
        if hs.get("type") == "handshake/resp":
            break
    if not hs.get("ok", True):
        raise RuntimeError(f"handshake refused: {hs.get('reason')!r}")
    return str(hs["session_id"])


async def _runs(conn: Any, sid: str, w: Workload, runs: int, warmup: int,
                pid: int) -> dict[str, Any]:
    rss0 = _host_rss(pid)
    walls: list[float] = []
    lat: list[dict[str, Any]] = []
    for r in range(warmup + runs):
        req_id = os.urandom(16).hex()
        req = w.request(session_id=sid, req_id=req_id)
        events: list[tuple[float, dict[str, Any]]] = []
        raw: list[bytes] = []
        t0 = time.perf_counter()
        await conn.send(req)
        async with asyncio.timeout(CHAIN_TIMEOUT):
            while True:
                data = await conn.recv()
                t = time.perf_counter()
                msg = msgspec.json.decode(data)
                typ = msg.get("type")
                if typ == "chain/event" and msg.get("req_id") == req_id:
                    events.append((t, msg))
                    raw.append(data)
                elif typ == "chain/resp" and msg.get("req_id") == req_id:
                    resp = data
                    break
                elif typ == "error":
                    raise RuntimeError(f"host error: {msg.get('code')}: {msg.get('message')}")
        wall = time.perf_counter() - t0
        check_response(w, resp, raw)
        if r >= warmup:
            walls.append(wall)
            lat.append(latencies(w, events))
    med = statistics.median(walls)
    last = lat[len(lat) // 2]
    return {"status": "ok", "runs": len(walls), "times_s": walls, "median_s": med,
            "min_s": min(walls), "max_s": max(walls), "us_per_unit": med * 1e6 / w.units,
            "events_per_s": w.events / med, "latency": last,
            "host_rss_after_handshake_mb": rss0.get("VmRSS:"),
            "host_rss_peak_mb": _host_rss(pid).get("VmHWM:")}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def host_command(host: str) -> list[str] | None:
    """``ours``: the a2e-host console script; ``reference``: bench.fake_host (the minimal
    reference behind a bare front-end). None when unavailable."""
    if host == "reference":
        return [sys.executable, "-m", "bench.fake_host"]
    exe = host_executable()
    return [exe] if exe else None


async def run(transport: str, w: Workload, runs: int, warmup: int,
              host: str = "ours") -> dict[str, Any]:
    """One workload on a host process of its own (what a full benchmark run measures)."""
    return (await run_many(transport, [w], runs, warmup, host))[0]


async def run_many(transport: str, ws: list[Workload], runs: int, warmup: int,
                   host: str = "ours") -> list[dict[str, Any]]:
    """Several workloads one after another on one host process and session; one result
    per workload, in order. Once one fails, the rest are reported as not run (the
    session's state is unknown). The host's peak RSS is then the peak so far."""
    cmd = host_command(host)
    if cmd is None:
        return [{"status": "unavailable", "reason": "no a2e-host executable"} for _ in ws]
    exe, *pre = cmd
    errlog = tempfile.TemporaryFile()  # the host's stderr, quoted when it fails
    results: list[dict[str, Any]] = []
    try:
        if transport == "stdio":
            proc = await asyncio.create_subprocess_exec(
                exe, *pre, *STDIO_ARGV, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=errlog, limit=STREAM_LIMIT, env=_host_env())
            try:
                await _session(_Stdio(proc), ws, runs, warmup, proc.pid, results)
                return results
            finally:
                assert proc.stdin is not None
                proc.stdin.close()  # EOF = client gone (PROTOCOL.md §1)
                await _reap(proc)
        port = _free_port()
        argv = [a.format(port=port) for a in SERVE_ARGV]
        proc = await asyncio.create_subprocess_exec(exe, *pre, *argv, stdin=subprocess.DEVNULL,
                                                    stdout=errlog, stderr=errlog, env=_host_env())
        try:
            from websockets.asyncio.client import connect
            from websockets.typing import Subprotocol

            deadline = time.monotonic() + 15
            while True:
                try:
                    websocket = await connect(f"ws://127.0.0.1:{port}",
                                              subprotocols=[Subprotocol(SUBPROTOCOL)],
                                              max_size=None, compression=None)
                    break
                except OSError:
                    if proc.returncode is not None or time.monotonic() > deadline:
                        raise _NotUp(f"nothing listens on port {port}") from None
                    await asyncio.sleep(0.05)
            async with websocket:
                await _session(_Ws(websocket), ws, runs, warmup, proc.pid, results)
                return results
        finally:
            if proc.returncode is None:
                proc.terminate()
            await _reap(proc)
    except _NotUp as exc:
        errlog.seek(0)
        tail = errlog.read().decode(errors="replace").strip().splitlines()[-1:]
        return [{"status": "unavailable",
                 "reason": f"host not up (no handshake): {exc} {' '.join(tail)}".strip()}
                for _ in ws]
    except (OSError, RuntimeError, ConnectionError, AssertionError, KeyError,
            TimeoutError) as exc:
        # A wrong result is an error; a host that cannot run the workload has "failed".
        kind = "error" if isinstance(exc, AssertionError) else "failed"
        errlog.seek(0)
        tail = errlog.read().decode(errors="replace").strip().splitlines()[-3:]
        results.append({"status": kind, "error": f"{type(exc).__name__}: {exc}",
                        "host_stderr": tail})
        return results + [{"status": "failed", "error": "not run: an earlier workload "
                           "failed on this host"} for _ in ws[len(results):]]
    finally:
        errlog.close()


async def _reap(proc: asyncio.subprocess.Process) -> None:
    try:
        await asyncio.wait_for(proc.wait(), 5)
    except TimeoutError:
        proc.kill()
        await proc.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.e2e", allow_abbrev=False)
    ap.add_argument("transport", choices=["stdio", "ws"])
    ap.add_argument("workload", help="a..e or a name; a comma list runs them one after "
                    "another on one host process, printing one JSON line each")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--size", type=int, default=None)
    ap.add_argument("--quick-sizes", action="store_true",
                    help="each workload at its --quick size (bench.workloads.QUICK_SIZES)")
    ap.add_argument("--host", choices=["ours", "reference"], default="ours",
                    help="ours: a2e-host; reference: bench.fake_host (minimal reference)")
    a = ap.parse_args(argv)
    keys = []
    for part in a.workload.split(","):
        key = next((k for k, v in NAMES.items() if part.strip() in (k, v)), None)
        if key is None:
            ap.error(f"unknown workload {part!r}")
        keys.append(key)
    sizes = [QUICK_SIZES[k] if a.quick_sizes else a.size for k in keys]
    ws = [Workload(k, size) for k, size in zip(keys, sizes, strict=True)]
    results = asyncio.run(run_many(a.transport, ws, a.runs, a.warmup, a.host))
    for k, size, w, found in zip(keys, sizes, ws, results, strict=True):
        res = {"host": a.host, "transport": a.transport, "workload": w.name, "key": k,
               "size": size, "units": w.units, "events": w.events}
        res |= found
        json.dump(res, sys.stdout)
        sys.stdout.write("\n")
    return 1 if any(r["status"] == "error" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
