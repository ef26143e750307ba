"""A deterministic stand-in for the chains plugin, for host/transport tests, and a launcher
that runs the real ``stdio`` / ``serve`` commands with it injected.

It serves ``chain/req`` with ``initial_input["op"]`` choosing the behaviour:

=============  ==========================================================================
op             behaviour
=============  ==========================================================================
``echo``       answers ``chain/resp`` (success, ``final_output`` = the input) at once
``block``      runs ``time.sleep(seconds)`` in a worker thread (a blocking sync tool)
``hold``       waits until released (``FakeChainPlugin.release``) or cancelled
``noisy``      ``print()``s, runs a child that writes to its inherited stdout, answers
``crash``      raises a plain RuntimeError inside the work task
``refuse``     raises ``Busy`` from ``handle`` itself
=============  ==========================================================================

Every started chain ends with exactly one ``chain/resp``: a cancelled one answers
``success: false`` with error code ``cancelled`` from a shielded scope.

Launcher: ``python -m tests.support.fakes stdio|serve [overrides-json]``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any, ClassVar

import anyio

from a2e_host.chains.messages import CHAIN_MESSAGE_TYPES, ChainRequest, ChainResponse
from a2e_host.exceptions import Busy
from a2e_host.messages import Message
from a2e_host.plugin import Plugin, PluginContext, SessionInfo


class FakeChainPlugin(Plugin):
    """See the module docstring. Records what happened for in-process assertions."""

    capability: ClassVar[str] = "chains"
    namespace: ClassVar[str] = "chain/*"
    priority: ClassVar[int] = 10
    features: ClassVar[tuple[str, ...]] = ("fake",)
    message_types: ClassVar[tuple[type[Message], ...]] = CHAIN_MESSAGE_TYPES

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.running: dict[str, set[str]] = {}
        self.started: dict[str, anyio.Event] = {}
        self.released: dict[str, anyio.Event] = {}
        self.cancelled: list[str] = []
        self.closed_sessions: list[str] = []

    def gates(self) -> tuple[str, ...]:
        """The chains plugin's gates: ``skill``, and ``proc`` with an allowed executable."""
        return tuple(g for g in ("proc", "skill") if g != "proc" or self.config.allow_proc)

    def metadata(self, session: SessionInfo) -> dict[str, Any]:
        meta = super().metadata(session)
        meta["limits"] = session.limits.effective.to_dict()
        return meta

    def started_event(self, req_id: str) -> anyio.Event:
        return self.started.setdefault(req_id, anyio.Event())

    def release(self, req_id: str) -> None:
        self.released.setdefault(req_id, anyio.Event()).set()

    async def handle(self, message: Message, ctx: PluginContext) -> None:
        assert isinstance(message, ChainRequest)
        op = message.initial_input.get("op", "echo")
        if op == "refuse" or ctx.closing:
            raise Busy("refused on purpose; try again later")
        running = self.running.setdefault(ctx.session.session_id, set())
        limit = ctx.session.limits.effective.max_parallel
        if len(running) >= limit:
            raise Busy(f"{len(running)} chains in flight, max_parallel is {limit}")
        running.add(message.id)
        ctx.start_soon(self._run, message, ctx, name=f"fake {message.id}")

    async def _run(self, request: ChainRequest, ctx: PluginContext) -> None:
        args = request.initial_input
        op = args.get("op", "echo")
        self.started_event(request.id).set()
        print(f"fake chain started {request.id}", file=sys.stderr, flush=True)
        try:
            if op == "block":
                await anyio.to_thread.run_sync(
                    time.sleep, float(args["seconds"]), abandon_on_cancel=True
                )
            elif op == "hold":
                await self.released.setdefault(request.id, anyio.Event()).wait()
            elif op == "noisy":
                print("noise from a tool's print()")
                await anyio.to_thread.run_sync(_child_writes_to_stdout)
            elif op == "crash":
                raise RuntimeError("secret internal detail")
            await ctx.outbox.wait_writable()
            ctx.outbox.send_nowait(_response(request, success=True, output=args))
        except anyio.get_cancelled_exc_class():
            self.cancelled.append(request.id)
            error = {"code": "cancelled", "message": "cancelled", "node_id": "",
                     "retryable": False, "details": {}}
            ctx.outbox.send_nowait(_response(request, success=False, error=error))
            raise
        finally:
            self.running.get(ctx.session.session_id, set()).discard(request.id)

    async def session_closed(self, session: SessionInfo) -> None:
        self.closed_sessions.append(session.session_id)


def _child_writes_to_stdout() -> None:
    subprocess.run(
        [sys.executable, "-c", "import sys; sys.stdout.write('noise from a child\\n')"],
        check=True,
    )


def _response(
    request: ChainRequest, *, success: bool, output: Any = None, error: Any = None
) -> ChainResponse:
    return ChainResponse(
        req_id=request.id,
        chain_id=request.chain_id,
        success=success,
        final_output=output,
        error=error,
        nodes_run=1,
    )


# ── the launcher ─────────────────────────────────────────────────────────────────

#: The real ``stdio`` / ``serve`` commands with :class:`FakeChainPlugin` as the chains plugin.
FAKE = [sys.executable, "-m", "tests.support.fakes"]


def main(argv: list[str]) -> None:
    from a2e_host.commands.serve import serve_main, stdio_main

    command = argv[0]
    overrides = json.loads(argv[1]) if len(argv) > 1 else {}
    overrides.setdefault("log_format", "json")
    if command == "stdio":
        stdio_main(None, overrides, plugins=[FakeChainPlugin])
    else:
        serve_main(None, overrides, plugins=[FakeChainPlugin])


if __name__ == "__main__":
    main(sys.argv[1:])
