"""An agent talking to a host over WebSocket with :mod:`a2e_host.client`.

:func:`~a2e_host.client.serve_ws` starts ``a2e-host serve --tools conformance`` as a child
process on a free 127.0.0.1 port and connects to it. The agent runs a small chain while
printing each streamed event as it arrives, then starts a long chain (a 30 s ``sleep``),
cancels it once its node has started and prints the ``cancelled`` response; leaving the
block stops the server (SIGTERM) and waits for it to exit.

Run it from anywhere the project is installed::

    python examples/agent_ws.py

Every output line starts with a word saying what it is (``server``, ``handshake``,
``event``, ``response``, ``long``), so a test can read it.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio

from a2e_host.chains.messages import ChainEvent, ChainResponse
from a2e_host.client import Client, serve_ws

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


async def main() -> int:
    async with serve_ws(
        ["--tools", "conformance"], agent_caps=["chains"], agent_id="examples/agent_ws"
    ) as client:
        say("server", client.url)
        await talk(client)
    assert client.server is not None
    say("server stopped", client.server.returncode)
    return 0


async def talk(client: Client) -> None:
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
            code = message.error.code if message.error is not None else ""
            say("long", "response", f"success={str(message.success).lower()}", f"code={code}",
                f"duration_ms={message.duration_ms}")


if __name__ == "__main__":
    sys.exit(anyio.run(main))
