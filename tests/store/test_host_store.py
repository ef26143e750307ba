"""The host's run store (issue 17, "Config"): configured by file, environment or flag,
opened at start and given to plugins, pruned while the host runs, closed (committed) at
stop; a store that cannot be opened stops the start with one line."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import anyio
import pytest

from a2e_host.config import HostConfig, load_config
from a2e_host.plugin import Plugin
from a2e_host.runtime.host import Host
from a2e_host.store import RunStatus, open_store
from tests.support.process import CLI
from tests.support.store import frame, record, stored_seqs

WAIT = 10  # seconds: the bound on every wait


class Recorder(Plugin):
    capability = "recorder"
    namespace = "recorder/*"


@pytest.mark.asyncio
async def test_a_host_opens_its_store_for_plugins_and_commits_it_at_stop(
        tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    plugin = Recorder(HostConfig())
    host = Host(HostConfig(store=path), plugins=[plugin])
    assert host.store is None and plugin.store is None
    async with host.running():
        store = host.store
        assert store is not None and plugin.store is store
        async with host.running():  # a second entry joins: the same store
            assert host.store is store
        store.create(record("r"))
        store.append("r", frame("r", 1))  # queued, never awaited: the stop commits it
    assert host.store is None and plugin.store is None
    assert stored_seqs(path, "r") == [1]
    async with host.running():  # and it can run again
        assert host.store is not None
        assert await host.store.get("r") is not None


@pytest.mark.asyncio
async def test_a_host_without_a_store_gives_plugins_none() -> None:
    plugin = Recorder(HostConfig())
    host = Host(HostConfig(), plugins=[plugin])
    async with host.running():
        assert host.store is None and plugin.store is None


@pytest.mark.asyncio
async def test_the_host_expires_runs_past_their_retention_while_it_runs(
        tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    store = await open_store(path)
    now = time.time()
    store.create(record("old", created=now - 50, retention_until=now - 40))
    store.create(record("new", created=now, retention_until=now + 3600))
    await store.aclose()
    host = Host(HostConfig(store=path, store_prune_interval=0.05), plugins=[])
    async with host.running():
        live = host.store
        assert live is not None
        live.finish("old", RunStatus.SUCCEEDED, b"{}", 0)  # window: 10 s from its end
        live.finish("new", RunStatus.SUCCEEDED, b"{}", 0)
        await live.flush()
    with pytest.MonkeyPatch.context() as patch:  # ten seconds later
        patch.setattr(time, "time", lambda: now + 20)
        async with host.running():
            live = host.store
            assert live is not None
            commits: list[anyio.Event] = [anyio.Event()]
            live.on_commit(lambda _: commits[-1].set())  # each sweep commits a batch
            with anyio.fail_after(WAIT):
                while (found := await live.get("old")) and found.status is not \
                        RunStatus.EXPIRED:
                    await commits[-1].wait()
                    commits.append(anyio.Event())
            kept = await live.get("new")
            assert kept is not None and kept.status is RunStatus.SUCCEEDED


def test_store_settings_come_from_the_file_the_environment_and_the_command_line(
        tmp_path: Path) -> None:
    toml = tmp_path / "host.toml"
    toml.write_text('[store]\npath = "data/runs.db"\ndurability = "full"\nretention = 60\n'
                    'prune_interval = 5\ncommit_delay = 0.001\n')
    config = load_config(toml, environ={})
    assert (config.store, config.durability, config.store_retention,
            config.store_prune_interval, config.store_commit_delay) == (
        str(tmp_path / "data" / "runs.db"), "full", 60.0, 5.0, 0.001)
    assert load_config(toml, environ={"A2E_STORE": "/env.db"}).store == "/env.db"
    assert load_config(toml, environ={"A2E_STORE": "/env.db"},
                       overrides={"store": "/cli.db"}).store == "/cli.db"
    assert load_config(environ={"A2E_DURABILITY": "full"}).durability == "full"
    assert HostConfig().store == "" and HostConfig().durability == "normal"
    toml.write_text('[store]\nfile = "x.db"\n')
    with pytest.raises(ValueError, match="unknown key 'file' in \\[store\\]"):
        load_config(toml, environ={})
    with pytest.raises(ValueError, match="durability .* must be one of normal, full"):
        load_config(environ={"A2E_DURABILITY": "paranoid"})


@pytest.mark.parametrize("command", ["stdio", "serve"])
def test_a_store_another_host_writes_stops_the_start_with_exit_2(
        tmp_path: Path, command: str) -> None:
    path = str(tmp_path / "runs.db")

    async def hold_and_start() -> subprocess.CompletedProcess[str]:
        store = await open_store(path)
        try:
            argv = [*CLI, command, "--store", path]
            if command == "serve":
                argv += ["--port", "0"]
            return await anyio.to_thread.run_sync(lambda: subprocess.run(
                argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL))
        finally:
            await store.aclose()

    done = anyio.run(hold_and_start, backend="asyncio")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"a2e-host: the run store {path!r} is in use by another "
                               "a2e-host process")


def test_a_local_run_ignores_the_store_a_serving_host_holds(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    chain = tmp_path / "chain.json"
    chain.write_text(json.dumps({
        "entry_node": "up", "initial_input": {"word": "file"},
        "nodes": [{"node_id": "up", "kind": "tool", "name": "upper",
                   "input_map": {"text": "input.word"}}],
    }), encoding="utf-8")

    async def hold_and_run() -> subprocess.CompletedProcess[str]:
        store = await open_store(path)  # as a serving host holds it
        try:
            return await anyio.to_thread.run_sync(lambda: subprocess.run(
                [*CLI, "run", str(chain), "--tools", "conformance", "--final"],
                capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                env={**os.environ, "A2E_STORE": path}))
        finally:
            await store.aclose()

    done = anyio.run(hold_and_run, backend="asyncio")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"text": "FILE"}
