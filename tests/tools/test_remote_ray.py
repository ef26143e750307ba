"""Remote tools on Ray (issue 18): a tool marked remote runs as a Ray task inside a chain,
a timeout or cancellation reaches its task, and a lost worker is a retryable node error.

One local Ray instance for the module (``ray.init(num_cpus=2)`` on 127.0.0.1, no
dashboard), started only by the test that needs it, shut down after. Its scenarios share
one test function: pytest-xdist spreads a module's tests over its workers, and each
worker would otherwise start a Ray instance of its own (seconds and ~0.5 GB each).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from a2e_host.chains.messages import ChainEvent
from a2e_host.chains.nodes import idempotency_key
from a2e_host.client import connect_memory
from a2e_host.config import HostConfig, load_config
from a2e_host.tools import load_tools
from a2e_host.tools.remote import REMOTE_WORKER_LOST, init_options
from tests.support.ray_tools import PACK, ray_host

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[None]:
    import ray

    # the workers import this repository's tests.support.ray_tools, as the driver does:
    # Ray's processes inherit the environment (a runtime_env would slow each worker start)
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), saved]))
    try:
        ray.init(num_cpus=2, **init_options(""))
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved
    try:
        yield
    finally:
        ray.shutdown()


async def wait_for_file(path: Path, seconds: float) -> None:
    with anyio.fail_after(seconds):
        while not path.exists():  # noqa: ASYNC110, ASYNC240 - a Ray worker writes it, no event
            await anyio.sleep(0.05)


async def wait_for_exit(pid: int, seconds: float) -> None:
    """Until process ``pid`` is gone (or a zombie, killed but not yet reaped)."""
    status = Path(f"/proc/{pid}/status")
    with anyio.fail_after(seconds):
        while True:
            try:
                if "\nState:\tZ" in status.read_text():  # noqa: ASYNC240 - /proc, no I/O wait
                    return
            except FileNotFoundError:
                return
            await anyio.sleep(0.05)


@pytest.mark.asyncio
@pytest.mark.timeout(180)
async def test_remote_tools_run_on_ray_stop_on_timeout_or_cancel_and_survive_a_lost_worker(
    ray_instance: None, tmp_path: Path
) -> None:
    async with connect_memory(ray_host()) as client:
        # remote tools inside a chain give the exact values, computed in Ray workers (two
        # at once: both CPUs' workers are warm for what follows)
        squares = [
            {"node_id": "a", "kind": "tool", "name": "square", "input": {"x": 12}},
            {"node_id": "b", "kind": "tool", "name": "square", "input": {"x": 3}},
            {"node_id": "c", "kind": "tool", "name": "square",
             "input_map": {"x": "sum([a.output.square, b.output.square])"}},
        ]
        resp = await client.run_chain(squares, "a", timeout=120).result()
        assert resp.success, resp.error
        assert (resp.outputs["a"]["square"], resp.outputs["b"]["square"]) == (144, 9)
        assert resp.final_output["square"] == 153 * 153
        assert resp.final_output["pid"] != os.getpid()

        # remote calls stopped mid-call. "stuck" (one C call of 60 s: deaf to ray.cancel's
        # KeyboardInterrupt) times out, and ray.cancel(force=True) kills its worker;
        # then chain/cancel reaches "nap", which stops between two short steps
        files = {n: {w: tmp_path / f"{n}.{w}" for w in ("started", "ended", "interrupted")}
                 for n in ("nap", "stuck")}
        naps = [{"node_id": n, "kind": "tool", "name": "nap",
                 "input": {**{w: str(p) for w, p in files[n].items()},
                           "seconds": 60, "step": step}}
                for n, step in (("nap", 0.02), ("stuck", 60))]
        naps[1] |= {"timeout": 5, "on_error": "skip"}
        run = await client.run_chain(naps, "nap", timeout=120).start()
        for n in files:
            await wait_for_file(files[n]["started"], 60)
        pids = {n: int(files[n]["started"].read_text()) for n in files}
        assert os.getpid() not in pids.values()
        with anyio.fail_after(60):
            async for message in run:
                if isinstance(message, ChainEvent) and message.phase == "error":
                    break
        assert message.node_id == "stuck"
        assert [e["code"] for e in message.data["errors"]] == ["timeout"]
        await wait_for_exit(pids["stuck"], 30)  # killed by the forced cancel
        assert not files["stuck"]["interrupted"].exists()
        assert not files["nap"]["interrupted"].exists()  # still running
        await run.cancel()
        resp = await run.result()
        assert resp.error is not None and resp.error.code == "cancelled"
        await wait_for_file(files["nap"]["interrupted"], 30)  # saw the KeyboardInterrupt
        assert not any(files[n]["ended"].exists() for n in files)

        # a killed worker is a retryable node error the node's retry policy recovers
        marker = tmp_path / "crashed"
        crash = [{"node_id": "c", "kind": "tool", "name": "crash_once",
                  "input": {"marker": str(marker), "value": 3},
                  "retry": {"max_attempts": 3, "interval": 0}}]
        run = client.run_chain(crash, "c", timeout=120)
        events: list[ChainEvent] = []
        with anyio.fail_after(120):
            async for message in run:
                if isinstance(message, ChainEvent):
                    events.append(message)
        resp = run.response
        assert resp is not None and resp.success, resp
        assert int(marker.read_text()) != os.getpid()
        retried = [e for e in events if e.kind == "progress"]
        assert [(e.data["attempt"], e.data["code"]) for e in retried] == [
            (1, REMOTE_WORKER_LOST)]
        done = events[-1]
        assert (done.node_id, done.phase) == ("c", "done")
        assert done.data["attempts"] == 2
        assert [(e["attempt"], e["code"]) for e in done.data["errors"]] == [
            (1, REMOTE_WORKER_LOST)]
        # the tool context reached the worker as data: the node's key and deadline
        out: dict[str, Any] = resp.final_output
        assert out["value"] == 3
        assert out["key"] == idempotency_key(f"{client.session_id}/{run.req_id}", "c")
        assert 0 < out["left"] <= 120
        assert out["run_key"] == ""  # the session id never reaches the worker

        # a function Ray cannot pickle fails its node with a sentence saying so
        locked = [{"node_id": "l", "kind": "tool", "name": "locked", "input": {"x": 1}}]
        resp = await client.run_chain(locked, "l", timeout=60).result()
        assert resp.error is not None and resp.error.node_id == "l"
        assert "cannot be sent to Ray" in resp.error.message
        assert "must be picklable" in resp.error.message

        # tool/call/req runs a remote tool too, through the same path
        call = await client.call_tool("square", {"x": 7}, timeout=60).result()
        assert call.success, call.error
        assert call.data["square"] == 49 and call.data["pid"] != os.getpid()

        # an output over max_output_bytes (8 MiB) stays in the worker: only its size
        # crosses, and the node fails with the ceiling's chain_limit
        flood = [{"node_id": "f", "kind": "tool", "name": "flood", "input": {"count": 9000}}]
        resp = await client.run_chain(flood, "f", timeout=60).result()
        assert resp.error is not None and resp.error.node_id == "f"
        assert resp.error.code == "chain_limit", resp.error
        assert resp.error.details["ceiling"] == "max_output_bytes"
        assert resp.error.details["requested"] > 8 * 1024 * 1024
        assert "left in the worker" in resp.error.message

        # an exception that cannot be pickled fails its node with its own sentence
        grumpy = [{"node_id": "g", "kind": "tool", "name": "grumpy", "input": {"x": 5}}]
        resp = await client.run_chain(grumpy, "g", timeout=60).result()
        assert resp.error is not None and resp.error.node_id == "g"
        assert "Grumpy: no 5" in resp.error.message, resp.error.message


def test_remote_tools_are_marked_by_name_or_pack_glob_on_copies() -> None:
    config = HostConfig(tools=("raytest",), remote_tools=("nap", "raytest.crash_*"))
    registry = load_tools(config, packs={"raytest": PACK})
    remote = {t.name: t.remote for t in registry}
    assert remote == {"square": True, "nap": True, "crash_once": True, "noop": False,
                      "locked": True, "flood": True, "grumpy": True}
    plain = load_tools(HostConfig(tools=("raytest",)), packs={"raytest": PACK})
    assert {t.name: t.remote for t in plain} == {
        "square": True, "nap": False, "crash_once": False, "noop": False, "locked": True,
        "flood": True, "grumpy": True}


def test_remote_settings_are_read_from_the_environment_and_toml(tmp_path: Path) -> None:
    env = {"A2E_REMOTE_TOOLS": "heavy.*, ocr", "A2E_RAY_ADDRESS": "ray://head:10001"}
    config = load_config(environ=env)
    assert config.remote_tools == ("heavy.*", "ocr")
    assert config.ray_address == "ray://head:10001"
    toml = tmp_path / "host.toml"
    toml.write_text('remote_tools = ["pack.*"]\nray_address = "auto"\n')
    config = load_config(toml, environ={})
    assert (config.remote_tools, config.ray_address) == (("pack.*",), "auto")
    with pytest.raises(ValueError, match="remote_tools"):
        load_config(environ={}, overrides={"remote_tools": 3})


def test_a_tool_marked_remote_without_ray_installed_refuses_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(ValueError, match=r"pip install 'a2e-host\[ray\]'"):
        load_tools(HostConfig(tools=("raytest",)), packs={"raytest": PACK})


def test_a_local_ray_instance_is_started_on_loopback_without_dashboard() -> None:
    assert init_options("") == {
        "log_to_driver": False, "logging_level": "warning", "include_dashboard": False,
        "_node_ip_address": "127.0.0.1"}
    assert init_options("auto") == {
        "log_to_driver": False, "logging_level": "warning", "address": "auto"}


def test_a_host_without_remote_tools_never_imports_ray() -> None:
    script = textwrap.dedent("""
        import sys, anyio
        from a2e_host.client import connect_memory
        from a2e_host.config import HostConfig
        from a2e_host.runtime.host import Host

        async def main():
            async with connect_memory(Host(HostConfig(tools=("conformance",)))) as client:
                nodes = [{"node_id": "a", "kind": "tool", "name": "add",
                          "input": {"a": 2, "b": 40}}]
                resp = await client.run_chain(nodes, "a").result()
                assert resp.final_output == {"sum": 42}, resp
        anyio.run(main)
        print(sorted(m for m in sys.modules
                     if m.split(".")[0] == "ray" or m == "a2e_host.tools.remote"))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
