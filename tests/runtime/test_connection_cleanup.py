"""How a connection ends when one of its cleanup steps takes too long: each step (the
runs, every plugin's ``session_closed``, the transport) has its own bound, so a slow one
never skips the others."""

from __future__ import annotations

from typing import ClassVar

import anyio
import pytest

from a2e_host.config import HostConfig
from a2e_host.messages import HandshakeRequest, HandshakeResponse
from a2e_host.plugin import Plugin, SessionInfo
from a2e_host.runtime import connection as connection_module
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import open_memory_client

WAIT = 10  # seconds: the bound on every wait


class Stuck(Plugin):
    """A plugin whose ``session_closed`` never returns (it waits on something gone)."""

    capability: ClassVar[str] = "stuck"
    namespace: ClassVar[str] = "stuck/*"
    priority: ClassVar[int] = 1
    cut_off: ClassVar[list[str]] = []

    async def session_closed(self, session: SessionInfo) -> None:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            type(self).cut_off.append(session.session_id)
            raise


class Records(Plugin):
    """A plugin after :class:`Stuck` by priority, recording the sessions it is told of."""

    capability: ClassVar[str] = "records"
    namespace: ClassVar[str] = "records/*"
    priority: ClassVar[int] = 2
    closed: ClassVar[list[str]] = []

    async def session_closed(self, session: SessionInfo) -> None:
        type(self).closed.append(session.session_id)


@pytest.mark.asyncio
async def test_a_plugin_stuck_in_session_closed_is_cut_off_and_the_next_one_is_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connection_module, "CANCEL_GRACE", 0.2)
    Stuck.cut_off.clear()
    Records.closed.clear()
    host = Host(HostConfig(), plugins=[Stuck, Records])
    with anyio.fail_after(WAIT):
        async with open_memory_client(host) as client:
            client.send(HandshakeRequest(agent_caps=["stuck", "records"]))
            resp = await client.receive()
            assert isinstance(resp, HandshakeResponse) and resp.ok, resp
        # the client has gone and its connection has fully ended
    assert (Stuck.cut_off, Records.closed) == ([resp.session_id], [resp.session_id])
    assert not host.connections
