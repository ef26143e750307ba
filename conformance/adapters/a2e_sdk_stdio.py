"""Run the public A2E SDK's host on stdio, so the conformance kit can test it.

The public SDK (github.com/a2eprotocol/python-sdk) has a host, ``A2EServerRuntimeExecutor``
(what ``A2EServer`` runs per connection) with its ``ChainPlugin``, but no stdio entry
point that speaks only protocol. This adapter only moves lines: each stdin line is
delivered to the SDK host's transport unchanged, and everything the host writes to
stdout reaches stdout unchanged (whole lines kept whole), so every verdict is the SDK
host's own. Beside that it registers the kit's fixture tools (PROTOCOL.md §7: ``echo``,
``add``, ``concat``, ``count``, ``upper``, ``sleep``, ``fail``, ``big``, ``flaky``,
``progress``) as a plugin under the name the SDK's ``ChainPlugin`` calls tools through
(``xceed_terminal``); that plugin handles no wire message and adds no capability.

Usage (a Python with the SDK's dependencies -- pydantic, fastapi, requests, pyyaml --
and an SDK checkout; the SDK is not on the package registry)::

    git -C python-sdk.git worktree add /tmp/a2e-sdk HEAD        # or: git clone ...
    python -m venv /tmp/sdk-venv && /tmp/sdk-venv/bin/pip install pydantic fastapi requests pyyaml
    ADAPTER="$(a2e-conformance --adapters-dir)/a2e_sdk_stdio.py"
    a2e-conformance --stdio "/tmp/sdk-venv/bin/python $ADAPTER --sdk /tmp/a2e-sdk"

Only the standard library and the SDK are imported: the adapter runs under the SDK's
Python, not this package's.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any

TOOLS_PLUGIN_NAME = "xceed_terminal"
"""The plugin name the SDK's ChainPlugin looks tools up by (``PLUGIN_FOR_KIND``)."""


class _LineWriter(io.TextIOBase):
    """stdout for the host's threads: each whole line is written at once, in order,
    so lines written by two threads never interleave (the adapter moves lines; it
    must not break them). Nothing is dropped or rewritten."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._lock = threading.Lock()
        self._local = threading.local()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        buffered = getattr(self._local, "text", "") + text
        head, sep, tail = buffered.rpartition("\n")
        self._local.text = tail
        if sep:
            with self._lock:
                self._raw.write((head + "\n").encode("utf-8", "surrogateescape"))
                self._raw.flush()
        return len(text)

    def flush(self) -> None:
        with self._lock:
            self._raw.flush()


_FLAKY: dict[str, int] = {}


def _fixture(name: str, args: dict[str, Any]) -> Any:
    """PROTOCOL.md §7's fixture tools; raises ValueError for a wrong input shape."""
    if name == "echo":
        return dict(args)
    if name == "add":
        return {"sum": args["a"] + args["b"]}
    if name == "concat":
        return {"text": "".join(args["parts"])}
    if name == "count":
        return {"count": len(args["items"])}
    if name == "upper":
        return {"text": str(args["text"]).upper()}
    if name == "sleep":
        time.sleep(float(args["seconds"]))
        return {"slept": args["seconds"], "value": args.get("value")}
    if name == "fail":
        raise ValueError(str(args.get("message", "failed")))
    if name == "big":
        return {"data": "x" * int(args["bytes"])}
    if name == "flaky":
        key, failures = str(args["key"]), int(args["failures"])
        _FLAKY[key] = _FLAKY.get(key, 0) + 1
        if _FLAKY[key] <= failures:
            raise ValueError(f"flaky: call {_FLAKY[key]} of {key!r} fails")
        return {"attempts": _FLAKY[key]}
    if name == "progress":
        steps = int(args["steps"])
        for _ in range(steps):
            time.sleep(float(args.get("delay", 0)))
        return {"steps": steps, "reported": 0}
    raise LookupError(f"unknown tool {name!r}")


def _build(sdk: Path) -> Any:
    """The SDK host (an ``A2EServerRuntimeExecutor`` on a ``DirectTransport``)."""
    sys.path.insert(0, str(sdk))
    from a2e.caps.tools.protocol import ToolCallResponse, ToolResult
    from a2e.core.plugins import A2EPlugin
    from a2e.core.server.executor import A2EServerRuntimeExecutor
    from a2e.core.transports.direct import DirectTransport
    from a2e.schema import A2EHostConfig

    class FixtureTools(A2EPlugin):  # type: ignore[misc]
        name = TOOLS_PLUGIN_NAME

        def __init__(self, host_instance: Any, config: dict[str, Any]) -> None:
            super().setup(host_instance, config)

        def supported_messages(self) -> dict[str, Any]:
            return {}

        def handle(self, message: Any) -> Any:
            started = time.monotonic()
            try:
                data, error = _fixture(message.tool_name, dict(message.arguments)), None
            except Exception as exc:  # noqa: BLE001 - a failed tool is a result
                data, error = None, f"{type(exc).__name__}: {exc}"
            return ToolCallResponse(data=ToolResult(
                success=error is None, tool_name=message.tool_name, data=data, error=error,
                duration_ms=int((time.monotonic() - started) * 1000)))

    module = sys.modules[__name__]
    module.FixtureTools = FixtureTools  # type: ignore[attr-defined]
    config = A2EHostConfig(
        server={}, transport={"type": "direct", "config": {}},
        plugins=[
            {"name": "chain", "type": "chains", "cls": "a2e.caps.chains.plugin.ChainPlugin",
             "metadata": {"priority": 10}},
            {"name": TOOLS_PLUGIN_NAME, "type": "conformance_fixtures",
             "cls": f"{__name__}.FixtureTools"},
        ])
    logger = logging.getLogger("a2e-sdk-host")
    return A2EServerRuntimeExecutor(config, DirectTransport(logger=logger), logger)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdk", required=True, type=Path,
                        help="an a2eprotocol/python-sdk checkout (the directory holding a2e/)")
    args = parser.parse_args(argv)
    if not (args.sdk / "a2e" / "core" / "server" / "executor.py").is_file():
        print(f"{args.sdk} is not an A2E python-sdk checkout (no a2e/core/server/executor.py)",
              file=sys.stderr)
        return 2
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    out = _LineWriter(sys.stdout.buffer)
    sys.stdout = out  # the host's own prints go where a subprocess host's would
    host = _build(args.sdk)
    host.transport.set_out_handler(lambda line: out.write(line + "\n"))
    host.start()
    loop = asyncio.new_event_loop()
    try:
        for raw in sys.stdin.buffer:
            line = raw.decode("utf-8", "surrogateescape").rstrip("\n")
            loop.run_until_complete(host.transport.deliver(line))
        # EOF: let the host read what was delivered (its dispatch threads finish
        # before the interpreter exits)
        pending = host.transport._in_queue
        while not pending.empty():
            time.sleep(0.01)
        time.sleep(0.05)
    except KeyboardInterrupt:
        pass
    finally:
        loop.close()
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
