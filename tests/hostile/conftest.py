"""Fixtures of the hostile suite (issue 12). The harness itself — host processes, the
probe session, the RSS watchdog, the after-case check — is ``tests/hostile/harness.py``,
shared with ``python -m bench.isolation``; the cases are the table in
``tests/hostile/cases.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile.harness import HostPool


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostPool]:
    """Hosts shared by the cases that ask for the same host and bring no files (every
    host is stopped at the end of the module)."""
    with HostPool(tmp_path_factory.mktemp("hosts")) as hosts:
        yield hosts


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty work directory for one case that needs its own host."""
    path = tmp_path / "case"
    path.mkdir()
    return path
