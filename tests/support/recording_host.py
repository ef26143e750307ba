"""The real CLI with recording tools in the ``conformance`` pack, for the resume tests:
``python -m tests.support.recording_host serve --store PATH``.

Each tool appends one line per call to the file ``path``: the node's display id and its
idempotency key (``NodeContext.idempotency_key``), so a test proves which node ran how
often, and with which key, across a ``kill -9``.

- ``record``: records, returns ``{"node": …}``.
- ``record_block``: records, then (when ``started`` names a FIFO) writes to it, which
  waits for the test to read it — so the test knows the call was recorded — then blocks
  its worker thread reading the FIFO ``until`` (returns once a writer wrote and closed
  it); not idempotent.
- ``record_block_idempotent``: the same, declared ``idempotent``.
"""

from __future__ import annotations

import sys
from typing import Any

import a2e_toolpacks.conformance as conformance

from a2e_host.chains.nodes import current_node
from a2e_host.config import HostConfig
from a2e_host.tools import Tool, ToolPack, tool


def _record(path: str) -> str:
    ctx = current_node.get()
    assert ctx is not None, "a recording tool runs inside a chain"
    with open(path, "a", encoding="utf-8") as out:
        out.write(f"{ctx.node_id} {ctx.idempotency_key}\n")
    return ctx.node_id


@tool(side_effects="write")
def record(path: str, after: Any = None) -> dict[str, Any]:
    """Records the call, returns the node's id."""
    return {"node": _record(path)}


def _record_block(path: str, until: str, started: str) -> dict[str, Any]:
    node = _record(path)
    if started:
        with open(started, "w", encoding="utf-8") as signal:
            signal.write(node)
    with open(until, encoding="utf-8") as fifo:
        return {"node": node, "read": fifo.read()}


@tool(side_effects="write")
def record_block(path: str, until: str, started: str = "", after: Any = None
                 ) -> dict[str, Any]:
    """Records the call, says so on ``started``, then blocks until the FIFO ``until`` is
    written and closed."""
    return _record_block(path, until, started)


@tool(side_effects="write", idempotent=True)
def record_block_idempotent(path: str, until: str, started: str = "", after: Any = None
                            ) -> dict[str, Any]:
    """As ``record_block``, declared idempotent."""
    return _record_block(path, until, started)


def main(argv: list[str]) -> None:
    original = conformance.PACK.factory

    def factory(config: HostConfig) -> list[Tool]:
        return [*original(config), record, record_block, record_block_idempotent]

    conformance.PACK = ToolPack(conformance.PACK.name, conformance.PACK.description, factory)
    from a2e_host.cli import main as cli_main

    sys.argv = ["a2e-host", *argv, "--tools", "conformance"]
    cli_main()


if __name__ == "__main__":
    main(sys.argv[1:])
