"""Host replicas sharing one PostgreSQL run store, for the scale-out tests (issue 18).

:func:`replicas` starts real ``a2e-host serve`` processes (the recording host of
:mod:`tests.support.recording_host`: the conformance tools plus tools that append a line
per call to a file) on loopback, each with its own ``--replica-id`` and the same
``--store postgresql://…`` and a short lease, and stops them after (SIGCONT first for a
paused one, then SIGTERM; a killed one is left as it is).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import anyio

from tests.support.process import WAIT, HostProcess, open_host
from tests.support.ws import LISTENING

__all__ = ["LEASE", "Fifos", "Replica", "open_gate", "recorded", "replicas", "calls"]

HOST = [sys.executable, "-m", "tests.support.recording_host", "serve", "--port", "0"]
LEASE = 3.0
"""Seconds a replica may be silent before another takes its runs over, in the takeover
tests: short, to keep them quick, yet long enough that a replica starved of CPU on a
loaded machine keeps its runs (tests where no replica dies use the default, 10 s)."""


@dataclass
class Replica:
    name: str
    url: str
    host: HostProcess

    @property
    def pid(self) -> int:
        return self.host.process.pid


@asynccontextmanager
async def replicas(store_url: str, *names: str, lease: float = LEASE, **env: str
                   ) -> AsyncIterator[dict[str, Replica]]:
    """Start one replica per name (``--replica-id NAME``) on ``store_url`` (with ``env``
    variables); yield them by name once all listen."""
    async with anyio.create_task_group() as tg:
        started: dict[str, HostProcess] = {}
        try:
            for name in names:
                host = await open_host([*HOST, "--store", store_url, "--replica-id", name],
                                       A2E_STORE_LEASE=str(lease), A2E_LOG_LEVEL="warning", **env)
                started[name] = host
                tg.start_soon(host.collect_stderr)
            found: dict[str, Replica] = {}
            with anyio.fail_after(WAIT * 2):
                for name, host in started.items():
                    url = (await host.wait_stderr(LISTENING)).group(1)
                    found[name] = Replica(name, url, host)
            yield found
        finally:
            with anyio.CancelScope(shield=True):
                for host in started.values():
                    if host.process.returncode is None:
                        with suppress(ProcessLookupError):
                            os.kill(host.process.pid, signal.SIGCONT)
                            host.process.send_signal(signal.SIGTERM)
                for host in started.values():
                    with anyio.move_on_after(WAIT):
                        await host.process.wait()
                    if host.process.returncode is None:
                        host.process.kill()
                        await host.process.wait()
            tg.cancel_scope.cancel()


class Fifos:
    """A gate a blocking recording tool waits on, and where it says it recorded its call."""

    def __init__(self, folder: Path, name: str) -> None:
        self.gate, self.started = folder / f"{name}_gate", folder / f"{name}_started"
        os.mkfifo(self.gate)
        os.mkfifo(self.started)


async def open_gate(fifo: Path, text: str = "go") -> None:
    """Let a blocked tool return: write ``text`` to its FIFO (waits for its reader)."""

    def write() -> None:
        with open(fifo, "w", encoding="utf-8") as out:
            out.write(text)

    await anyio.to_thread.run_sync(write, abandon_on_cancel=True)


async def recorded(fifo: Path) -> str:
    """Wait until a blocking tool says (on ``fifo``) it recorded its call."""

    def read() -> str:
        with open(fifo, encoding="utf-8") as said:
            return said.read()

    return await anyio.to_thread.run_sync(read, abandon_on_cancel=True)


def calls(rec: Path) -> list[str]:
    """The node ids the recording tools were called for, in order."""
    if not rec.exists():
        return []
    return [line.split()[0] for line in rec.read_text().splitlines()]
