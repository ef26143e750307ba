"""An async client of the A2E host: connect, handshake, run chains, cancel, ping.

Layer: client (anyio; not used by the host itself). It speaks the same wire as any agent
(PROTOCOL.md §1–§2, seed ``chain/*``) over three transports:

* :func:`connect_ws` — a WebSocket URL (``ws://127.0.0.1:8765``, subprotocol ``a2e.v1``);
* :func:`spawn_stdio` — a child process speaking NDJSON (``a2e-host stdio …``);
* :func:`connect_memory` — an in-process :class:`~a2e_host.runtime.host.Host` (what
  ``a2e-host run`` uses, so a local run takes exactly the path a wire request takes).

:func:`serve_ws` starts a host for you (``a2e-host serve --port 0`` as a child process, on
a free 127.0.0.1 port) and yields a client connected to it; :func:`open_ws_server` starts
only the server (:class:`WsServer`), for several clients.

Each is an async context manager that handshakes on enter and yields a :class:`Client`::

    async with connect_ws("ws://127.0.0.1:8765", agent_caps=["chains"]) as client:
        async for message in client.run_chain(nodes, "read", initial_input={"x": 1}):
            print(message)          # ChainEvent …, then the ChainResponse

Several chains can run concurrently on one client: one reader task routes each incoming
message by ``req_id`` to the request waiting for it (:mod:`.session`). A message no
waiter claims — the answer to a ``chain/cancel`` sent after its chain ended (``error
invalid_message``), an ``error`` without ``req_id`` — is kept in :attr:`Client.unrouted`
(the last 100).

The messages are :mod:`a2e_host.chains.messages` structs:
:class:`~a2e_host.chains.messages.ChainEvent`, :class:`~a2e_host.chains.messages.ChainResponse`
(also exported by the package: ``from a2e_host import ChainEvent, ChainResponse``).

Errors (:mod:`.errors`): :class:`HostError` (the host answered with an ``error`` message;
``code`` is the wire code, e.g. ``busy``), :class:`HandshakeFailed` (``ok`` false;
``reason``), :class:`ConnectionLost`, :class:`ServerFailed` (:func:`serve_ws` could not
start the server), and :class:`TimeoutError` for a bounded wait that passed.

Modules, one job each:

* :mod:`.session` — :class:`Client`, :func:`open_client`, the :class:`MessageStream` it speaks;
* :mod:`.calls` — :class:`~a2e_host.client.calls.StreamedCall`, the start/iterate/finish of
  one request whose answer streams (the base of :class:`ChainRun`, :class:`ToolCall` and
  :class:`~a2e_host.client.skills.SkillCall`);
* :mod:`.chains` — :class:`ChainRun`, one ``chain/req`` in flight;
* :mod:`.procs` — :class:`ProcHandle`, one process on the host (``proc/*``);
* :mod:`.tools` — :func:`~a2e_host.client.tools.list_tools` and :class:`ToolCall`, one
  ``tool/call/req`` in flight (``client.list_tools()``, ``client.call_tool()``);
* :mod:`.codec` — the decoder of every message a client reads;
* :mod:`.websocket`, :mod:`.stdio`, :mod:`.memory` — the three transports;
* :mod:`.server` — :func:`open_ws_server`, :func:`serve_ws`;
* :mod:`.errors`, :mod:`.lines` (NDJSON lines from a byte stream), :mod:`.processes`
  (ending a child).

Their imports point one way, lowest first: errors / lines / processes / streams → calls →
chains, tools, codec → skills, runs, procs → session → websocket / stdio / memory → server
(a module never imports one after it).
"""

from __future__ import annotations

from .chains import ChainRun
from .errors import ClientError, ConnectionLost, HandshakeFailed, HostError, ServerFailed
from .memory import connect_memory
from .procs import ProcHandle, ProcOutput, SpawnRefused
from .server import SERVE_COMMAND, WsServer, open_ws_server, serve_ws
from .session import DEFAULT_AGENT_CAPS, Client, MessageStream, open_client
from .stdio import StdioStream, spawn_stdio
from .tools import ToolCall
from .websocket import connect_ws

__all__ = [
    "DEFAULT_AGENT_CAPS",
    "SERVE_COMMAND",
    "ChainRun",
    "Client",
    "ClientError",
    "ConnectionLost",
    "HandshakeFailed",
    "HostError",
    "MessageStream",
    "ProcHandle",
    "ProcOutput",
    "ServerFailed",
    "SpawnRefused",
    "StdioStream",
    "ToolCall",
    "WsServer",
    "connect_memory",
    "connect_ws",
    "open_client",
    "open_ws_server",
    "serve_ws",
    "spawn_stdio",
]
