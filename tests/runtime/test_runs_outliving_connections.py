"""Runs of the host that outlive the connection that started them, and runs of two
capabilities on one session (issue 14, item 3): what the connection owes its plugins
when a run does not end within ``CANCEL_GRACE`` of a drop, and how a request id is
shared between capabilities."""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar

import anyio
import pytest
from a2e_chains import ChainPlugin

from a2e_host.chains.messages import ChainRequest, ChainResponse
from a2e_host.config import HostConfig
from a2e_host.messages import ErrorMessage, Message
from a2e_host.plugin import Plugin, PluginContext, RunHandle, SessionInfo
from a2e_host.runtime import connection as connection_module
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import open_memory_client
from tests.support.memory import handshaken

WAIT = 20  # seconds: the bound on every wait

ECHO = [{"node_id": "a", "kind": "tool", "name": "echo", "input": {"k": 1}}]


# ── a drop while the chain is planned in a worker thread ───────────────────────

PLANNING_SECONDS = 1.5
"""How long the slow plugin's validation takes, in its worker thread (which cannot be
cancelled), in these tests: longer than the patched ``CANCEL_GRACE``."""


class SlowPlanningChains(ChainPlugin):
    """The chains plugin with a validation that takes :data:`PLANNING_SECONDS` in its
    worker thread (as a 10,000-node chain of 330,000 bad expressions takes ~8 s on a
    2-core machine), recording what it is told about sessions."""

    planning = threading.Event()
    closed: ClassVar[list[str]] = []

    def plan_now(self, request: ChainRequest, session: SessionInfo) -> Any:
        type(self).planning.set()
        time.sleep(PLANNING_SECONDS)
        return super().plan_now(request, session)

    async def session_closed(self, session: SessionInfo) -> None:
        type(self).closed.append(session.session_id)
        await super().session_closed(session)


@pytest.mark.asyncio
async def test_plugins_are_told_a_session_closed_even_when_its_run_outlives_the_cancel_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reproduction over a real host (``a2e-host serve --port 0 --tools conformance``):
    send a chain/req of 10,000 nodes with 33 ``"a["`` input_map expressions each (4.5 MB,
    validated in a worker thread for ~8 s), abort the socket 1 s later. The host logs
    ``connection closed`` 5 s after ``peer gone`` and ``chain refused`` only after that:
    the connection gave up waiting for the run (``CANCEL_GRACE``) and skipped
    ``session_closed`` for every plugin with it (the old core awaited the run, then told
    the plugins). The chains plugin's per-session skill plans, and any third-party
    plugin's per-session state (the notes example's notes), are then never forgotten."""
    monkeypatch.setattr("a2e_chains.THREAD_PLANNING_NODES", 0)  # every chain in a thread
    monkeypatch.setattr(connection_module, "CANCEL_GRACE", 0.3)
    SlowPlanningChains.planning.clear()
    SlowPlanningChains.closed.clear()
    host = Host(HostConfig(tools=("conformance",)), plugins=[SlowPlanningChains])
    with anyio.fail_after(WAIT):
        async with host.running():
            async with open_memory_client(host) as client:
                session_id = await handshaken(client, ["chains"])
                client.send(ChainRequest(id="slow", nodes=ECHO, entry_node="a"))
                await anyio.to_thread.run_sync(SlowPlanningChains.planning.wait, WAIT)
            # the client is gone; its run ends once the worker thread returns
            for run in list(host.runs):
                await run.done.wait()
            await anyio.sleep(0.1)
            assert SlowPlanningChains.closed == [session_id], (
                "the session's connection is gone and its run has ended, but the plugins "
                "were never told (session_closed): their per-session state leaks"
            )


# ── one request id, two capabilities ───────────────────────────────────────────


class JobStart(Message, tag="job/start", kw_only=True):
    """Agent → host: run a job for ``seconds``."""

    TYPE: ClassVar[str] = "job/start"
    seconds: float = 1.0


class JobDone(Message, tag="job/done", kw_only=True):
    """Host → agent: the job ``req_id`` finished."""

    TYPE: ClassVar[str] = "job/done"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""


class Jobs(Plugin):
    """A third-party capability whose requests are runs of the host (``ctx.start_run``),
    as the plugin API offers."""

    capability: ClassVar[str] = "jobs"
    namespace: ClassVar[str] = "job/*"
    priority: ClassVar[int] = 50
    message_types: ClassVar[tuple[type[Message], ...]] = (JobStart, JobDone)

    async def handle(self, message: Message, ctx: PluginContext) -> None:
        assert isinstance(message, JobStart)
        if ctx.runs.get(message.id) is not None:  # what the API says to check first
            raise ValueError("unreachable in this test")
        ctx.start_run(self._job, message)

    async def _job(self, run: RunHandle, message: JobStart) -> None:
        await anyio.sleep(message.seconds)
        run.release()
        run.sink.send_nowait(JobDone(req_id=message.id))


@pytest.mark.asyncio
async def test_a_chain_whose_id_is_another_capabilitys_running_request_is_not_an_internal_error(
) -> None:
    """``ctx.runs`` is one capability's view (``get`` finds only its own runs), but the
    registry lists runs under ``(session_id, req_id)`` for every capability at once. So a
    ``chain/req`` with the id of a running ``job/start`` of the same session passes the
    chains plugin's duplicate check and then fails inside ``start_run`` (ValueError "a
    run is already listed"): the agent gets ``runtime_error`` "internal error … see the
    host log" and the host logs a traceback. Either capability may use the id (its view
    says it is free), or the refusal is a clean one; never an internal error."""
    host = Host(HostConfig(tools=("conformance",)), plugins=[ChainPlugin, Jobs])
    with anyio.fail_after(WAIT):
        async with open_memory_client(host) as client:
            await handshaken(client, ["chains", "jobs"])
            client.send(JobStart(id="x", seconds=0.5))
            client.send(ChainRequest(id="x", nodes=ECHO, entry_node="a"))
            answers: list[Message] = []
            while not any(isinstance(m, JobDone) for m in answers):
                answers.append(await client.receive())
    internal = [m for m in answers if isinstance(m, ErrorMessage) and m.code == "runtime_error"]
    assert not internal, (
        f"the chain/req got an internal error: {internal[0].message!r}; the request id "
        "was free among chains (ctx.runs.get returned None)"
    )
    chain_answers = [m for m in answers if isinstance(m, ChainResponse | ErrorMessage)]
    assert chain_answers, "the chain/req got no answer at all"
