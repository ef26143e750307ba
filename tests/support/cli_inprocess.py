"""``a2e-host ARGS`` run by the CLI's own ``main`` in this process, for tests that read a
command's output many times (``runs list``, ``runs show``, ``graph --run``): the same
parsing, handlers and printing as the console script, without an interpreter start per
call. Tests of the process itself (exit on a closed stdout, start-up imports, what reaches
the real stderr) spawn the CLI instead (:data:`tests.support.process.CLI`)."""

from __future__ import annotations

import io
import subprocess
import threading
from contextlib import redirect_stderr, redirect_stdout

from a2e_host.cli import main

_one_at_a_time = threading.Lock()  # sys.stdout / sys.stderr are swapped process-wide


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``a2e-host *args`` in-process; its exit code, stdout and stderr, as
    :func:`subprocess.run` with ``capture_output=True, text=True`` gives them. Call it
    from a thread when an event loop runs in this one (the commands run their own)."""
    out, err = io.StringIO(), io.StringIO()
    code: int
    with _one_at_a_time, redirect_stdout(out), redirect_stderr(err):
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return subprocess.CompletedProcess(["a2e-host", *args], code, out.getvalue(),
                                       err.getvalue())
