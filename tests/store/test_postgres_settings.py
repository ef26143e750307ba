"""Selecting and naming a shared PostgreSQL run store (issue 18): ``--store
postgresql://…`` picks the backend by its scheme (a file path stays SQLite), a URL in a
configuration file is not made relative to it, ``--replica-id`` / ``[store] lease`` /
``A2E_STORE_LEASE`` reach the host's settings, and the ``runs`` command reads a
PostgreSQL store as it reads a file.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from a2e_host.config import load_config
from a2e_host.store import RunStatus, backend_of, open_store
from tests.support import REPO
from tests.support.postgres import require_cluster
from tests.support.process import host_env
from tests.support.store import frame, record


def test_the_store_backend_is_picked_by_the_url_scheme() -> None:
    assert backend_of("postgresql://a2e@db:5432/runs") == "postgresql"
    assert backend_of("postgres://db/runs") == "postgresql"
    assert backend_of("POSTGRESQL://db/runs") == "postgresql"
    assert backend_of("runs.db") == "sqlite"
    assert backend_of("/var/lib/a2e/postgresql.db") == "sqlite"


def test_replica_settings_come_from_the_file_the_environment_and_the_command_line(
        tmp_path: Path) -> None:
    conf = tmp_path / "a2e.toml"
    conf.write_text('replica_id = "from-file"\n[store]\npath = "postgresql://a2e@db/runs"\n'
                    "lease = 4\n")
    config = load_config(conf, environ={})
    assert (config.store, config.replica_id, config.store_lease) == (
        "postgresql://a2e@db/runs", "from-file", 4.0), "a URL is not made relative"
    config = load_config(conf, environ={"A2E_STORE_LEASE": "2.5"},
                         overrides={"replica_id": "a2e-2"})
    assert (config.replica_id, config.store_lease) == ("a2e-2", 2.5)
    assert load_config(None, environ={}).store_lease == 10.0
    with pytest.raises(ValueError, match="store_lease"):
        load_config(None, environ={"A2E_STORE_LEASE": "0"})


def test_serve_takes_a_replica_id() -> None:
    done = subprocess.run([sys.executable, "-m", "a2e_host", "serve", "--help"],
                          capture_output=True, text=True, cwd=REPO, env=host_env(),
                          timeout=60, check=True)
    assert "--replica-id NAME" in done.stdout


def test_the_runs_command_reads_a_postgresql_store() -> None:
    url = require_cluster().database("cli")

    async def write() -> None:
        store = await open_store(url, owner="A")
        try:
            store.create(record("r1"))
            store.append("r1", frame("r1", 1))
            store.finish("r1", RunStatus.FAILED, b'{"type":"chain/resp","success":false}', 1)
            await store.flush()
        finally:
            await store.aclose()

    anyio.run(write)
    done = subprocess.run([sys.executable, "-m", "a2e_host", "runs", "show", "r1", "--store",
                           url], capture_output=True, text=True, cwd=REPO, env=host_env(),
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "status:          failed" in done.stdout
    assert "owner:           A (epoch 0)" in done.stdout
