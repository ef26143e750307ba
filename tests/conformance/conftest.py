"""Fixtures of the conformance kit's tests.

The kit's tests spawn some hundred host processes (``a2e-host stdio``, mutant hosts, a
server per WebSocket run). Where ``PYTHONDONTWRITEBYTECODE`` is set (as on a checkout run
with it), each of them would compile every module of the host from source at its start,
some 0.6 s of CPU on a loaded 2-core machine, as much again as the rest of its start.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def hosts_share_compiled_bytecode(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Spawned hosts keep their compiled modules in one cache beside the session's temp
    files (``PYTHONPYCACHEPREFIX``: nothing is written into the checkout), shared by
    every xdist worker; the first host to start fills it. The host's behaviour is the
    same; only its start-up is cheaper."""
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
