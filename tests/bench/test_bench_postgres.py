"""The benchmark's PostgreSQL slot (``ours_durable_pg``, issue 18) runs a durable workload,
verified like any other, with its runs stored in PostgreSQL (correctness only; speed is
never asserted in tests). It uses the test process's throwaway cluster (``A2E_BENCH_PG``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg

from tests.support import REPO
from tests.support.postgres import require_cluster

TIMEOUT = 120.0


def test_the_postgresql_slot_runs_durable_workloads_stored_in_postgresql() -> None:
    cluster = require_cluster()
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        before = {r[0] for r in conn.execute("SELECT datname FROM pg_database")}
    done = subprocess.run(
        [sys.executable, "-m", "bench.measure", "ours_durable_pg", "a", "--size", "50",
         "--runs", "1", "--warmup", "0"], cwd=REPO, capture_output=True, text=True,
        timeout=TIMEOUT, env={**os.environ, "A2E_BENCH_PG": cluster.url})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (result,) = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert result["status"] == "ok", result
    assert (result["impl"], result["units"], result["events"]) == ("ours_durable_pg", 50, 100)
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        made = {r[0] for r in conn.execute("SELECT datname FROM pg_database")} - before
    (database,) = made
    url = cluster.url.rsplit("/", 1)[0] + f"/{database}"
    with psycopg.connect(url) as conn:
        runs = conn.execute("SELECT status, last_seq FROM runs").fetchall()
        events = conn.execute("SELECT count(*) FROM events").fetchone()
    assert runs == [("succeeded", 100)] * 2  # the timed run and the traced one
    assert events == (200,)
