"""pytest plugin: one test item per conformance case.

Usage (from the repository root)::

    pytest -p conformance.pytest_plugin conformance/cases \
        --a2e-stdio "a2e-host stdio --tools conformance"
    pytest -p conformance.pytest_plugin --a2e-ws ws://127.0.0.1:8765 conformance/cases -k cycle

Without ``--a2e-stdio`` / ``--a2e-ws`` the plugin collects nothing, so loading it in
an ordinary test run is harmless. Items run one at a time on one event loop kept for
the test session; the host is probed once. Over stdio, items with the same handshake
take turns on one shared session (one host process), as ``a2e-conformance`` does
(:mod:`conformance.suite`); ``--a2e-fresh`` gives every item a connection of its own.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from .cases import CASES_DIR, Case, load_file
from .runner import CaseResult
from .suite import Probe, SharedSession, Target, probe_host, run_case, session_key

__all__ = ["pytest_addoption", "pytest_collect_file"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("a2e", "A2E conformance")
    group.addoption("--a2e-stdio", metavar="CMD", help="host command (NDJSON over stdio)")
    group.addoption("--a2e-ws", metavar="URL", help="host WebSocket URL")
    group.addoption("--a2e-auth-token", metavar="TOKEN", help="token the host requires")
    group.addoption("--a2e-host-defaults", action="store_true",
                    help="the host runs with PROTOCOL.md §6 default ceilings")
    group.addoption("--a2e-fast-prune", action="store_true",
                    help="the host prunes a durable run within 2 s of its retention passing")
    group.addoption("--a2e-fresh", action="store_true",
                    help="every case on a connection of its own (over stdio: a host process "
                         "per case) instead of shared sessions")


def _target(config: pytest.Config) -> Target | None:
    stdio, ws = config.getoption("--a2e-stdio"), config.getoption("--a2e-ws")
    if not (stdio or ws):
        return None
    return Target("stdio" if stdio else "ws", stdio or ws,
                  auth_token=config.getoption("--a2e-auth-token"),
                  host_defaults=config.getoption("--a2e-host-defaults"),
                  fast_prune=config.getoption("--a2e-fast-prune"))


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


class DefectWarning(UserWarning):
    """A transport or event invariant the host broke in a case that does not name it:
    the case passes on its own property, and the requirement's defect is shown as this
    warning (the command line reports it once, as ``DEFECT``)."""


class CaseItem(pytest.Item):
    """One conformance case run against the host given on the command line."""

    def __init__(self, *, case: Case, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        for rid in case.requires:
            self.add_marker(pytest.mark.a2e_requirement(rid), append=True)

    def runtest(self) -> None:
        target = _target(self.config)
        assert target is not None
        state = _state(self.config)
        if state.probe is None:
            state.probe = state.run(probe_host(target))
        shared = None
        if target.transport == "stdio" and not self.config.getoption("--a2e-fresh"):
            key = session_key(self.case, target, state.probe)
            if key is not None:
                shared = state.sessions.setdefault(
                    key, SharedSession(str(len(state.sessions) + 1)))
        result: CaseResult = state.run(run_case(self.case, target, state.probe, shared))
        if result.status == "skipped":
            pytest.skip(result.problems[0])
        if result.status == "failed":
            raise CaseFailed("\n".join([*result.problems, result.diagnostics,
                                        *result.notes]).strip())
        for rid, text in result.findings:  # one defect, one verdict: see README
            warnings.warn(f"{rid}: {text}", DefectWarning, stacklevel=1)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, CaseFailed):
            return (f"case {self.case.id} ({self.case.source}) requires "
                    f"{', '.join(self.case.requires)}:\n{excinfo.value}")
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"a2e case {self.case.id}"


class _State:
    """The test session's event loop, probe and shared sessions."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner()
        self.probe: Probe | None = None
        self.sessions: dict[str, SharedSession] = {}

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.runner.run(coro)

    def close(self) -> None:
        async def close_all() -> None:
            for session in self.sessions.values():
                await session.aclose()

        try:
            self.runner.run(close_all())
        finally:
            self.runner.close()


_STATE_KEY = pytest.StashKey[_State]()


def _state(config: pytest.Config) -> _State:
    if _STATE_KEY not in config.stash:
        config.stash[_STATE_KEY] = _State()
    return config.stash[_STATE_KEY]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "a2e_requirement(id): the requirement a case checks")


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash.get(_STATE_KEY, None)
    if state is not None:
        state.close()
        del session.config.stash[_STATE_KEY]
