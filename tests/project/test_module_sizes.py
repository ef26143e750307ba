"""No module of the package or its first-party plugins grows past ~500 lines: a module
that long holds several jobs, and each job gets a module named for it."""

from __future__ import annotations

from tests.support import REPO

LIMIT = 500
"""Lines a module may have."""

NOT_YET_SPLIT: set[str] = set()
"""Modules still over the limit, each to be split by job; remove an entry when it is."""


def line_counts() -> dict[str, int]:
    counts = {}
    for folder in ("a2e_host", "plugins"):
        for path in sorted((REPO / folder).rglob("*.py")):
            with path.open("rb") as file:
                counts[path.relative_to(REPO).as_posix()] = sum(1 for _ in file)
    return counts


def test_no_module_is_over_the_limit() -> None:
    counts = line_counts()
    assert len(counts) > 50  # the walk found the package
    over = {name: n for name, n in counts.items() if n > LIMIT and name not in NOT_YET_SPLIT}
    assert over == {}


def test_every_module_waiting_to_be_split_is_still_over_the_limit() -> None:
    counts = line_counts()
    assert {name for name in NOT_YET_SPLIT if counts.get(name, 0) <= LIMIT} == set()


def test_the_modules_split_here_import_their_old_names_from_where_they_were() -> None:
    from a2e_host import client
    from a2e_host.chains import interpreter, proc
    from a2e_host.commands import run

    assert {"ChainRun", "Client", "ClientError", "ConnectionLost", "HandshakeFailed",
            "HostError", "MessageStream", "ServerFailed", "StdioStream", "WsServer",
            "connect_memory", "connect_ws", "open_client", "open_ws_server", "serve_ws",
            "spawn_stdio", "DEFAULT_AGENT_CAPS", "SERVE_COMMAND"} <= set(dir(client))
    assert {"ProcPolicy", "ProcInput", "Executable", "run_proc", "DEFAULT_MAX_STREAM_BYTES",
            "DEFAULT_MAX_PROCS"} <= set(dir(proc))
    assert set(interpreter.__all__) <= set(dir(interpreter))
    assert {"CANCEL_WAIT", "ChainFileError", "read_chain_request", "run_main"} <= set(dir(run))
