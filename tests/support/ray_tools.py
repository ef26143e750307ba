"""A tool pack for the Ray tests and bench: tools that run as Ray tasks, and how a test
host is built with them (the real chain plugin over ``load_tools`` with ``remote_tools``).

- ``square`` (``Tool(remote=True)``): ``{"square": x * x, "pid": the worker's pid}``.
- ``nap``: writes its pid to the file ``started``, sleeps ``seconds`` in ``step``s, then
  writes ``ended``; a ``KeyboardInterrupt`` (``ray.cancel``: seen between two steps)
  writes ``interrupted`` instead. With one step as long as the nap it never sees it in
  time and only ``ray.cancel(force=True)``, killing its worker, stops it.
- ``crash_once``: the first call (no file ``marker`` yet) creates ``marker`` and kills its
  own worker process (``os._exit``); later ones return ``{"value", "key", "left", "run_key"}``:
  the tool context's ``idempotency_key``, seconds left before the node's deadline, and
  run key.
- ``noop``: returns its input; remote or in-process as ``remote_tools`` says.
- ``locked`` (``Tool(remote=True)``): a closure over a lock, which cannot be pickled.
- ``flood`` (``Tool(remote=True)``): ``{"items": [a 1,000-character string] * count}``,
  about ``count`` KB of JSON.
- ``grumpy`` (``Tool(remote=True)``): raises :class:`Grumpy`, an exception holding a
  lock (it cannot be pickled).

``nap`` and ``crash_once`` are remote through the configuration (:data:`REMOTE_TOOLS`), not
the attribute.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from a2e_chains import ChainPlugin
from a2e_tools import ToolsPlugin

from a2e_host.chains.toolbox import Toolbox
from a2e_host.config import HostConfig
from a2e_host.runtime.host import Host
from a2e_host.tools import Tool, ToolPack, context, load_tools, tool

REMOTE_TOOLS = ("nap", "raytest.crash_*")


def _write_whole(path: str, text: str) -> None:
    """Write ``path`` so that a reader polling for it sees all of ``text`` or no file
    (``write_text`` creates the file empty first: a poller could read ``""``)."""
    partial = f"{path}.partial"
    Path(partial).write_text(text)
    os.replace(partial, path)


def square(x: int) -> dict[str, int]:
    return {"square": x * x, "pid": os.getpid()}


def nap(started: str, ended: str, interrupted: str, seconds: float, step: float) -> dict[str, bool]:
    _write_whole(started, str(os.getpid()))
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(step)
    except KeyboardInterrupt:
        _write_whole(interrupted, "1")
        raise
    _write_whole(ended, "1")
    return {"slept": True}


def crash_once(marker: str, value: int) -> dict[str, Any]:
    if not os.path.exists(marker):
        _write_whole(marker, str(os.getpid()))
        os._exit(1)
    ctx = context()
    assert ctx is not None and ctx.deadline is not None
    return {"value": value, "key": ctx.idempotency_key, "left": ctx.deadline - time.monotonic(),
            "run_key": ctx.run_key}


def flood(count: int) -> dict[str, list[str]]:
    return {"items": ["x" * 1000] * count}


class Grumpy(Exception):
    """An exception Ray cannot pickle: it holds a lock."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


def grumpy(x: int) -> dict[str, int]:
    raise Grumpy(f"no {x}")


def noop(args: dict[str, Any]) -> dict[str, Any]:
    return args


def _tools(config: HostConfig) -> list[Tool]:
    del config
    lock = threading.Lock()

    def locked(x: int) -> dict[str, int]:
        with lock:
            return {"x": x}

    return [tool(square, remote=True), tool(nap), tool(crash_once), tool(noop, blocking=False),
            tool(locked, remote=True), tool(flood, remote=True), tool(grumpy, remote=True)]


PACK = ToolPack("raytest", "tools for the Ray tests", _tools)


def ray_host(remote_tools: tuple[str, ...] = REMOTE_TOOLS) -> Host:
    """A host whose chain and tools plugins (``chain/req``, ``tool/call/req``) have the
    ``raytest`` pack, marked by ``remote_tools``."""
    config = HostConfig(tools=("raytest",), remote_tools=remote_tools)
    registry = load_tools(config, packs={"raytest": PACK})
    return Host(config, plugins=[ChainPlugin(config, toolbox=Toolbox(registry)),
                                 ToolsPlugin(config, tools=registry)])
