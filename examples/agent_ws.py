"""An agent talking to a host over WebSocket with :mod:`a2e_host.client`.

Starts ``a2e-host serve --port 0 --tools conformance`` as a child process, reads the
address it listens on from its stderr, connects, runs a small chain while printing each
streamed event as it arrives, then starts a long chain (a 30 s ``sleep``), cancels it
once its node has started and prints the ``cancelled`` response, and finally stops the
server (SIGTERM) and waits for it to exit.

Run it from anywhere the project is installed::

    python examples/agent_ws.py

Every output line starts with a word saying what it is (``server``, ``handshake``,
``event``, ``response``, ``long``), so a test can read it.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from typing import Any

import anyio
from anyio.abc import Process

from a2e_host.client import connect_ws
from a2e_host.messages import ChainEvent, ChainResponse

LISTENING = re.compile(r"a2e-host listening on (ws://\S+)")
START_TIMEOUT = 20.0
"""Seconds to wait for the server to say where it listens."""

QUICK_CHAIN: list[dict[str, Any]] = [
    {"node_id": "sum", "kind": "tool", "name": "add", "input": {"a": 2, "b": 3}},
    {"node_id": "shout", "kind": "tool", "name": "upper",
     "input_map": {"text": "input.name"}, "next_node": "greet"},
    {"node_id": "greet", "kind": "tool", "name": "concat",
     "input_map": {"parts": "['HELLO, ', shout.output.text, '!']"}},
]

LONG_CHAIN: list[dict[str, Any]] = [
    {"node_id": "nap", "kind": "tool", "name": "sleep", "input": {"seconds": 30}},
]


def say(*parts: object) -> None:
    print(*parts, flush=True)


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


async def wait_listening(process: Process, lines: list[str]) -> str:
    """Read the server's stderr until it names its address; keep the lines read."""
    assert process.stderr is not None
    buffer = b""
    with anyio.fail_after(START_TIMEOUT):
        async for chunk in process.stderr:
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            for raw in complete:
                line = raw.decode("utf-8", "replace")
                lines.append(line)
                match = LISTENING.search(line)
                if match:
                    return match.group(1)
    raise RuntimeError("the server exited before listening:\n" + "\n".join(lines))


async def drain(process: Process) -> None:
    """Keep reading the server's stderr so its log never blocks it."""
    assert process.stderr is not None
    async for _chunk in process.stderr:
        pass


async def main() -> int:
    argv = [sys.executable, "-m", "a2e_host", "serve", "--port", "0", "--tools", "conformance",
            "--log-format", "json"]
    process = await anyio.open_process(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    log: list[str] = []
    try:
        async with anyio.create_task_group() as tg:
            url = await wait_listening(process, log)
            tg.start_soon(drain, process)
            say("server", url)
            await talk(url)
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            with anyio.move_on_after(15):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
    say("server stopped", process.returncode)
    return 0


async def talk(url: str) -> None:
    async with connect_ws(url, agent_caps=["chains"], agent_id="examples/agent_ws") as client:
        say("handshake", f"session={client.session_id}", f"caps={','.join(client.accepted_caps)}",
            f"features={','.join(client.features)}")

        quick = client.run_chain(QUICK_CHAIN, "sum", initial_input={"name": "agent"}, timeout=30)
        async for message in quick:
            if isinstance(message, ChainEvent):
                detail = compact(message.output) if message.phase == "done" else message.error
                extra = [detail] if detail else []
                say("event", message.seq, message.phase, message.node_id, *extra)
            else:
                say("response", f"success={str(message.success).lower()}",
                    f"nodes_run={message.nodes_run}",
                    f"final_output={compact(message.final_output)}")

        long = client.run_chain(LONG_CHAIN, "nap", timeout=60)
        say("long", "sent", long.req_id)
        async for message in long:
            if isinstance(message, ChainEvent):
                say("long", "event", message.seq, message.phase, message.node_id)
                if message.node_id == "nap" and message.phase == "start":
                    await long.cancel()
                    say("long", "cancel sent")
            elif isinstance(message, ChainResponse):
                code = (message.error or {}).get("code", "")
                say("long", "response", f"success={str(message.success).lower()}", f"code={code}",
                    f"duration_ms={message.duration_ms}")


if __name__ == "__main__":
    sys.exit(anyio.run(main))
