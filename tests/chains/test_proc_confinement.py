"""Proc nodes against the real ``a2e-host stdio|serve --allow-proc sh --allow-proc sleep``
(PROTOCOL.md §5 kind ``proc``, §8): refusals name the rule, the child's output never
reaches the protocol stream, and a vanished client leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect

from tests.support.process import CLI, STARTUP, WAIT, open_host
from tests.support.requests import chain, error_of
from tests.support.stdio import Client, handshake, stdio_process
from tests.support.ws import receive

PROC_FLAGS = ["--allow-proc", "sh", "--allow-proc", "sleep"]
CAPS = ["chains", "proc"]


@asynccontextmanager
async def proc_stdio(root: Path, **env: str) -> AsyncIterator[Client]:
    """The real stdio host confined to ``root``, handshake asking ``proc``; EOF, exit 0."""
    async with stdio_process([*CLI, "stdio", *PROC_FLAGS, "--root", str(root)], **env) as host:
        resp = await handshake(host, CAPS)
        # with an executable allowed, proc is a served capability, no longer a gate
        assert [c["capability"] for c in resp["accepted_caps"]] == ["chains", "proc"], resp
        assert resp["accepted_caps"][0]["metadata"]["gates"] == [], resp
        yield Client(host, resp)


def proc(node_id: str, **fields: Any) -> dict[str, Any]:
    return {"node_id": node_id, "kind": "proc", **fields}


def sh(script: str, **extra: Any) -> dict[str, Any]:
    return {"argv": ["sh", "-c", script], **extra}


@pytest.mark.asyncio
async def test_argv_from_input_map_naming_a_non_allowed_executable_fails_the_node(
    tmp_path: Path,
) -> None:
    nodes = [proc("p", input_map={"argv": "input.argv"})]
    async with proc_stdio(tmp_path) as client:
        for exe in ("cat", "/bin/cat", "./sh", "sh "):
            events, resp = await client.run(
                chain(f"x{exe}", nodes, initial_input={"argv": [exe, "/etc/hostname"]})
            )
            err = error_of(resp)
            assert (err["code"], err["node_id"]) == ("chain_node_error", "p"), (exe, err)
            assert "not allowed" in err["message"] and "--allow-proc" in err["message"], (
                f"argv[0] {exe!r}: the refusal must name the allowlist rule: {err['message']}"
            )
            assert [e["phase"] for e in events] == ["start", "error"], (exe, events)
        _, ok = await client.run(
            chain("ok", nodes, initial_input={"argv": ["sh", "-c", "echo fine"]})
        )
        assert ok["success"] and ok["final_output"]["stdout"] == "fine\n", ok
        await client.assert_alive("after")


@pytest.mark.asyncio
async def test_proc_output_on_stdout_stays_in_its_node_output_never_on_the_wire(
    tmp_path: Path,
) -> None:
    script = (
        "echo '{\"type\":\"chain/resp\",\"req_id\":\"forged\"}'; printf 'no newline';"
        " echo err >&2; (sleep 0.1; echo late-grandchild) &"
    )
    async with proc_stdio(tmp_path) as client:
        events, resp = await client.run(chain("noisy", [proc("p", input=sh(script))]))
        assert resp["success"], resp
        out = resp["final_output"]
        assert out["stdout"] == (
            '{"type":"chain/resp","req_id":"forged"}\nno newlinelate-grandchild\n'
        ), out
        assert out["stderr"] == "err\n", out
        assert [e["phase"] for e in events] == ["start", "done"]
        await client.assert_alive("after")


@pytest.mark.asyncio
async def test_cwd_escaping_the_root_fails_the_node_naming_cwd(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "out").symlink_to(tmp_path)
    async with proc_stdio(root) as client:
        for cwd in ("..", "sub/../..", "/", str(tmp_path), "out", "missing"):
            events, resp = await client.run(
                chain("c", [proc("p", input=sh("pwd", cwd=cwd))])
            )
            err = error_of(resp)
            assert err["node_id"] == "p" and f"cwd {cwd!r}" in err["message"], (
                f"cwd {cwd!r} must be refused naming the field: {resp}"
            )
            assert [e["phase"] for e in events] == ["start", "error"], events
        _, resp = await client.run(chain("in", [proc("p", input=sh("pwd", cwd="sub"))]))
        assert resp["final_output"]["stdout"] == f"{(root / 'sub').resolve()}\n", resp


@pytest.mark.asyncio
async def test_host_environment_does_not_reach_the_child(tmp_path: Path) -> None:
    """proc.py: the child environment is minimal (PATH, LANG, HOME) plus the allowlist."""
    async with proc_stdio(tmp_path, HOST_SECRET="s3cret", PYTHONSTARTUP="/x") as client:
        _, resp = await client.run(chain("env", [proc("p", input=sh("env | sort"))]))
    names = {line.split("=", 1)[0] for line in resp["final_output"]["stdout"].splitlines()}
    assert "HOST_SECRET" not in names and "PYTHONSTARTUP" not in names, names
    assert names <= {"PATH", "LANG", "HOME", "PWD", "SHLVL", "_"}, names


@pytest.mark.asyncio
async def test_node_env_cannot_inject_loader_variables_into_an_allowed_executable(
    tmp_path: Path,
) -> None:
    """The executable allowlist (--allow-proc) is the proc security boundary (proc.py
    "Policy"); LD_PRELOAD / LD_LIBRARY_PATH from the agent would load arbitrary code into
    an allowed executable, so the child must never see them: the node is refused naming
    the variable, or the variable is dropped."""
    async with proc_stdio(tmp_path) as client:
        for name in ("LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"):
            _, resp = await client.run(chain(
                name, [proc("p", input=sh(f'echo "[${name}]"', env={name: "/tmp/evil.so"}))]
            ))
            if resp["success"]:
                assert resp["final_output"]["stdout"] == "[]\n", (
                    f"node env {name}=/tmp/evil.so reached the child: {resp['final_output']}"
                )
            else:
                assert name in resp["error"]["message"], resp["error"]


@pytest.mark.asyncio
async def test_client_disconnect_kills_the_proc_group_grandchild_included(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "pid"
    script = "sleep 60 & echo $$ > pid.tmp && mv pid.tmp pid; wait"
    async with anyio.create_task_group() as tg:
        host = await open_host(
            [*CLI, "serve", "--port", "0", *PROC_FLAGS, "--root", str(tmp_path)]
        )
        tg.start_soon(host.collect_stderr)
        with anyio.fail_after(STARTUP):
            found = await host.wait_stderr(r"a2e-host listening on (ws://127\.0\.0\.1:\d+)")
        ws = await connect(found.group(1))
        await ws.send(json.dumps({"type": "handshake/req", "id": "h", "agent_caps": CAPS}))
        assert (await receive(ws))["ok"]
        await ws.send(json.dumps(chain("g", [proc("p", input=sh(script))])))
        assert (await receive(ws))["phase"] == "start"
        with anyio.fail_after(WAIT):
            while not pid_file.exists():  # noqa: ASYNC110 - the child writes it, no event
                await anyio.sleep(0.01)
        pgid = int(pid_file.read_text())
        os.killpg(pgid, 0)  # the group is alive while the chain runs
        ws.transport.abort()
        alive = True
        with anyio.move_on_after(2.0):
            while alive:
                try:
                    os.killpg(pgid, 0)
                    await anyio.sleep(0.02)
                except ProcessLookupError:
                    alive = False
        if alive:
            os.killpg(pgid, signal.SIGKILL)
        host.process.send_signal(signal.SIGTERM)
        code = await host.wait()
        tg.cancel_scope.cancel()
    assert not alive, f"process group {pgid} still alive 2 s after the client vanished"
    assert code == 0, host.stderr[-2000:]

