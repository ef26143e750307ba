"""Broken variants of the ``proc`` capability, for proving the conformance kit catches them.

``python -m tests.support.proc_mutant_host MUTANT serve --port 0 --allow-proc cat`` starts
the real CLI with one defect patched into :mod:`a2e_proc`. Each mutant names the
requirement the kit must then report as failed (tests/capabilities).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from a2e_proc import process


def read_seq_frozen() -> None:
    """Every ``proc/read/event`` carries ``seq`` 1."""
    original = process.LiveProcess._send

    def send(self: Any, sink: Any, kind: str, stream: str, data: dict[str, Any]) -> None:
        self._seq = 0
        original(self, sink, kind, stream, data)

    process.LiveProcess._send = send


def kill_reports_running() -> None:
    """``proc/kill/resp`` says the process still runs."""
    original = process.LiveProcess.kill

    async def kill(self: Any, signum: int) -> None:
        await original(self, signum)
        self.state = "running"

    process.LiveProcess.kill = kill


MUTANTS: dict[str, tuple[Callable[[], None], str]] = {
    "read_seq_frozen": (read_seq_frozen, "PROC-EXIT"),
    "kill_reports_running": (kill_reports_running, "PROC-KILL"),
}
"""mutant name → (patch, a requirement the conformance kit must report failed)."""


def main(argv: list[str]) -> None:
    patch, _ = MUTANTS[argv[0]]
    patch()
    from a2e_host.cli import main as cli_main

    sys.argv = ["a2e-host", *argv[1:]]
    cli_main()


if __name__ == "__main__":
    main(sys.argv[1:])
