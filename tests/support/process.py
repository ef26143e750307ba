"""A host subprocess for transport tests: its environment, its streams, its memory.

Every wait on a host process is bounded by :data:`WAIT`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from contextlib import suppress
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from tests.support import REPO

CLI = [sys.executable, "-m", "a2e_host"]
WAIT = 15.0  # seconds: the bound on every wait for a host process
STARTUP = 60.0
"""Seconds a host process gets to start (until it listens, or writes its first line):
its imports are most of a second of CPU, which a busy 2-core machine stretches past
:data:`WAIT`. A bound on nothing the tests assert."""


class HostProcess:
    """A host subprocess; stderr is collected in the background (never blocks it)."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.stderr = bytearray()
        self._stderr_grew = anyio.Event()
        self.stdout = BufferedByteReceiveStream(process.stdout) if process.stdout else None
        self._answered = False  # whether a line came on stdout yet

    async def collect_stderr(self) -> None:
        assert self.process.stderr is not None
        async for chunk in self.process.stderr:
            self.stderr += chunk
            self._stderr_grew.set()
            self._stderr_grew = anyio.Event()

    async def wait_stderr(self, pattern: str) -> re.Match[str]:
        """Wait (bounded by the caller) until stderr matches ``pattern``."""
        while True:
            found = re.search(pattern, self.stderr.decode("utf-8", "replace"))
            if found:
                return found
            await self._stderr_grew.wait()

    async def send(self, *lines: bytes | dict[str, Any]) -> None:
        assert self.process.stdin is not None
        data = b"".join(
            (json.dumps(x).encode() if isinstance(x, dict) else x) + b"\n" for x in lines
        )
        await self.process.stdin.send(data)

    async def receive(self, wait: float = WAIT) -> dict[str, Any]:
        """The next stdout line, which must be one JSON object (within ``wait`` seconds;
        the first line, which waits for the host to start, within :data:`STARTUP`)."""
        assert self.stdout is not None
        with anyio.fail_after(wait if self._answered else max(wait, STARTUP)):
            line = await self.stdout.receive_until(b"\n", 64 * 2**20)
        self._answered = True
        message = json.loads(line)
        assert isinstance(message, dict), line[:200]
        return message

    async def read_rest(self) -> bytes:
        """Everything left on stdout until the host closes it."""
        assert self.stdout is not None
        chunks = []
        with anyio.fail_after(WAIT):
            try:
                while True:
                    chunks.append(await self.stdout.receive())
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                pass
        return b"".join(chunks)

    async def wait(self) -> int:
        with anyio.fail_after(WAIT):
            return await self.process.wait()


def signal_unless_reaped(process: Process, signum: int) -> None:
    """Send ``signum`` to ``process`` unless its exit was already seen. Not
    ``process.send_signal`` (nor ``terminate``/``kill``): those poll the child first
    (``waitpid`` with ``WNOHANG``), and when it has just exited that poll reaps it ahead
    of asyncio's child watcher, which then reports exit status 255 ("Unknown child
    process pid"). ``os.kill`` leaves the reaping to the watcher; a child that exited
    and is not reaped yet is a zombie, which a signal cannot harm."""
    if process.returncode is None:
        with suppress(ProcessLookupError):
            os.kill(process.pid, signum)


def host_env(**extra: str) -> dict[str, str]:
    """This environment without any ``A2E_*`` variable, JSON logs, the repository importable,
    then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2E_")}
    env.update({"PYTHONPATH": str(REPO), "A2E_LOG_FORMAT": "json", **extra})
    return env


async def open_host(argv: list[str], **env: str) -> HostProcess:
    """Start ``argv`` in the repository with every stream piped (:func:`host_env` + ``env``)."""
    process = await anyio.open_process(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        cwd=REPO, env=host_env(**env),
    )
    return HostProcess(process)


# ── memory, from /proc (Linux) ──────────────────────────────────────────────────


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def peak_rss_kib(pid: int) -> int:
    """The process's peak RSS (``VmHWM``) since it started or was last reset, KiB."""
    return _status_kib(pid, "VmHWM")


def peak_rss(pid: int) -> int:
    """The process's peak RSS since it started or was last reset, bytes."""
    return peak_rss_kib(pid) * 1024


def current_rss(pid: int) -> int:
    """The process's RSS now (``VmRSS``), bytes."""
    return _status_kib(pid, "VmRSS") * 1024


def reset_peak_rss(pid: int) -> None:
    """Reset the process's peak RSS (VmHWM) to its current RSS (Linux, ``clear_refs`` 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
