"""run_proc: argv only, allowlist, caps without deadlock, and killing the whole group."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from a2e_host.chains.messages import ChainNode
from a2e_host.chains.proc import ProcPolicy, run_proc
from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError, NodeTimeout

PY = sys.executable
MiB = 1024 * 1024


def policy(tmp_path: Path, env_keys: tuple[str, ...] = (), **options: object) -> ProcPolicy:
    config = HostConfig(allow_proc=("sh", PY), root=str(tmp_path), proc_env_keys=env_keys)
    return ProcPolicy.from_config(config, **options)  # type: ignore[arg-type]


def group_is_gone(pgid: int) -> bool:
    """True once no process of group ``pgid`` exists (bounded retry: reaping is async)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


async def read_pid_from_fifo(fifo: Path) -> int:
    """The pid the child writes into ``fifo`` (blocks until it does; bounded)."""
    with anyio.fail_after(10):
        text = await anyio.to_thread.run_sync(fifo.read_text, abandon_on_cancel=True)
    return int(text)


LOUD = (
    "import sys; sys.stdout.buffer.write(b'o' * 5_000_000); "
    "sys.stderr.buffer.write(b'e' * 1_000_000)"
)


def test_large_outputs_on_both_streams_do_not_deadlock(tmp_path: Path) -> None:
    pol = policy(tmp_path, max_stdout_bytes=8 * MiB)
    out = anyio.run(run_proc, {"argv": [PY, "-c", LOUD], "timeout": 60}, pol)
    assert (len(out["stdout"]), len(out["stderr"])) == (5_000_000, 1_000_000)
    assert out["exit_code"] == 0 and out["truncated"] is False


def test_output_over_the_cap_is_truncated_to_exactly_the_cap(tmp_path: Path) -> None:
    out = anyio.run(run_proc, {"argv": [PY, "-c", LOUD], "timeout": 60}, policy(tmp_path))
    assert out["truncated"] is True
    assert len(out["stdout"]) == MiB
    assert len(out["stderr"]) == 1_000_000


def test_timeout_kills_the_group_grandchildren_included(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    never = tmp_path / "never"  # a FIFO nobody writes: its readers never end on their own
    os.mkfifo(never)
    script = f"echo $$ > {pidfile}; cat {never} & cat {never}"
    args = {"argv": ["sh", "-c", script], "timeout": 1}

    async def main() -> None:
        with anyio.fail_after(60):  # only a guard: a run_proc that waited would never end
            await run_proc(args, policy(tmp_path))

    # the timeout is raised at all only if run_proc stopped waiting for the group
    with pytest.raises(NodeTimeout, match=r"timed out after 1 s"):
        anyio.run(main)
    assert group_is_gone(int(pidfile.read_text()))


def test_cancelling_the_caller_kills_the_group(tmp_path: Path) -> None:
    fifo = tmp_path / "pid.fifo"
    os.mkfifo(fifo)
    args = {"argv": ["sh", "-c", f"sleep 60 & echo $$ > {fifo}; sleep 60"]}
    outcome: list[str] = []

    async def main() -> int:
        async with anyio.create_task_group() as tg:

            async def runner() -> None:
                try:
                    await run_proc(args, policy(tmp_path))
                except anyio.get_cancelled_exc_class():
                    outcome.append("cancelled")
                    raise

            tg.start_soon(runner)
            pgid = await read_pid_from_fifo(fifo)
            tg.cancel_scope.cancel()
        return pgid

    pgid = anyio.run(main)
    assert outcome == ["cancelled"]
    assert group_is_gone(pgid)


def test_invalid_utf8_becomes_replacement_characters(tmp_path: Path) -> None:
    script = (
        "import sys; sys.stdout.buffer.write(b'a\\xff\\xfeb'); sys.stderr.buffer.write(b'\\xc3')"
    )
    out = anyio.run(run_proc, {"argv": [PY, "-c", script]}, policy(tmp_path))
    assert out["stdout"] == "a\ufffd\ufffdb"
    assert out["stderr"] == "\ufffd"


def test_non_zero_exit_fails_with_code_and_stderr_tail(tmp_path: Path) -> None:
    args = {"argv": ["sh", "-c", "echo 'no such input' >&2; exit 3"]}
    with pytest.raises(NodeError) as info:
        anyio.run(run_proc, args, policy(tmp_path))
    assert "exited with code 3" in info.value.message
    assert "no such input" in info.value.message
    assert info.value.details["exit_code"] == 3


def test_check_false_returns_the_exit_code(tmp_path: Path) -> None:
    out = anyio.run(
        run_proc, {"cmd": ["sh", "-c", "echo hi; exit 3"], "check": False}, policy(tmp_path)
    )
    assert (out["exit_code"], out["stdout"], out["stderr"]) == (3, "hi\n", "")
    assert isinstance(out["duration_ms"], int)


def test_stdin_env_and_cwd_reach_the_child(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    args = {
        "argv": ["sh", "-c", 'cat; pwd; echo "$GREETING"; echo "${SECRET_TOKEN:-unset}"'],
        "stdin": "from stdin\n",
        "cwd": "work",
        "env": {"GREETING": "hello"},
    }
    os.environ["SECRET_TOKEN"] = "leak"
    try:
        out = anyio.run(run_proc, args, policy(tmp_path, env_keys=("GREETING",)))
    finally:
        del os.environ["SECRET_TOKEN"]
    assert out["stdout"] == f"from stdin\n{(tmp_path / 'work').resolve()}\nhello\nunset\n"


def test_stdin_is_dev_null_by_default(tmp_path: Path) -> None:
    out = anyio.run(run_proc, {"argv": ["sh", "-c", "cat; echo done"]}, policy(tmp_path))
    assert out["stdout"] == "done\n"


def test_cwd_outside_the_root_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NodeError, match="'..' components are not allowed"):
        anyio.run(run_proc, {"argv": ["sh", "-c", "pwd"], "cwd": "../"}, policy(tmp_path))
    with pytest.raises(NodeError, match="must be inside the root"):
        anyio.run(run_proc, {"argv": ["sh", "-c", "pwd"], "cwd": "/"}, policy(tmp_path))


def test_executable_not_allowed_is_refused_at_run_time(tmp_path: Path) -> None:
    with pytest.raises(NodeError, match=r"executable 'ls' is not allowed for proc nodes"):
        anyio.run(run_proc, {"argv": ["ls"]}, policy(tmp_path))


def test_shell_string_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NodeError, match="not a shell command line"):
        anyio.run(run_proc, {"argv": "sh -c 'echo hi'"}, policy(tmp_path))


def test_no_allowlist_means_proc_is_disabled() -> None:
    refusal = ProcPolicy.from_config(HostConfig()).check_argv0("sh")
    assert refusal is not None and "proc nodes are disabled on this host" in refusal


def test_static_check_of_a_node(tmp_path: Path) -> None:
    pol = policy(tmp_path)
    ok = ChainNode(node_id="p", kind="proc", input={"argv": ["sh", "-c", "true"]})
    bad = ChainNode(node_id="p", kind="proc", input={"argv": ["rm", "-rf", "/"]})
    dynamic = ChainNode(node_id="p", kind="proc", input_map={"argv": "input.cmd"})
    assert pol.static_check(ok) is None
    assert pol.static_check(dynamic) is None
    refusal = pol.static_check(bad)
    assert refusal is not None and refusal.startswith(
        "proc node 'p': executable 'rm' is not allowed"
    )


def test_unknown_allow_proc_entry_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="allow_proc entry 'no-such-exe-xyz' is not an executable"):
        ProcPolicy.from_config(HostConfig(allow_proc=("no-such-exe-xyz",)))


# ── the allowlist runs exactly what it names (issue 12.9) ──


def allow(tmp_path: Path, *names: str, env_keys: tuple[str, ...] = ()) -> ProcPolicy:
    config = HostConfig(allow_proc=names, root=str(tmp_path), proc_env_keys=env_keys)
    return ProcPolicy.from_config(config)


@pytest.mark.parametrize(
    ("allowed", "argv"),
    [
        ("rbash", ["/usr/bin/bash", "-c", "echo unrestricted"]),
        ("rbash", ["bash", "-c", "echo unrestricted"]),
        ("xzcat", ["/usr/bin/xz", "-z", "victim.txt"]),
        ("xzcat", ["xz", "-z", "victim.txt"]),
    ],
)
def test_another_name_for_an_allowed_file_is_refused(
    tmp_path: Path, allowed: str, argv: list[str]
) -> None:
    if shutil.which(allowed) is None:
        pytest.skip(f"{allowed} is not installed")
    (tmp_path / "victim.txt").write_text("keep me")
    with pytest.raises(NodeError, match=rf"executable {argv[0]!r} is not allowed .*{allowed}"):
        anyio.run(run_proc, {"argv": argv}, allow(tmp_path, allowed))
    assert (tmp_path / "victim.txt").read_text() == "keep me"


def test_a_multi_call_binary_behaves_as_the_allowlisted_name(tmp_path: Path) -> None:
    if shutil.which("rbash") is None or shutil.which("xzcat") is None:
        pytest.skip("rbash or xzcat is not installed")
    pol = allow(tmp_path, "rbash", "xzcat")
    out = anyio.run(run_proc, {"argv": ["rbash", "-c", "cd /"], "check": False}, pol)
    assert out["exit_code"] == 1 and "restricted" in out["stderr"], out
    # the absolute path the entry resolved to also runs it under the allowlisted name
    out = anyio.run(
        run_proc, {"argv": [shutil.which("rbash"), "-c", "cd /"], "check": False}, pol
    )
    assert out["exit_code"] == 1 and "restricted" in out["stderr"], out
    (tmp_path / "victim.txt").write_text("keep me")
    out = anyio.run(run_proc, {"argv": ["xzcat", "-z", "victim.txt"], "check": False}, pol)
    assert (tmp_path / "victim.txt").read_text() == "keep me"
    assert not (tmp_path / "victim.txt.xz").exists()
    assert out["stdout"].startswith("\ufffd7zXZ"), out  # compressed to stdout, as xzcat does


def test_an_executable_replaced_since_start_is_refused(tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\necho v1\n")
    tool.chmod(0o755)
    pol = allow(tmp_path, str(tool))
    assert anyio.run(run_proc, {"argv": [str(tool)]}, pol)["stdout"] == "v1\n"
    replacement = tmp_path / "tool.new"
    replacement.write_text("#!/bin/sh\necho v2\n")
    replacement.chmod(0o755)
    replacement.replace(tool)
    with pytest.raises(NodeError, match="was replaced since the host started"):
        anyio.run(run_proc, {"argv": [str(tool)]}, pol)


def test_argv_with_a_nul_byte_is_refused_statically_and_at_run_time(tmp_path: Path) -> None:
    pol = policy(tmp_path)
    node = ChainNode(node_id="p", kind="proc", input={"argv": ["sh", "-c", "echo a\x00b"]})
    assert pol.static_check(node) == (
        "proc node 'p': input 'argv' element 2 contains a NUL byte, which no program can "
        "receive; remove it"
    )
    with pytest.raises(NodeError, match="element 2 contains a NUL byte"):
        anyio.run(run_proc, {"argv": ["sh", "-c", "echo a\x00b"]}, pol)


# ── env is an allowlist (proc_env_keys) ──


def test_an_env_key_not_listed_in_proc_env_keys_is_refused_naming_key_and_setting(
    tmp_path: Path,
) -> None:
    for name in ("GCONV_PATH", "PYTHONPATH", "BASH_ENV", "PERL5OPT", "NODE_OPTIONS"):
        with pytest.raises(NodeError) as info:
            anyio.run(run_proc, {"argv": ["sh", "-c", "true"], "env": {name: "/x"}},
                      policy(tmp_path))
        assert f"env key {name!r} is not allowed (keys a node may set: none)" in (
            info.value.message
        )
        assert "proc_env_keys" in info.value.message


def test_listed_env_keys_reach_the_child_and_loader_variables_never_do(tmp_path: Path) -> None:
    pol = policy(tmp_path, env_keys=("GREETING", "LD_PRELOAD"))
    out = anyio.run(run_proc, {"argv": ["sh", "-c", 'echo "$GREETING"'],
                               "env": {"GREETING": "hi"}}, pol)
    assert out["stdout"] == "hi\n"
    with pytest.raises(NodeError, match="env may not set LD_PRELOAD"):
        anyio.run(run_proc, {"argv": ["sh", "-c", "true"], "env": {"LD_PRELOAD": "/x.so"}}, pol)


def test_static_check_refuses_a_static_env_key(tmp_path: Path) -> None:
    node = ChainNode(node_id="p", kind="proc",
                     input={"argv": ["sh", "-c", "true"], "env": {"BASH_ENV": "/x"}})
    refusal = policy(tmp_path).static_check(node)
    assert refusal is not None and refusal.startswith(
        "proc node 'p': env key 'BASH_ENV' is not allowed"
    )
