"""max_procs: proc nodes running at once on the host; a further one waits for a slot."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from a2e_host.chains.proc import DEFAULT_MAX_PROCS, ProcPolicy, run_proc
from a2e_host.config import HostConfig, load_config

# Each proc writes its own pid to started_<i>, then blocks reading the fifo gate_<i>.
SCRIPT = "echo $$ > started_$0; exec cat gate_$0"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def until(condition: Any, what: str) -> None:
    """Wait until ``condition()`` holds (bounded: fails after 20 s, naming ``what``)."""
    try:
        with anyio.fail_after(20):
            while not condition():  # noqa: ASYNC110 - child processes write files, no event
                await anyio.sleep(0.01)
    except TimeoutError:
        pytest.fail(f"timed out waiting until {what}")


def test_max_procs_is_a_host_setting_with_a_default() -> None:
    assert HostConfig().max_procs == DEFAULT_MAX_PROCS == 32
    assert load_config(environ={"A2E_MAX_PROCS": "3"}).max_procs == 3
    with pytest.raises(ValueError, match="max_procs"):
        load_config(environ={"A2E_MAX_PROCS": "0"})
    pol = ProcPolicy.from_config(HostConfig(allow_proc=("sh",), max_procs=5))
    assert pol.max_procs == 5 and pol.procs_running == 0


def test_a_proc_over_max_procs_waits_for_a_slot_until_a_tree_is_reaped(tmp_path: Path) -> None:
    for i in range(3):
        os.mkfifo(tmp_path / f"gate_{i}")
    pol = ProcPolicy.from_config(HostConfig(allow_proc=("sh",), root=str(tmp_path), max_procs=2))
    results: dict[int, dict[str, Any]] = {}

    def started() -> dict[int, int]:
        return {
            i: int((tmp_path / f"started_{i}").read_text())
            for i in range(3)
            if (tmp_path / f"started_{i}").exists()
            and (tmp_path / f"started_{i}").read_text().strip()
        }

    async def one(i: int) -> None:
        results[i] = await run_proc({"argv": ["sh", "-c", SCRIPT, str(i)], "timeout": 60}, pol)

    def release(i: int) -> None:
        with open(tmp_path / f"gate_{i}", "w") as gate:  # pairs with cat's open; EOF on close
            gate.write("done\n")

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(one, i)
            await until(lambda: len(started()) == 2, "two procs started")
            await until(lambda: pol.slots.statistics().tasks_waiting == 1, "one waiting")
            first = started()
            assert pol.procs_running == 2 and all(alive(pid) for pid in first.values())
            (waiting,) = set(range(3)) - set(first)
            assert not (tmp_path / f"started_{waiting}").exists()  # never spawned
            done, other = sorted(first)
            await anyio.to_thread.run_sync(release, done)
            await until(lambda: waiting in started(), "the waiting proc started")
            # the slot came back only once the first tree was reaped
            assert done in results and not alive(first[done])
            assert pol.procs_running == 2
            for i in (other, waiting):
                await anyio.to_thread.run_sync(release, i)
        assert pol.procs_running == 0

    anyio.run(main)
    assert sorted(results) == [0, 1, 2]
    assert all(r["exit_code"] == 0 and r["stdout"] == "done\n" for r in results.values())
