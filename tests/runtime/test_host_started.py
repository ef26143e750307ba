"""``Plugin.host_started``: called once when the host starts, before any connection, with
a way to start runs that belong to no connection (PROTOCOL.md §5 Resume)."""

from __future__ import annotations

from typing import Any, ClassVar

import anyio
import pytest

from a2e_host.config import HostConfig
from a2e_host.messages import Ping, Pong
from a2e_host.plugin import HostRuns, Plugin, RunHandle
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import open_memory_client
from a2e_host.runtime.runs import RunSink

WAIT = 5.0


class Starter(Plugin):
    """Starts one detached run when the host starts; the run waits for ``release``."""

    capability: ClassVar[str] = "starter"
    namespace: ClassVar[str] = "starter/*"

    def __init__(self, config: HostConfig) -> None:
        super().__init__(config)
        self.calls = 0
        self.running = anyio.Event()
        self.release = anyio.Event()
        self.ended = anyio.Event()
        self.handle: RunHandle | None = None

    async def host_started(self, runs: HostRuns) -> None:
        self.calls += 1
        self.handle = runs.start_detached(self._body, "x", req_id="r1", capability="starter",
                                          sink=RunSink(), name="detached")

    async def _body(self, run: RunHandle, word: str) -> None:
        assert word == "x" and run.req_id == "r1"
        self.running.set()
        try:
            await self.release.wait()
        finally:
            self.ended.set()


class Broken(Plugin):
    capability: ClassVar[str] = "broken"
    namespace: ClassVar[str] = "broken/*"

    async def host_started(self, runs: HostRuns) -> None:
        raise RuntimeError("cannot start")


@pytest.mark.asyncio
async def test_host_started_is_called_once_and_its_run_needs_no_connection() -> None:
    starter = Starter(HostConfig())
    host = Host(HostConfig(), plugins=[starter])
    with anyio.fail_after(WAIT):
        async with host.running():
            async with host.running():  # a nested entry joins: no second call
                await starter.running.wait()
                assert starter.calls == 1
                assert len(host.runs) == 1 and host.runs.listed == 0
            assert not starter.ended.is_set()
            starter.release.set()
            await starter.ended.wait()
    assert starter.calls == 1


@pytest.mark.asyncio
async def test_a_detached_run_still_going_when_the_host_stops_is_cancelled() -> None:
    starter = Starter(HostConfig())
    host = Host(HostConfig(), plugins=[starter])
    with anyio.fail_after(WAIT):
        async with host.running():
            await starter.running.wait()
        assert starter.ended.is_set()


@pytest.mark.asyncio
async def test_a_plugin_failing_at_host_start_is_logged_and_the_host_serves_on() -> None:
    host = Host(HostConfig(), plugins=[Broken])
    logged: list[dict[str, Any]] = []
    host.log = _Recording(logged)
    with anyio.fail_after(WAIT):
        async with host.running(), open_memory_client(host) as client:
            client.send(Ping(id="p"))
            assert isinstance(await client.receive(), Pong)
    assert [(e["event"], e["plugin"]) for e in logged] == [
        ("plugin failed at host start", "broken")]


class _Recording:
    """A logger that keeps its error lines."""

    def __init__(self, into: list[dict[str, Any]]) -> None:
        self.into = into

    def error(self, event: str, **kw: Any) -> None:
        self.into.append({"event": event, **kw})

    def info(self, event: str, **kw: Any) -> None:
        pass

    def bind(self, **kw: Any) -> _Recording:
        return self
