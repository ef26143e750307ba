"""Plugin routing driven by messages on a connection, not by calling ``plugin_for``
(issue 14, item 1: a test that only called ``plugin_for`` checked a path no message
could reach). A message reaches the first plugin by priority whose namespace
holds it, once its type is declared by an enabled plugin and the session holds that
plugin's capability."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import anyio
import pytest

from a2e_host.config import HostConfig
from a2e_host.messages import ErrorMessage, HandshakeRequest, HandshakeResponse, Message
from a2e_host.plugin import Plugin, PluginContext
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import MessageClient, open_memory_client

WAIT = 10  # seconds: the bound on every wait


class Other(Message, tag="x/other", kw_only=True):
    TYPE: ClassVar[str] = "x/other"
    text: str = ""


class Only(Message, tag="x/only", kw_only=True):
    TYPE: ClassVar[str] = "x/only"
    n: int


class Reply(Message, tag="x/reply", kw_only=True):
    TYPE: ClassVar[str] = "x/reply"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    by: str = ""


class Answering(Plugin):
    async def handle(self, message: Message, ctx: PluginContext) -> None:
        ctx.outbox.send_nowait(Reply(req_id=message.id, by=self.capability))


class Early(Answering):
    capability: ClassVar[str] = "early"
    namespace: ClassVar[str] = "x/*"
    priority: ClassVar[int] = 5
    message_types: ClassVar[tuple[type[Message], ...]] = (Other, Reply)


class Exact(Answering):
    capability: ClassVar[str] = "exact"
    namespace: ClassVar[str] = "x/only"
    priority: ClassVar[int] = 1
    message_types: ClassVar[tuple[type[Message], ...]] = (Only,)


async def session(client: MessageClient, caps: list[str]) -> None:
    client.send(HandshakeRequest(agent_caps=caps))
    resp = await client.receive()
    assert isinstance(resp, HandshakeResponse) and resp.ok, resp


async def exchange(caps: list[str], *messages: dict[str, Any]) -> list[Message]:
    host = Host(HostConfig(), plugins=[Early, Exact])
    with anyio.fail_after(WAIT):
        async with open_memory_client(host) as client:
            await session(client, caps)
            replies = []
            for message in messages:
                client.send(json.dumps(message))
                replies.append(await client.receive())
    return replies


@pytest.mark.asyncio
async def test_each_message_reaches_the_first_plugin_by_priority_whose_namespace_holds_it(
) -> None:
    other, only = await exchange(
        ["early", "exact"],
        {"type": "x/other", "id": "1", "text": "hi"},
        {"type": "x/only", "id": "2", "n": 3},
    )
    assert isinstance(other, Reply) and (other.req_id, other.by) == ("1", "early")
    assert isinstance(only, Reply) and (only.req_id, only.by) == ("2", "exact")


@pytest.mark.asyncio
async def test_a_plugins_message_is_refused_before_routing_as_core_messages_are() -> None:
    undeclared, bad, host_sent, ungranted = await exchange(
        ["early"],
        {"type": "x/nobody-declares-this", "id": "1"},  # in early's namespace, undeclared
        {"type": "x/other", "id": "2", "text": 5},
        {"type": "x/reply", "id": "3"},
        {"type": "x/only", "id": "4", "n": 1},  # exact's, not granted
    )
    assert isinstance(undeclared, ErrorMessage)
    assert (undeclared.code, undeclared.req_id) == ("unknown_type", "1")
    assert isinstance(bad, ErrorMessage) and (bad.code, bad.req_id) == ("schema_violation", "2")
    assert bad.detail == {"path": "$.text", "type": "x/other"}
    assert isinstance(host_sent, ErrorMessage)
    assert (host_sent.code, host_sent.req_id) == ("invalid_message", "3")
    assert isinstance(ungranted, ErrorMessage)
    assert (ungranted.code, ungranted.req_id, ungranted.capability_name) == (
        "capability_missing", "4", "exact")
