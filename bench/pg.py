"""Durable runs on PostgreSQL in the benchmark (issue 18): ``python -m bench.pg``.

- The ``ours_durable_pg`` slot of ``python -m bench`` (:func:`load`): ``ours_durable``
  (:mod:`bench.durable`) with the run store in PostgreSQL instead of SQLite — workloads
  a–d, µs per node, beside the in-memory and SQLite figures.
- Events per second through a host with a PostgreSQL store (:func:`events_per_s`): one
  durable run of workload a (linear, 1000 nodes, 2000 events) alone, then 10 such runs at
  once on 10 connections; every frame is committed before it is sent.

The database: ``--pg URL`` (or ``A2E_BENCH_PG``) names a server to use (each measurement
makes a database of its own there); without one, a throwaway cluster is started through
the tests' support code (:mod:`tests.support.postgres`: PostgreSQL's ``initdb`` and
``pg_ctl``, an unprivileged user, 127.0.0.1, a temporary folder) and stopped at exit.
Where neither exists, the figures are reported *unavailable*.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
from typing import Any

import anyio

from bench.impl_ours import OUTBOX_HIGH_WATER, Call, Unavailable

__all__ = ["ENV", "database", "ensure_server", "events_per_s", "load", "report_lines"]

ENV = "A2E_BENCH_PG"
"""The ``postgresql://`` URL of the server the measurements use (set by the parent)."""
CONCURRENT = 10


def ensure_server(url: str | None = None) -> str | None:
    """The server to measure on: ``url``, ``$A2E_BENCH_PG``, or a throwaway cluster
    started now (None: no PostgreSQL here). Sets ``$A2E_BENCH_PG`` for subprocesses."""
    url = url or os.environ.get(ENV)
    if not url:
        try:
            from tests.support.postgres import shared_cluster
        except ImportError:
            return None
        try:
            cluster = shared_cluster()
        except (RuntimeError, OSError) as exc:
            print(f"bench: no PostgreSQL cluster ({exc})", file=sys.stderr)
            return None
        if cluster is None:
            return None
        url = cluster.url
    os.environ[ENV] = url
    return url


def database(url: str) -> str:
    """A new database on ``url``'s server; returns its ``postgresql://`` URL (the form
    ``--store`` takes: the scheme is what selects the PostgreSQL store)."""
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    name = f"bench_{os.getpid()}_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(f"--pg must be a postgresql:// URL, got {url[:40]!r}")
    return urlunsplit(parts._replace(path=f"/{name}"))


def _host(store: str) -> Any:
    from a2e_host.config import HostConfig
    from a2e_host.limits import Limits
    from a2e_host.logs import configure_logging
    from a2e_host.runtime.host import Host
    from bench.workloads import HOST_MAX_CONCURRENCY

    configure_logging("json", "warning")
    limits = Limits(max_concurrency=HOST_MAX_CONCURRENCY, max_durable_runs=64)
    return Host(HostConfig(tools=("bench",), limits=limits,
                           outbox_high_water=OUTBOX_HIGH_WATER, store=store))


def load() -> Call:
    """``async f(request, sink) -> response`` for the ``ours_durable_pg`` slot.

    Raises:
        Unavailable: no PostgreSQL server, or psycopg is not installed.
    """
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise Unavailable("psycopg is not installed (pip install 'a2e-host[postgres]')"
                          ) from exc
    url = ensure_server()
    if url is None:
        raise Unavailable("no PostgreSQL server (--pg URL) nor initdb/pg_ctl to start one")
    from bench import durable

    store = database(url)
    host = _host(store)
    if host.config.store != store or not store.startswith("postgresql"):
        raise AssertionError(f"the host must use the PostgreSQL store, not {store!r}")
    return durable.durable_call(host)


async def _timed_runs(host: Any, count: int) -> tuple[float, int]:
    """``count`` durable runs of workload a at once, one in-memory connection each (one
    untimed run each first): (wall seconds, events received)."""
    from contextlib import AsyncExitStack

    from a2e_host.transports.memory import open_memory_connection
    from bench.impl_ours import BUFFER_FRAMES, HANDSHAKE
    from bench.workloads import Workload

    workload = Workload("a")
    received = [0] * count
    async with host.running(), AsyncExitStack() as stack:
        clients = []
        for _ in range(count):
            client = await stack.enter_async_context(open_memory_connection(
                host.serve_connection, buffer_frames=BUFFER_FRAMES))
            client.send(HANDSHAKE)
            if b'"ok":true' not in await client.receive():
                raise AssertionError("the handshake was refused")
            clients.append(client)
        for client in clients:
            await _one(client, workload, [0], 0)
        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for n, client in enumerate(clients):
                tg.start_soon(_one, client, workload, received, n)
        took = time.perf_counter() - started
    return took, sum(received)


async def _one(client: Any, workload: Any, received: list[int], n: int) -> None:
    from bench.durable import REQUEST_HEAD
    from bench.impl_ours import EVENT, RESPONSE

    request = workload.request()
    client.send(REQUEST_HEAD + b'"durable":true,' + request[len(REQUEST_HEAD):])
    events = 0
    while True:
        for frame in await client.receive_some():
            if frame.startswith(EVENT):
                events += 1
            elif frame.startswith(RESPONSE):
                if b'"success":true' not in frame:
                    raise AssertionError(f"a durable run failed: {frame[:300]!r}")
                received[n] = events
                return


def events_per_s(url: str) -> dict[str, Any]:
    """Events per second of durable runs through a host with a PostgreSQL store: one run
    alone, then :data:`CONCURRENT` at once (fresh database each)."""
    out: dict[str, Any] = {"loadavg": os.getloadavg()}
    for label, count in (("one", 1), ("concurrent", CONCURRENT)):
        host = _host(database(url))
        took, events = anyio.run(_timed_runs, host, count)
        out[label] = {"runs": count, "events": events, "wall_s": took,
                      "events_per_s": events / took if took > 0 else 0.0}
    return out


def report_lines(inprocess: dict[str, dict[str, Any]], rates: dict[str, Any] | None
                 ) -> list[str]:
    """The report's PostgreSQL section: per workload the in-memory, SQLite and
    PostgreSQL µs per node; events/s for one run and for 10 at once."""
    keys = [k for k in ("a", "b", "c", "d") if "ours_durable_pg" in inprocess.get(k, {})]
    if not keys and not rates:
        return []
    out = ["", "## Durable runs on PostgreSQL (`ours_durable_pg`: the store a set of "
           "replicas shares; COPY batches, one NOTIFY per batch, fenced by epoch)"]
    if keys:
        out += ["", "| workload | in-memory µs/node | SQLite µs/node | PostgreSQL µs/node | "
                "PostgreSQL ÷ in-memory |", "|---|---|---|---|---|"]
    for k in keys:
        row = inprocess[k]
        pg, mem, lite = row["ours_durable_pg"], row.get("ours") or {}, row.get(
            "ours_durable") or {}
        if pg.get("status") != "ok":
            out.append(f"| {k} | — | — | *{pg.get('status')}*: "
                       f"{pg.get('error') or pg.get('reason')} | — |")
            continue

        def us(x: dict[str, Any]) -> str:
            return f"{x['us_per_unit']:.1f}" if x.get("status") == "ok" else "—"

        ratio = (f"{pg['median_s'] / mem['median_s']:.2f}×" if mem.get("status") == "ok"
                 else "—")
        out.append(f"| {k} | {us(mem)} | {us(lite)} | {us(pg)} | {ratio} |")
    if rates:
        out += ["", "Events/s through a host with a PostgreSQL store (workload a, 2000 "
                "events per run, each committed before it is sent): "
                + ("; ".join(f"{x['runs']} run{'s' * (x['runs'] > 1)} at once: "
                             f"{x['events_per_s']:,.0f} events/s ({x['wall_s']:.2f} s)"
                             for x in (rates.get("one"), rates.get("concurrent")) if x)
                   if rates.get("status", "ok") == "ok" else
                   f"*{rates.get('status')}*: {rates.get('reason', '')}")
                + f" (load average {(rates.get('loadavg') or [0.0])[0]:.1f})."]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.pg", description=__doc__.split("\n")[0])
    ap.add_argument("--pg", metavar="URL", help="a PostgreSQL server to use (default: "
                    f"${ENV}, else a throwaway cluster)")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    a = ap.parse_args(argv)
    url = ensure_server(a.pg)
    if url is None:
        result: dict[str, Any] = {"status": "unavailable",
                                  "reason": "no PostgreSQL server nor initdb/pg_ctl"}
    else:
        result = {"status": "ok", **events_per_s(url)}
    if a.json:
        print(json.dumps(result))
    else:
        print("\n".join(report_lines({}, result)))
    return 0 if result["status"] in ("ok", "unavailable") else 1


if __name__ == "__main__":
    sys.exit(main())
