"""A process spawned by ``proc/spawn/req`` gets the environment a ``proc`` node's child
gets (issue 15: every guarantee ``proc`` nodes have; PROTOCOL.md §10): the host's own
variables stay out but for the operator's ``proc_env_allow``, and the request's ``env``
may set only the operator's ``proc_env_keys``; on the real stdio CLI."""

from __future__ import annotations

import pytest

from tests.support.process import CLI
from tests.support.procs import PROC_FLAGS, ProcWire, stdout_of
from tests.support.stdio import handshake, stdio_process

pytestmark = pytest.mark.timeout(90)

SCRIPT = 'echo "[$HOST_SECRET][$KEEP_ME][$SET_ME]"; env | cut -d= -f1 | sort'


@pytest.mark.asyncio
async def test_a_spawned_process_sees_only_the_allowed_environment() -> None:
    async with stdio_process([*CLI, "stdio", *PROC_FLAGS], HOST_SECRET="s3cret",
                             KEEP_ME="kept", A2E_PROC_ENV_ALLOW="KEEP_ME",
                             A2E_PROC_ENV_KEYS="SET_ME") as host:
        await handshake(host, ["proc"])
        wire = ProcWire(host.send, host.receive)
        spawned = await wire.spawn(["sh", "-c", SCRIPT], env={"SET_ME": "set"},
                                   stdin_mode="null")
        assert spawned["ok"], spawned
        out = stdout_of(await wire.until_exit(spawned["req_id"])).splitlines()
        refused = await wire.spawn(["sh", "-c", SCRIPT], env={"OTHER": "x"})
    assert out[0] == "[][kept][set]"
    assert set(out[1:]) <= {"PATH", "LANG", "HOME", "PWD", "SHLVL", "_", "KEEP_ME",
                            "SET_ME"}, out
    assert (refused["type"], refused["ok"], refused["error_code"]) == (
        "proc/spawn/resp", False, "invalid_input")
    assert refused["error"] == (
        "env key 'OTHER' is not allowed (keys a process may set: SET_ME); remove it, or have "
        "the operator list it in proc_env_keys (A2E_PROC_ENV_KEYS or proc_env_keys in the "
        "configuration file)")
