"""A command run on a real pseudo-terminal, for tests of what the CLI draws there."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

__all__ = ["run_on_terminal"]


def run_on_terminal(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path | None = None,
                    stderr: IO[bytes] | None = None, limit: float = 60.0
                    ) -> tuple[int, bytes]:
    """Run ``argv`` with its stdout (and, without ``stderr``, its stderr) on a new
    pseudo-terminal; read everything it writes for at most ``limit`` seconds.

    Returns:
        ``(exit status, the bytes the terminal received)``; a process still running after
        that is killed (and its status is the kill's).
    """
    leader, follower = pty.openpty()
    process = subprocess.Popen(list(argv), stdout=follower,
                               stderr=follower if stderr is None else stderr,
                               cwd=cwd, env=dict(env))
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + limit
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1.0)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                data = os.read(leader, 65536)
            except OSError:  # the terminal closed: the process is done
                break
            if not data:
                break
            chunks.append(data)
        status = process.wait(timeout=30)
    finally:
        os.close(leader)
        if process.poll() is None:
            process.kill()
            status = process.wait()
    return status, b"".join(chunks)
