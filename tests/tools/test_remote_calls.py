"""Remote tool calls as the host makes them, against a stand-in for Ray (no Ray instance:
the executor's own bookkeeping): how many tasks it keeps in flight, and what a call
waiting for the connection costs while ``ray.init`` is still starting."""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import subprocess
import sys
import textwrap
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from a2e_host.tools import remote
from tests.support.ray_tools import square

REPO = Path(__file__).resolve().parents[2]


class StandInThread:
    """What :func:`remote._ray_thread` gives: a connection future (pending until the test
    sets it) and the refs handed over for cancelling."""

    def __init__(self) -> None:
        self.connected: concurrent.futures.Future[tuple[Any, Any]] = concurrent.futures.Future()
        self.cancelled: list[Any] = []
        self.cancels = SimpleNamespace(put=self.cancelled.append)
        self.restores_sigterm = True  # not this test process's handler

    def usable(self) -> bool:
        return True


class StandInTask:
    """``task.remote(...)``: a future the test ends; counts those in flight."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.most = 0
        self.sent = 0
        self.futures: list[asyncio.Future[Any]] = []
        self.four_sent = anyio.Event()

    def remote(self, *args: Any) -> asyncio.Future[Any]:
        self.sent += 1
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(lambda _: self._ended())
        self.futures.append(fut)
        if self.sent == 4:
            self.four_sent.set()
        return fut

    def _ended(self) -> None:
        self.in_flight -= 1


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[StandInThread]:
    thread = StandInThread()
    monkeypatch.setattr(remote, "_thread", thread)
    yield thread


@pytest.mark.asyncio
async def test_the_host_keeps_at_most_max_in_flight_ray_tasks_and_queues_the_rest(
    stand_in: StandInThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remote, "MAX_IN_FLIGHT", 4)
    task = StandInTask()
    ray = SimpleNamespace(exceptions=SimpleNamespace(
        RayTaskError=type("RayTaskError", (Exception,), {}),
        RayError=type("RayError", (Exception,), {})))
    stand_in.connected.set_result((ray, task))
    results: list[Any] = []

    async def call(i: int) -> None:
        results.append(await remote.run_remote("square", square, {"x": i}, False))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(call, i)
            await task.four_sent.wait()
            for _ in range(20):  # every other call gets its turn to send
                await anyio.lowlevel.checkpoint()
            assert (task.sent, task.in_flight) == (4, 4)  # six wait in the host
            while len(results) < 10:
                for n, f in enumerate(task.futures):
                    if not f.done():
                        f.set_result({"n": n})
                await anyio.lowlevel.checkpoint()
    assert task.most == 4 and task.sent == 10
    assert sorted(r["n"] for r in results) == list(range(10))


@pytest.mark.asyncio
async def test_calls_cancelled_while_ray_is_starting_hold_no_thread(
    stand_in: StandInThread,
) -> None:
    before = threading.active_count()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for i in range(30):
                tg.start_soon(remote.run_remote, "square", square, {"x": i}, False)
            for _ in range(20):
                await anyio.lowlevel.checkpoint()
            assert threading.active_count() < before + 5  # no thread waits per call
            tg.cancel_scope.cancel()
    assert not stand_in.connected.cancelled()  # the connection goes on for the next call
    assert stand_in.cancelled == []  # nothing had been sent to Ray


def test_sigterm_reaches_the_host_s_own_handler_after_ray_connects() -> None:
    # Ray's core worker installs a C-level SIGTERM handler when it connects (here: libc's
    # signal() sets SIG_DFL behind Python's back, as it would): the host's graceful stop,
    # and ray.shutdown at exit, must still be what a SIGTERM runs, even when the call that
    # started the connection was cancelled before it was made
    script = textwrap.dedent("""
        import asyncio, concurrent.futures, ctypes, os, signal
        from types import SimpleNamespace
        from a2e_host.tools import remote

        async def main():
            got = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, got.set)
            thread = SimpleNamespace(connected=concurrent.futures.Future(),
                                     usable=lambda: True, restores_sigterm=False)
            remote._thread = thread
            waiting = asyncio.ensure_future(remote._connected("square"))
            await asyncio.sleep(0)
            waiting.cancel()  # the only call gave up while Ray was starting
            await asyncio.gather(waiting, return_exceptions=True)
            ctypes.CDLL(None).signal(signal.SIGTERM, 0)  # SIG_DFL, as a C library would
            thread.connected.set_result(("ray", "task"))
            for _ in range(5):
                await asyncio.sleep(0)
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.wait_for(got.wait(), 10)
            print("stopped gracefully")

        asyncio.run(main())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert done.stdout.strip() == "stopped gracefully"


def test_ray_is_an_optional_extra_and_a_test_dependency_never_a_runtime_one() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower() for r in requirements}

    assert "ray" not in names(project["dependencies"])
    assert "ray" in names(project["optional-dependencies"]["ray"])
    assert "ray" in names(project["optional-dependencies"]["test"])
