"""Request budgets and the one-response promise on real hosts (``a2e-host stdio`` and
``a2e-host serve`` on 127.0.0.1; PROTOCOL.md §5, §6): the reproductions of issue 12
(items 6, 7, 2, 3, 12) and issue 13 (items 1, 3, 16), each with the host's peak memory or
another session's pings checked where the issue names them."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import ClientConnection, connect

from a2e_host.chains.messages import ChainNode, ChainResponse
from a2e_host.client import spawn_stdio
from tests.support import REPO
from tests.support.process import (
    CLI,
    STARTUP,
    WAIT,
    HostProcess,
    current_rss,
    host_env,
    peak_rss,
    reset_peak_rss,
)
from tests.support.requests import chain, tool
from tests.support.stdio import STDIO, stdio_process
from tests.support.ws import SERVE, serving, shared_serving

MIB = 2**20


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    """One ``a2e-host serve --tools conformance`` for the cases that need no other setting:
    each talks to it on connections of its own."""
    with shared_serving(SERVE) as served:
        yield served


# ── helpers: a real host, its memory, its sessions ──────────────────────────────


class Session:
    """One handshaken session over stdio or WebSocket, reading one message at a time."""

    def __init__(self, send: Any, receive: Any) -> None:
        self._send = send
        self._receive = receive

    async def send(self, *messages: dict[str, Any]) -> None:
        await self._send(*messages)

    async def receive(self) -> dict[str, Any]:
        with anyio.fail_after(WAIT * 4):
            message: dict[str, Any] = await self._receive()
        return message

    async def run(self, message: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Send a request; return its events and the message that ends it."""
        await self.send(message)
        events = []
        while True:
            got = await self.receive()
            if got["type"] == "chain/event":
                events.append(got)
            else:
                return events, got

    async def hello(self, caps: tuple[str, ...] = ("chains",), **limits: int) -> dict[str, Any]:
        message: dict[str, Any] = {"type": "handshake/req", "id": "h", "agent_caps": list(caps)}
        if limits:
            message["limits"] = limits
        await self.send(message)
        resp = await self.receive()
        assert resp["type"] == "handshake/resp" and resp["ok"], resp
        return resp


@asynccontextmanager
async def stdio_session(
    *flags: str, caps: tuple[str, ...] = ("chains",), **limits: int
) -> AsyncIterator[tuple[Session, HostProcess]]:
    """The real ``a2e-host stdio`` (with extra ``flags``), handshaken; it must exit 0
    without a traceback after EOF (:func:`~tests.support.stdio.stdio_process`)."""
    async with stdio_process([*STDIO, *flags]) as host:

        async def send(*messages: dict[str, Any]) -> None:
            await host.send(*messages)  # several messages: one write

        session = Session(send, host.receive)
        await session.hello(caps, **limits)
        yield session, host


def ws_session(ws: ClientConnection) -> Session:
    async def send(*messages: dict[str, Any]) -> None:
        for message in messages:  # back to back, no reply awaited: one burst
            await ws.send(json.dumps(message))

    async def receive() -> dict[str, Any]:
        data = await ws.recv()
        assert isinstance(data, str)
        message: dict[str, Any] = json.loads(data)
        return message

    return Session(send, receive)


def limit_of(resp: dict[str, Any]) -> dict[str, Any]:
    assert resp["type"] == "chain/resp" and resp["success"] is False, resp
    error = resp["error"]
    assert error["code"] == "chain_limit", error
    return {k: error["details"][k] for k in ("ceiling", "scope", "limit", "requested")}


class Probe:
    """Pings on a second session while something else runs; records each round trip."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.latencies: list[float] = []
        self.stop = anyio.Event()

    async def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            t = time.perf_counter()
            await self.session.send({"type": "ping", "id": f"p{n}"})
            pong = await self.session.receive()
            assert (pong["type"], pong["req_id"]) == ("pong", f"p{n}"), pong
            self.latencies.append(time.perf_counter() - t)
            await anyio.sleep(0.01)


# ── 12.6: the outputs a request keeps ───────────────────────────────────────────


@pytest.mark.asyncio
async def test_kept_outputs_past_the_chain_budget_are_refused_and_host_memory_stays_bounded() -> (
    None
):
    """issue 12.6: 250 nodes each returning ~1 MiB used to be kept whole (250 MB, and as
    much again to encode the response). Under an 8 MiB max_chain_output_bytes the node
    that crosses it fails, and the host's peak RSS grows by the budget plus a constant."""
    budget = 8 * MIB
    nodes = [tool(f"b{i}", "big", input={"bytes": MIB - 64}) for i in range(250)]
    async with stdio_session(max_chain_output_bytes=budget, max_output_bytes=MIB,
                             max_concurrency=4) as (session, host):
        _, warm = await session.run(chain("warm", [tool("a", "echo")], streaming=False))
        assert warm["success"], warm
        reset_peak_rss(host.process.pid)
        before = current_rss(host.process.pid)
        _, resp = await session.run(chain("many", nodes, streaming=False))
        grew = peak_rss(host.process.pid) - before
    details = limit_of(resp)
    assert (details["ceiling"], details["scope"], details["limit"]) == (
        "max_chain_output_bytes", "session", budget
    )
    assert budget < details["requested"] <= budget + MIB, details
    assert grew < budget + 64 * MIB, f"host peak RSS grew {grew / MIB:.0f} MiB"


@pytest.mark.asyncio
async def test_reading_a_1_mib_file_over_a_1500_item_map_is_refused_early(tmp_path: Path) -> None:
    """issue 12.6: read_file of a 1 MiB file over a 1,500-item map reached 3.1 GB. The
    map's output is sure to pass max_output_bytes after a few items: it fails then."""
    (tmp_path / "one_mib.txt").write_text("y" * (MIB - 1), encoding="utf-8")
    nodes = [{"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "r"},
             tool("r", "read_file", input={"path": "one_mib.txt"})]
    flags = ("--tools", "fs", "--root", str(tmp_path))
    async with stdio_session(*flags, max_map_concurrency=8) as (session, host):
        _, warm = await session.run(chain("warm", [tool("a", "stat", input={"path": "."})]))
        assert warm["success"], warm
        reset_peak_rss(host.process.pid)
        before = current_rss(host.process.pid)
        events, resp = await session.run(chain("reads", nodes, initial_input={"xs": [0] * 1500},
                                               event_outputs=False))
        grew = peak_rss(host.process.pid) - before
    details = limit_of(resp)
    assert details["ceiling"] == "max_output_bytes" and resp["error"]["node_id"] == "m"
    items = {e["node_id"] for e in events if e["node_id"].startswith("r[")}
    assert 8 <= len(items) <= 8 + 8, f"{len(items)} items started"
    assert grew < 100 * MIB, f"host peak RSS grew {grew / MIB:.0f} MiB"


# ── 12.7: node executions, with another session served meanwhile ───────────────


def fan_out_skills(folder: Path, levels: int, copies: int) -> Path:
    for level in range(levels):
        if level == levels - 1:
            body = "entry_node: leaf\nnodes:\n  - {node_id: leaf, kind: tool, name: echo}\n"
        else:
            body = "entry_node: c0\nnodes:\n" + "".join(
                f"  - {{node_id: c{i}, kind: skill, name: s{level + 1}}}\n" for i in range(copies)
            )
        (folder / f"s{level}.yaml").write_text(f"name: s{level}\n{body}", encoding="utf-8")
    return folder


@pytest.mark.asyncio
async def test_a_map_of_skill_fan_outs_stops_at_max_total_nodes_while_a_probe_is_served(
    tmp_path: Path,
) -> None:
    """issue 12.7 at run time: a map's items are unknown until it runs, so 300 items of a
    skill that fans out to 85 nodes are counted as they start, and refused past the
    session's max_total_nodes; another session's pings are answered throughout."""
    fan_out_skills(tmp_path, levels=4, copies=4)  # per item: 1 + 4 + 16 + 64
    nodes = [{"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t"},
             {"node_id": "t", "kind": "skill", "name": "s0"}]
    async with serving("--skills", str(tmp_path)) as (url, host), \
            connect(url) as hostile, connect(url) as quiet:
        attacker, probe_session = ws_session(hostile), ws_session(quiet)
        await attacker.hello(
            ("chains", "skill"), max_total_nodes=5_000, max_map_concurrency=8
        )
        await probe_session.hello()
        reset_peak_rss(host.process.pid)
        before = current_rss(host.process.pid)
        probe = Probe(probe_session)
        async with anyio.create_task_group() as tg:
            tg.start_soon(probe.run)
            _, resp = await attacker.run(chain("fan", nodes, streaming=False,
                                               initial_input={"xs": list(range(300))}))
            probe.stop.set()
        grew = peak_rss(host.process.pid) - before
    assert limit_of(resp) == {"ceiling": "max_total_nodes", "scope": "session",
                              "limit": 5_000, "requested": 5_001}
    assert probe.latencies, "the probe got no pong at all"
    assert max(probe.latencies) < 2.0, f"slowest pong {max(probe.latencies):.2f} s"
    assert grew < 150 * MIB, f"host peak RSS grew {grew / MIB:.0f} MiB"


@pytest.mark.asyncio
async def test_skill_fan_outs_past_max_total_nodes_or_max_depth_are_refused_at_once(
    tmp_path: Path,
) -> None:
    """issue 12.7: s0…s7, each running 4 copies of the next, under a session-lowered
    max_total_nodes: refused before anything runs. s0…s8 under the default ceilings
    nests past max_depth on every path: refused when s0 would start."""
    eight, nine = tmp_path / "eight", tmp_path / "nine"
    eight.mkdir()
    nine.mkdir()
    fan_out_skills(eight, levels=8, copies=4)
    fan_out_skills(nine, levels=9, copies=4)
    go = [{"node_id": "go", "kind": "skill", "name": "s0"}]
    async with stdio_session("--skills", str(eight), caps=("chains", "skill"),
                             max_total_nodes=10_000) as (session, _):
        events, resp = await session.run(chain("s7", go))
    assert events == [] and resp["nodes_run"] == 0
    assert limit_of(resp) == {"ceiling": "max_total_nodes", "scope": "session",
                              "limit": 10_000, "requested": 38_229}
    async with stdio_session("--skills", str(nine), caps=("chains", "skill")) as (session, host):
        reset_peak_rss(host.process.pid)
        before = current_rss(host.process.pid)
        events, resp = await session.run(chain("s8", go))
        grew = peak_rss(host.process.pid) - before
    assert [(e["node_id"], e["phase"]) for e in events] == [("go", "start"), ("go", "error")]
    assert limit_of(resp) == {"ceiling": "max_depth", "scope": "host", "limit": 8,
                              "requested": 9}
    assert grew < 50 * MIB, f"host peak RSS grew {grew / MIB:.0f} MiB"


# ── 12.2 / 12.3: planning answers with a chain/resp and leaves the loop free ────


@pytest.mark.asyncio
async def test_an_expression_nested_too_deeply_gets_a_chain_resp_not_a_bare_error() -> None:
    """issue 12.2: ``(((…input…)))`` 600 deep made validation raise RecursionError and
    the request got a bare ``error runtime_error``; now its chain/resp says what is wrong."""
    deep = "(" * 600 + "input" + ")" * 600
    async with stdio_session() as (session, _):
        events, resp = await session.run(
            chain("deep", [tool("a", "echo", input_map={"v": deep})])
        )
        _, after = await session.run(chain("after", [tool("a", "echo")]))
    assert resp["type"] == "chain/resp" and resp["req_id"] == "deep", resp
    assert resp["success"] is False and resp["error"]["code"] == "chain_invalid", resp
    assert events == [] and after["success"], after


@pytest.mark.asyncio
async def test_another_sessions_ping_is_answered_while_a_big_chain_validates(url: str) -> None:
    """issue 12.3: validating a big chain ran on the event loop: every other session
    waited for it. It now runs in a worker thread. The chain is made slow to validate
    (20,000 distinct expressions) and invalid at its last node, so only validation runs."""
    nodes = [
        tool(f"n{i}", "echo", input_map={f"k{j}": f"join('-', [input.a, 'x{i}_{j}'])"
                                         for j in range(5)})
        for i in range(4_000)
    ]
    nodes[-1]["name"] = "no_such_tool"
    request = chain("big", nodes, streaming=False)
    async with connect(url, max_size=2**25) as busy, connect(url) as quiet:
        big_session, probe_session = ws_session(busy), ws_session(quiet)
        await big_session.hello()
        await probe_session.hello()
        probe = Probe(probe_session)
        async with anyio.create_task_group() as tg:
            tg.start_soon(probe.run)
            await anyio.sleep(0.05)  # the probe is under way
            t = time.perf_counter()
            _, resp = await big_session.run(request)
            answered = time.perf_counter() - t
            probe.stop.set()
    assert resp["type"] == "chain/resp" and resp["error"]["code"] == "chain_invalid", resp
    slowest = max(probe.latencies)
    assert answered > 0.3, answered  # long enough for a stall to show
    assert slowest < answered / 3, (
        f"a ping waited {slowest:.2f} s while the chain validated for {answered:.2f} s"
    )


class _Tools:
    def tool_names(self) -> set[str]:
        return {"echo"}

    def skill_names(self) -> set[str]:
        return set()

    def check_proc(self, node: ChainNode) -> str | None:
        return None


# ── 12.12: out of the in-flight table before the response ───────────────────────


@pytest.mark.asyncio
async def test_200_chains_each_sent_when_the_last_response_arrives_are_never_busy() -> None:
    """issue 12.12: with max_parallel 1, each chain is sent the moment the previous
    chain/resp is read; none may be told busy."""
    async with stdio_session(max_parallel=1) as (session, _):
        replies = []
        for i in range(200):
            _, reply = await session.run(chain(f"c{i}", [tool("a", "add",
                                                             input={"a": i, "b": 1})]))
            replies.append(reply)
    busy = [r for r in replies if r["type"] == "error"]
    assert busy == [], busy[:3]
    assert [r["final_output"]["sum"] for r in replies] == [i + 1 for i in range(200)]


# ── 13.1: a cancel right behind its request ─────────────────────────────────────


async def cancel_right_behind(session: Session) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    await session.send(
        chain("c1", [tool("s", "sleep", input={"seconds": 30})]),
        {"type": "chain/cancel", "id": "x1", "req_id": "c1"},
    )
    events = []
    while True:
        got = await session.receive()
        assert got["type"] != "error", f"the cancel was refused: {got}"
        if got["type"] == "chain/event":
            events.append(got)
        else:
            return events, got


@pytest.mark.asyncio
async def test_a_cancel_in_the_same_stdio_write_as_its_request_cancels_it() -> None:
    """issue 13.1: both lines in one write; the chain is cancellable once accepted."""
    async with stdio_session() as (session, _):
        t = time.perf_counter()
        events, resp = await cancel_right_behind(session)
        took = time.perf_counter() - t
    assert (resp["type"], resp["req_id"], resp["error"]["code"]) == (
        "chain/resp", "c1", "cancelled"
    ), resp
    assert took < 10, f"the cancelled chain answered after {took:.1f} s"
    assert [e["phase"] for e in events] in ([], ["start", "error"]), events


@pytest.mark.asyncio
async def test_a_cancel_in_the_same_websocket_burst_as_its_request_cancels_it(url: str) -> None:
    async with connect(url) as ws:
        session = ws_session(ws)
        await session.hello()
        events, resp = await cancel_right_behind(session)
    assert (resp["type"], resp["req_id"], resp["error"]["code"]) == (
        "chain/resp", "c1", "cancelled"
    ), resp
    assert [e["phase"] for e in events] in ([], ["start", "error"]), events


# ── 13.3: a left-out timeout ───────────────────────────────────────────────────


@pytest.mark.asyncio
async def test_a_left_out_timeout_is_min_of_300_and_max_timeout(tmp_path: Path) -> None:
    """issue 13.3: with max_timeout 1, a request without ``timeout`` runs under 1 s
    instead of being refused for asking 300; an explicit 300 is still refused, and a
    declared skill (a sub-chain without a timeout of its own) runs too."""
    fan_out_skills(tmp_path, levels=2, copies=2)
    async with stdio_session("--skills", str(tmp_path), caps=("chains", "skill"),
                             max_timeout=1) as (session, _):
        _, slept = await session.run(chain("t1", [tool("s", "sleep", input={"seconds": 5})]))
        _, asked = await session.run(chain("t2", [tool("a", "echo")], timeout=300))
        _, zero = await session.run(chain("t3", [tool("a", "echo")], timeout=0))
        _, skill = await session.run(chain("t4", [{"node_id": "go", "kind": "skill",
                                                   "name": "s0"}]))
    assert slept["error"]["code"] == "timeout" and slept["error"]["details"] == {"timeout": 1}
    assert asked["error"]["code"] == "chain_limit", asked
    problem = asked["error"]["details"]["errors"][0]
    assert {k: problem[k] for k in ("ceiling", "scope", "limit", "requested")} == {
        "ceiling": "max_timeout", "scope": "session", "limit": 1, "requested": 300
    }
    hint = zero["error"]["details"]["errors"][0]["hint"]
    assert "leave it out" in hint and "min(300, max_timeout)" in hint, hint
    assert skill["success"], skill


@pytest.mark.asyncio
async def test_the_client_and_run_leave_timeout_to_the_sessions_max_timeout(
    tmp_path: Path,
) -> None:
    """issue 13.3 through this package's own client and ``a2e-host run``: an encoded
    request always carries ``timeout``, so a left-out one is sent as
    ``min(300, max_timeout)`` rather than as 300."""
    nodes = [tool("a", "add", input={"a": 1, "b": 2})]
    with anyio.fail_after(WAIT * 2):
        async with spawn_stdio([*STDIO], limits={"max_timeout": 60}, env=host_env(),
                               cwd=str(REPO), stderr="capture",
                               handshake_timeout=STARTUP) as client:
            messages = [m async for m in client.run_chain(nodes, "a")]
    response = messages[-1]
    assert isinstance(response, ChainResponse) and response.success, response.error
    chain_file = tmp_path / "chain.json"
    chain_file.write_text(json.dumps({"entry_node": "a", "nodes": nodes}), encoding="utf-8")
    with anyio.fail_after(WAIT * 2):
        done = await anyio.run_process(
            [*CLI, "run", str(chain_file), "--tools", "conformance", "--final"],
            env=host_env(A2E_MAX_TIMEOUT="60"), cwd=REPO, check=False,
        )
    assert (done.returncode, json.loads(done.stdout)) == (0, {"sum": 3}), done.stderr[-800:]


# ── 13.16: payload opt-ins ──────────────────────────────────────────────────────


@pytest.mark.asyncio
async def test_payload_opt_ins_are_advertised_and_cut_outputs_from_events_and_response(
    url: str,
) -> None:
    nodes = [{"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t",
              "next_node": "n"},
             tool("t", "upper", input_map={"text": "item"}),
             tool("n", "count", input_map={"items": "m.output"})]
    async with connect(url) as ws:
        session = ws_session(ws)
        hello = await session.hello()
        full_events, full = await session.run(chain("full", nodes,
                                                    initial_input={"xs": ["a", "b"]}))
        events, lean = await session.run(chain("lean", nodes, initial_input={"xs": ["a", "b"]},
                                               include_outputs=False, event_outputs=False))
    meta = hello["accepted_caps"][0]["metadata"]
    assert {"chain/req.include_outputs", "chain/req.event_outputs"} <= set(meta["features"])
    assert meta["limits"]["max_chain_output_bytes"] == 16 * MIB
    assert meta["limits"]["max_total_nodes"] == 250_000
    assert full["outputs"] == {"m": [{"text": "A"}, {"text": "B"}], "n": {"count": 2}}
    assert any(e["output"] is not None for e in full_events if e["phase"] == "done")
    assert (lean["success"], lean["outputs"], lean["final_output"]) == (True, {}, {"count": 2})
    done = [e for e in events if e["phase"] == "done"]
    assert len(done) == 4 and all(e["output"] is None for e in done), done


@pytest.mark.asyncio
async def test_a_skills_inner_outputs_count_against_the_requests_output_budget(
    tmp_path: Path,
) -> None:
    """max_chain_output_bytes covers sub-chains: the inner nodes of a skill keep their
    outputs while it runs, and the one that crosses the request's budget fails it."""
    skill = {"name": "heavy", "description": "three 1,000-byte outputs", "entry_node": "a",
             "nodes": [tool("a", "big", input={"bytes": 1000}, next_node="b"),
                       tool("b", "big", input={"bytes": 1000}, next_node="c"),
                       tool("c", "big", input={"bytes": 1000})]}
    (tmp_path / "heavy.json").write_text(json.dumps(skill), encoding="utf-8")
    flags = ("--skills", str(tmp_path))
    top = [{"node_id": "s", "kind": "skill", "name": "heavy"}]
    async with stdio_session(*flags, caps=("chains", "skill"),
                             max_chain_output_bytes=2500) as (session, _):
        events, resp = await session.run(chain("inner", top))
        async with stdio_session(*flags, caps=("chains", "skill"),
                                 max_chain_output_bytes=4000) as (roomy, _):
            _, fits = await roomy.run(chain("fits", top))
    assert limit_of(resp) == {"ceiling": "max_chain_output_bytes", "scope": "session",
                              "limit": 2500, "requested": 3 * 1011}
    done = [e["node_id"] for e in events if e["phase"] == "done"]
    assert done == ["s/a", "s/b"], events  # the third inner output crossed it
    assert fits["success"] and fits["final_output"] == {"data": "x" * 1000}, fits
