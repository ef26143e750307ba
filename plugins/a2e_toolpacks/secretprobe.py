"""The ``secretprobe`` tool pack: tools that misbehave with the secrets they are given, to
check that redaction holds (README "Secrets"; the secrets tests and the conformance of a
host's redaction).

* ``secret_echo``: ``{"a": str, "b": str}`` → ``{"text": "a=<a> b=<b>", "a": a,
  "pair": [a, b]}``: echoes both values into its output.
* ``secret_fail``: ``{"a": str, "b": str}`` → fails with both values in its error
  message, after printing them to stderr.
* ``secret_open``: ``{"a": str, "b": str}`` → opens the file ``missing/<a>`` of the root,
  which is not there: fails with Python's ``FileNotFoundError``, whose text shows the
  path (its ``filename``, not one of its ``args``).

Each first appends one JSON line ``{"tool", "a", "b"}`` — the sha256 hex digests of what
it received, never the values — to ``secretprobe.jsonl`` in the configuration's
``root``, so a test can check the tools got the right values without the values being
written anywhere. Enable it only for tests (``--tools secretprobe``).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from pathlib import Path
from typing import TypedDict

from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError
from a2e_host.tools import Tool, ToolPack, tool

__all__ = ["PACK", "RECORD_FILE", "make_tools"]

RECORD_FILE = "secretprobe.jsonl"
"""The file, in the configuration's root, each call records its digests in."""


class EchoOut(TypedDict):
    text: str
    a: str
    pair: list[str]


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def make_tools(config: HostConfig) -> list[Tool]:
    """``secret_echo``, ``secret_fail`` and ``secret_open``, recording into ``config.root_path``."""
    record = config.root_path / RECORD_FILE
    lock = threading.Lock()

    def note(name: str, a: str, b: str) -> None:
        line = json.dumps({"tool": name, "a": _digest(a), "b": _digest(b)}) + "\n"
        with lock:
            _append(record, line)

    @tool(name="secret_echo", blocking=False, cacheable=False)
    def secret_echo(a: str, b: str) -> EchoOut:
        """Echo both values into the output (after recording their digests)."""
        note("secret_echo", a, b)
        return {"text": f"a={a} b={b}", "a": a, "pair": [a, b]}

    @tool(name="secret_fail", blocking=False, cacheable=False)
    def secret_fail(a: str, b: str) -> None:
        """Fail with both values in the error message (and print them to stderr)."""
        note("secret_fail", a, b)
        print(f"secret_fail got a={a} b={b}", file=sys.stderr, flush=True)
        raise NodeError(f"secret_fail refuses a={a!r} and b={json.dumps(b)}")

    @tool(name="secret_open", blocking=False, cacheable=False)
    def secret_open(a: str, b: str) -> None:
        """Open a file named by ``a`` that is not there (its error shows the path)."""
        note("secret_open", a, b)
        with open(str(config.root_path / "missing" / a), encoding="utf-8"):
            pass

    return [secret_echo, secret_fail, secret_open]


def _append(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)


PACK = ToolPack(
    name="secretprobe",
    description="Test tools that echo and fail with the secrets they get.",
    factory=make_tools,
)
