"""pytest plugin: one test item per conformance case.

Usage (from the repository root)::

    pytest -p conformance.pytest_plugin conformance/cases \
        --a2e-stdio "a2e-host stdio --tools conformance"
    pytest -p conformance.pytest_plugin --a2e-ws ws://127.0.0.1:8765 conformance/cases -k cycle

Without ``--a2e-stdio`` / ``--a2e-ws`` the plugin collects nothing, so loading it in
an ordinary test run is harmless. Items run one at a time, each on a fresh
connection; the host is probed once per session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .cases import CASES_DIR, Case, load_file
from .runner import CaseResult
from .suite import Probe, Target, probe_host, run_case

__all__ = ["pytest_addoption", "pytest_collect_file"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("a2e", "A2E conformance")
    group.addoption("--a2e-stdio", metavar="CMD", help="host command (NDJSON over stdio)")
    group.addoption("--a2e-ws", metavar="URL", help="host WebSocket URL")
    group.addoption("--a2e-auth-token", metavar="TOKEN", help="token the host requires")
    group.addoption("--a2e-host-defaults", action="store_true",
                    help="the host runs with PROTOCOL.md §6 default ceilings")


def _target(config: pytest.Config) -> Target | None:
    stdio, ws = config.getoption("--a2e-stdio"), config.getoption("--a2e-ws")
    if not (stdio or ws):
        return None
    return Target("stdio" if stdio else "ws", stdio or ws,
                  auth_token=config.getoption("--a2e-auth-token"),
                  host_defaults=config.getoption("--a2e-host-defaults"))


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if (file_path.suffix == ".jsonl" and file_path.parent == CASES_DIR
            and _target(parent.config) is not None):
        return CaseFile.from_parent(parent, path=file_path)
    return None


class CaseFile(pytest.File):
    """A ``cases/*.jsonl`` file; its items are its cases."""

    def collect(self) -> Iterator[CaseItem]:
        for case in load_file(self.path):
            yield CaseItem.from_parent(self, name=case.id, case=case)


class CaseFailed(Exception):
    """Raised by :class:`CaseItem` with the case's problems."""


class CaseItem(pytest.Item):
    """One conformance case run against the host given on the command line."""

    def __init__(self, *, case: Case, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        for rid in case.requires:
            self.add_marker(pytest.mark.a2e_requirement(rid), append=True)

    def _probe(self, target: Target) -> Probe:
        stash_key = _PROBE_KEY
        if stash_key not in self.config.stash:
            self.config.stash[stash_key] = asyncio.run(probe_host(target))
        return self.config.stash[stash_key]

    def runtest(self) -> None:
        target = _target(self.config)
        assert target is not None
        result: CaseResult = asyncio.run(run_case(self.case, target, self._probe(target)))
        if result.status == "skipped":
            pytest.skip(result.problems[0])
        if result.status == "failed":
            raise CaseFailed("\n".join([*result.problems, result.diagnostics]).strip())

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, CaseFailed):
            return (f"case {self.case.id} ({self.case.source}) requires "
                    f"{', '.join(self.case.requires)}:\n{excinfo.value}")
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"a2e case {self.case.id}"


_PROBE_KEY = pytest.StashKey[Probe]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "a2e_requirement(id): the requirement a case checks")
