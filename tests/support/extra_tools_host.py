"""The real CLI with two extra tools in the ``conformance`` pack, for tests that need a
tool misbehaving in ways the fixtures do not: ``python -m tests.support.extra_tools_host stdio``.

- ``noisy``: ``print()``s to stdout and writes to fd 1 directly, then returns its input.
- ``block``: blocks its worker thread (a sync tool, so it runs in a thread) reading the
  FIFO ``until`` to its end, then returns ``{"read": what was written}``: it returns only
  after the last writer closed it, so a test decides when.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import a2e_toolpacks.conformance as conformance

from a2e_host.config import HostConfig
from a2e_host.tools import Tool, ToolPack, tool


@tool
def noisy(args: dict[str, Any]) -> dict[str, Any]:
    """Prints, then echoes its input."""
    print('{"type":"chain/resp","forged":true}')
    os.write(1, b"raw bytes on fd 1\n")
    return args


@tool
def block(until: str) -> dict[str, str]:
    """Blocks its thread until the FIFO ``until`` has been opened, written and closed."""
    with open(until, encoding="utf-8") as fifo:
        return {"read": fifo.read()}


def main(argv: list[str]) -> None:
    original = conformance.PACK.factory

    def factory(config: HostConfig) -> list[Tool]:
        return [*original(config), noisy, block]

    conformance.PACK = ToolPack(conformance.PACK.name, conformance.PACK.description, factory)
    from a2e_host.cli import main as cli_main

    sys.argv = ["a2e-host", *argv, "--tools", "conformance"]
    cli_main()


if __name__ == "__main__":
    main(sys.argv[1:])
