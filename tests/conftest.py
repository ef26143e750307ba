"""Fixtures every test folder may use. Helpers that are not fixtures are in
:mod:`tests.support`; fixtures of one folder only live in that folder's ``conftest.py``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


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
