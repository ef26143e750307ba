"""A throwaway PostgreSQL cluster for the tests and the bench (issue 18).

:func:`shared_cluster` starts one cluster per process (so one per pytest-xdist worker)
the first time a test asks for it, and stops it when the process exits. It runs the
machine's PostgreSQL binaries (``initdb``, ``pg_ctl``: PostgreSQL 15 on our image)
as an unprivileged user — ``initdb`` refuses root, and CI runs as root — in a temporary
folder that user owns, listening on 127.0.0.1 on a free port, with ``trust``
authentication for its one role. Each test takes a store of its own
(:meth:`Cluster.database`, a schema of its own), so tests never see each other's
runs.

:func:`find_binaries` says whether the binaries exist; tests use :func:`require_cluster`,
which skips only when they do not (a machine without PostgreSQL), never otherwise.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import secrets
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["Cluster", "find_binaries", "require_cluster", "shared_cluster"]

ROLE = "a2e"
START_TIMEOUT = 60  # seconds: initdb and the first start on a loaded 2-core machine
_UNPRIVILEGED = "nobody"


def find_binaries() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl`` (``A2E_PG_BIN``, the newest
    ``/usr/lib/postgresql/*/bin``, or PATH), or None."""
    candidates = [os.environ.get("A2E_PG_BIN", "")]
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                         key=lambda p: int(p.split("/")[-2]) if p.split("/")[-2].isdigit()
                         else 0, reverse=True)
    found = shutil.which("initdb")
    if found:
        candidates.append(str(Path(found).parent))
    for folder in candidates:
        if folder and (Path(folder) / "initdb").is_file() and (Path(folder) / "pg_ctl").is_file():
            return Path(folder)
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Cluster:
    """A running throwaway cluster.

    Attributes:
        port: its TCP port on 127.0.0.1.
        url: the ``postgresql://`` URL of its ``postgres`` database.
    """

    def __init__(self, binaries: Path) -> None:
        self._bin = binaries
        self._root = Path(tempfile.mkdtemp(prefix="a2e-pg-"))
        self._data = self._root / "data"
        self._user: str | None = None
        if os.geteuid() == 0:
            self._user = _UNPRIVILEGED
            entry = pwd.getpwnam(self._user)
            os.chown(self._root, entry.pw_uid, entry.pw_gid)
        self.port = 0
        self.url = ""
        self._names = 0
        self._watchdog: subprocess.Popen[bytes] | None = None

    def _run(self, *argv: str, timeout: float = START_TIMEOUT) -> None:
        command = list(argv)
        if self._user is not None:
            command = ["runuser", "-u", self._user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              cwd=self._root, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:2])} failed ({done.returncode}): "
                               f"{done.stdout[-2000:]}{done.stderr[-2000:]}")

    def start(self) -> None:
        """initdb, then start on a free port (a few tries: another process may take it)."""
        self._run(str(self._bin / "initdb"), "-D", str(self._data), "-U", ROLE,
                  "--auth=trust", "-E", "UTF8", "--no-sync", "--locale=C")
        last: Exception | None = None
        for _ in range(5):
            port = _free_port()
            options = (f"-c port={port} -c listen_addresses=127.0.0.1 "
                       f"-c unix_socket_directories={self._root} -c fsync=off "
                       "-c full_page_writes=off -c max_connections=300 "
                       "-c shared_buffers=32MB")
            try:
                self._run(str(self._bin / "pg_ctl"), "-D", str(self._data), "-l",
                          str(self._root / "log"), "-o", options, "-w", "-t",
                          str(START_TIMEOUT), "start")
            except RuntimeError as exc:
                last = exc
                continue
            self.port = port
            self.url = f"postgresql://{ROLE}@127.0.0.1:{port}/postgres"
            self._watch_owner()
            return
        raise RuntimeError(f"the test PostgreSQL did not start: {last}")

    def _watch_owner(self) -> None:
        """Stop the cluster and delete its folder when this process dies without
        stopping it (killed: no ``atexit``): a detached shell polls this process's pid."""
        pg_ctl = [str(self._bin / "pg_ctl"), "-D", str(self._data), "-m", "immediate",
                  "-w", "stop"]
        if self._user is not None:
            pg_ctl = ["runuser", "-u", self._user, "--", *pg_ctl]
        script = (f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 1; done; "
                  f"{shlex.join(pg_ctl)} >/dev/null 2>&1; rm -rf {shlex.quote(str(self._root))}")
        # kept referenced: a Popen collected while its process runs warns
        self._watchdog = subprocess.Popen(
            ["sh", "-c", script], start_new_session=True, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def database(self, prefix: str = "t") -> str:
        """A new, empty place for a store: a schema of its own in the cluster's database
        (``CREATE SCHEMA`` takes milliseconds, ``CREATE DATABASE`` most of a second on a
        loaded machine); returns a URL whose connections use only that schema."""
        import psycopg

        self._names += 1
        name = f"{prefix}_{os.getpid()}_{self._names}_{secrets.token_hex(3)}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{name}"')
        return f"{self.url}?options=-csearch_path%3D{name}"

    def stop(self) -> None:
        """Stop the cluster at once and delete its folder (idempotent)."""
        if self.port:
            with contextlib.suppress(Exception):
                self._run(str(self._bin / "pg_ctl"), "-D", str(self._data), "-m",
                          "immediate", "-w", "stop", timeout=30)
            self.port = 0
        shutil.rmtree(self._root, ignore_errors=True)


_CLUSTER: Cluster | None = None


def shared_cluster() -> Cluster | None:
    """This process's cluster, started on first use (None: no PostgreSQL binaries)."""
    global _CLUSTER
    if _CLUSTER is None:
        binaries = find_binaries()
        if binaries is None:
            return None
        cluster = Cluster(binaries)
        atexit.register(cluster.stop)
        started = time.monotonic()
        cluster.start()
        cluster.started_in = time.monotonic() - started  # type: ignore[attr-defined]
        _CLUSTER = cluster
    return _CLUSTER


def require_cluster() -> Cluster:
    """:func:`shared_cluster`, skipping the calling test only where PostgreSQL is not
    installed (its binaries are absent)."""
    import pytest

    cluster = shared_cluster()
    if cluster is None:
        pytest.skip("PostgreSQL's initdb/pg_ctl are not installed on this machine")
    return cluster


def cut_connections(url: str) -> int:
    """Terminate every other connection to ``url``'s database, as a database restart
    would; returns how many."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        row = cur.fetchone()
        return int(row[0]) if row else 0
