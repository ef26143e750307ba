"""What a plugin declares (issue 14, item 1): the message types it serves are decoded by
the host's one codec *and* routed to it; a declaration the router would send elsewhere
is a plugin authoring mistake the host should refuse at start, not a message that is
decoded and then answered as if nobody served it."""

from __future__ import annotations

from typing import ClassVar

import anyio
import pytest

from a2e_host.config import HostConfig
from a2e_host.messages import ErrorMessage, HandshakeRequest, HandshakeResponse, Message
from a2e_host.plugin import Plugin, PluginContext
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import open_memory_client


class MemPut(Message, tag="mem/put", kw_only=True):
    """Declared by :class:`Memory`, whose namespace is ``memory/*``: a typo."""

    TYPE: ClassVar[str] = "mem/put"
    key: str


class Memory(Plugin):
    capability: ClassVar[str] = "memory"
    namespace: ClassVar[str] = "memory/*"
    priority: ClassVar[int] = 50
    message_types: ClassVar[tuple[type[Message], ...]] = (MemPut,)

    async def handle(self, message: Message, ctx: PluginContext) -> None:
        return None


@pytest.mark.asyncio
async def test_a_declared_type_outside_the_plugins_namespace_is_refused_at_start() -> None:
    """Reproduction: a plugin with ``namespace = "memory/*"`` declaring a ``mem/put``
    Struct. The host starts; ``mem/put`` is decoded (a malformed one even gets a
    ``schema_violation`` naming ``$.key``, and ``mem/put`` is listed in every
    ``unknown_type``'s ``detail.known``), then a well-formed one is ``unknown_type``
    "no plugin on this host serves 'mem/put'"."""
    try:
        host = Host(HostConfig(), plugins=[Memory])
    except ValueError as exc:
        assert "mem/put" in str(exc)
        return
    with anyio.fail_after(10):
        async with open_memory_client(host) as client:
            client.send(HandshakeRequest(agent_caps=["memory"]))
            assert isinstance(await client.receive(), HandshakeResponse)
            client.send(MemPut(id="p", key="k"))
            answer = await client.receive()
    assert not (isinstance(answer, ErrorMessage) and answer.code == "unknown_type"), (
        "the host decoded a type its plugin declared, then said no plugin serves it: "
        f"{answer.message if isinstance(answer, ErrorMessage) else answer}"
    )
