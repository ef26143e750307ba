"""Fixtures every test folder may use. Helpers that are not fixtures are in
:mod:`tests.support`; fixtures of one folder only live in that folder's ``conftest.py``."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

#: How long an xdist worker waits for the first one's collection (seconds) before it
#: collects anyway: a bound for a first worker that died, not a budget.
FIRST_COLLECTION_WAIT = 180.0
_COLLECTED = "gw0-collected"


def _shared_cache(config: pytest.Config) -> Path | None:
    """The compiled-module cache every process of an xdist session shares (beside the
    workers' temp folders), or None outside xdist workers."""
    if not hasattr(config, "workerinput") or not config.option.basetemp:
        return None
    cache = Path(config.option.basetemp).parent / "host-pycache"
    cache.mkdir(parents=True, exist_ok=True)
    return cache


def pytest_configure(config: pytest.Config) -> None:
    """An xdist worker writes and reads its compiled modules, the rewritten test modules
    included, in the cache its spawned hosts share (``sys.pycache_prefix``: nothing is
    written into the checkout), where ``PYTHONDONTWRITEBYTECODE`` would have each worker
    compile every module of the suite and of the host itself (about 9 s of CPU a worker)."""
    cache = _shared_cache(config)
    if cache is not None:
        sys.pycache_prefix = str(cache)
        sys.dont_write_bytecode = False


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session: pytest.Session) -> Generator[None, None, None]:
    """Workers other than the first collect once the first one has (bounded by
    :data:`FIRST_COLLECTION_WAIT`), so they read the modules it compiled instead of each
    compiling them again; the first says so when it is done. Collection is the same."""
    cache = _shared_cache(session.config)
    worker = getattr(session.config, "workerinput", {}).get("workerid")
    marker = cache / _COLLECTED if cache is not None else None
    if marker is not None and worker != "gw0":
        deadline = time.monotonic() + FIRST_COLLECTION_WAIT
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    yield
    if marker is not None and worker == "gw0":
        marker.touch()


@pytest.fixture
def no_config_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``A2E_*`` variable of the environment the tests run in reaches the configuration
    (of this process, and of the subprocesses it starts)."""
    for name in list(os.environ):
        if name.startswith("A2E_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session", autouse=True)
def hosts_share_compiled_bytecode(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Spawned processes (``a2e-host`` hosts, mutant hosts, servers: some hundreds in the
    suite) keep their compiled modules in one cache beside the session's temp files
    (``PYTHONPYCACHEPREFIX``: nothing is written into the checkout), shared by every
    xdist worker; the first process to start fills it. Where ``PYTHONDONTWRITEBYTECODE``
    is set, each would otherwise compile every module of the host at its start (about
    0.6 s of CPU each on a loaded 2-core machine). Behaviour is the same; only start-up
    is cheaper."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if base.name.startswith("popen-gw") else base
    cache = shared / "host-pycache"
    cache.mkdir(exist_ok=True)
    saved = {name: os.environ.get(name) for name in ("PYTHONPYCACHEPREFIX",
                                                     "PYTHONDONTWRITEBYTECODE")}
    os.environ["PYTHONPYCACHEPREFIX"] = str(cache)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    try:
        yield cache
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(autouse=True)
def logging_as_it_was() -> Iterator[None]:
    """Put the process's logging back after each test: a command run in-process
    (``validate``, ``tools``) configures it to the stderr of the moment, which is the
    test's capture, closed when the test ends; a later test's loggers (a store's writer
    thread) would write there."""
    import logging

    import structlog

    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        structlog.configure(**saved)
        root.handlers[:] = handlers
        root.setLevel(level)
