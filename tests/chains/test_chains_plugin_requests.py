"""The chains plugin's promise per request (PROTOCOL.md §4–§6): exactly one ``chain/resp``
whatever happens while planning, cancellable from the moment it is accepted, out of the
in-flight table before its response, big chains planned off the event loop, and the
worst case through declared skills held to ``max_total_nodes`` before anything runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import a2e_chains
import anyio
import pytest
import structlog
from a2e_chains import ChainPlugin, worst_case_node_count

from a2e_host.chains.messages import ChainNode, ChainRequest, ChainResponse, chain_codec
from a2e_host.chains.skills import read_skill_file
from a2e_host.config import HostConfig
from a2e_host.errors import ChainFailure
from a2e_host.exceptions import Busy
from a2e_host.limits import Limits, SessionLimits
from a2e_host.messages import Message
from a2e_host.runtime.runs import Run, RunRegistry, SessionRuns

WAIT = 10.0


@dataclass
class FakeSession:
    limits: SessionLimits
    session_id: str = "s1"
    agent_id: str = "test"
    granted: frozenset[str] = frozenset({"chains", "skill"})
    principal: str = "anonymous"


class FakeOutbox:
    """Collects messages; ``on_message`` sees each one as it is sent (synchronously)."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self.on_message: Callable[[Message], None] | None = None
        self.response = anyio.Event()
        self.full = False  # never over a high-water mark: wait_writable never waits

    def send_nowait(self, message: Message) -> None:
        self.sent.append(message)
        if self.on_message is not None:
            self.on_message(message)
        if isinstance(message, ChainResponse):
            self.response.set()

    def send_frame_nowait(self, frame: bytes) -> None:  # a run's sink sends frames
        self.send_nowait(chain_codec.decode(frame))

    async def wait_writable(self) -> None:
        return None

    def responses(self) -> list[ChainResponse]:
        return [m for m in self.sent if isinstance(m, ChainResponse)]


@dataclass
class FakeContext:
    """The plugin's view for one message, over a real run registry."""

    session: FakeSession
    outbox: FakeOutbox
    registry: RunRegistry
    req_id: str
    log: Any = field(default_factory=lambda: structlog.get_logger("test"))
    closing: bool = False
    started: list[Run] = field(default_factory=list)

    @property
    def runs(self) -> SessionRuns:
        return self.registry.view(self.session.session_id, "chains")

    def start_run(self, fn: Callable[..., Awaitable[Any]], *args: Any, name: str = "") -> Run:
        run = self.registry.start(fn, *args, key=(self.session.session_id, self.req_id),
                                  capability="chains", name=name, log=self.log,
                                  outbox=self.outbox)
        self.started.append(run)
        return run


async def handle(
    plugin: ChainPlugin, session: FakeSession, message: Message, outbox: FakeOutbox,
    registry: RunRegistry,
) -> list[Run]:
    """Hand one message to the plugin as the host would; the runs it started."""
    ctx = FakeContext(session, outbox, registry, message.id)
    await plugin.handle(message, ctx)
    return ctx.started


async def wait_ended(registry: RunRegistry) -> None:
    """Wait for every run to end, then check the registry forgot them all."""
    while len(registry):
        await next(iter(registry)).done.wait()
    assert (len(registry), registry.listed) == (0, 0), "the registry is empty once runs end"


def request(req_id: str, nodes: list[dict[str, Any]], **fields: Any) -> ChainRequest:
    return ChainRequest(
        id=req_id,
        nodes=[ChainNode(**{"kind": "tool", "name": "echo", **n}) for n in nodes],
        entry_node=nodes[0]["node_id"],
        **fields,
    )


def plugin_and_session(
    limits: Limits | None = None, skills: Path | None = None, **asked: int
) -> tuple[ChainPlugin, FakeSession]:
    config = HostConfig(tools=("conformance",), skills_dirs=(str(skills),) if skills else ())
    plugin = ChainPlugin(config)
    return plugin, FakeSession(SessionLimits(limits or config.limits, asked))


async def handle_all(
    plugin: ChainPlugin, session: FakeSession, *requests: ChainRequest,
    outbox: FakeOutbox | None = None,
) -> FakeOutbox:
    """Hand each request to the plugin, then wait for a response to each and for every
    run to have ended and left the registry."""
    outbox = outbox or FakeOutbox()
    registry = RunRegistry(structlog.get_logger("test"))
    with anyio.fail_after(WAIT):
        async with registry.open():
            for req in requests:
                await handle(plugin, session, req, outbox, registry)
            await wait_ended(registry)
    assert len(outbox.responses()) == len(requests), outbox.sent
    return outbox


def error_of(response: ChainResponse) -> ChainFailure:
    assert response.success is False and response.error is not None, response
    return response.error


# ── exactly one chain/resp, whatever happens while planning ─────────────────────


@pytest.mark.asyncio
async def test_a_bug_while_validating_ends_in_a_chain_resp_runtime_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """issue 12.2: any exception while validating or planning ends in a chain/resp."""
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("a bug")

    monkeypatch.setattr(a2e_chains, "validate_chain", broken)
    plugin, session = plugin_and_session()
    outbox = await handle_all(plugin, session, request("r1", [{"node_id": "a"}]))
    assert [m.TYPE for m in outbox.sent] == ["chain/resp"]
    error = error_of(outbox.responses()[0])
    assert error.code == "runtime_error" and "KeyError" in error.message, error
    assert "fault in the host" in error.message and outbox.responses()[0].nodes_run == 0


@pytest.mark.asyncio
async def test_a_bug_while_starting_the_run_ends_in_one_chain_resp_runtime_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def broken(self: Any, started: float, **kwargs: Any) -> Any:
        raise AttributeError("a bug in the runner")

    monkeypatch.setattr(a2e_chains.ChainRunner, "run_to_response", broken)
    plugin, session = plugin_and_session()
    outbox = await handle_all(plugin, session, request("r1", [{"node_id": "a"}]))
    assert [m.TYPE for m in outbox.sent] == ["chain/resp"]
    error = error_of(outbox.responses()[0])
    assert error.code == "runtime_error", error
    assert "while running the chain (AttributeError)" in error.message, error


@pytest.mark.asyncio
async def test_a_recursion_error_while_validating_is_chain_invalid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def too_deep(*args: Any, **kwargs: Any) -> Any:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(a2e_chains, "validate_chain", too_deep)
    plugin, session = plugin_and_session()
    outbox = await handle_all(plugin, session, request("r1", [{"node_id": "a"}]))
    error = error_of(outbox.responses()[0])
    assert error.code == "chain_invalid" and "nested too deeply" in error.message


async def validated_on(
    monkeypatch: pytest.MonkeyPatch, *requests: ChainRequest
) -> list[bool]:
    """For each request handled in turn: was it validated in a worker thread?"""
    threads: list[str] = []
    real = a2e_chains.validate_chain

    def spy(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(a2e_chains, "validate_chain", spy)
    plugin, session = plugin_and_session()
    outbox = await handle_all(plugin, session, *requests)
    assert all(r.success for r in outbox.responses())
    return [name != threading.main_thread().name for name in threads]


@pytest.mark.asyncio
async def test_a_chain_past_the_thread_threshold_is_validated_in_a_worker_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """issue 12.3: validation of a big chain must not hold the event loop."""
    n = a2e_chains.THREAD_PLANNING_NODES
    small = request("small", [{"node_id": f"n{i}"} for i in range(n)], streaming=False)
    big = request("big", [{"node_id": f"n{i}"} for i in range(n + 1)], streaming=False)
    assert await validated_on(monkeypatch, small, big) == [False, True]


@pytest.mark.asyncio
async def test_a_small_chain_with_much_expression_text_is_validated_in_a_worker_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Parsing costs by text: one node with 16 KiB of expressions leaves the loop too."""
    text = "[" + ", ".join(["input.a"] * 700) + "]"  # ~6,300 characters
    short = request("short", [{"node_id": "a", "input_map": {"k0": text}}], streaming=False)
    long = request("long", [{"node_id": "a", "input_map": {f"k{j}": text for j in range(3)}}],
                   streaming=False)
    assert await validated_on(monkeypatch, short, long) == [False, True]


# ── cancellable from the moment it is accepted ──────────────────────────────────


@pytest.mark.asyncio
async def test_a_cancel_handled_right_after_its_request_cancels_it_before_any_node() -> None:
    """issue 13.1: the cancel arrives before the chain's task has even started."""
    from a2e_host.chains.messages import ChainCancel

    plugin, session = plugin_and_session()
    outbox = FakeOutbox()
    registry = RunRegistry(structlog.get_logger("test"))
    with anyio.fail_after(WAIT):
        async with registry.open():
            await handle(
                plugin, session,
                request("c1", [{"node_id": "s", "name": "sleep", "input": {"seconds": 30}}]),
                outbox, registry,
            )
            await handle(plugin, session, ChainCancel(req_id="c1"), outbox, registry)
            await wait_ended(registry)
    assert [m.TYPE for m in outbox.sent] == ["chain/resp"], "no event: nothing started"
    assert error_of(outbox.responses()[0]).code == "cancelled"


# ── out of the in-flight table before the response ──────────────────────────────


@pytest.mark.asyncio
async def test_a_chain_sent_the_instant_the_previous_response_is_written_is_never_busy() -> None:
    """issue 12.12, at its most eager: with max_parallel 1, each next chain is handed to
    the plugin from inside the previous chain's response write."""
    plugin, session = plugin_and_session(max_parallel=1)
    outbox = FakeOutbox()
    busy: list[str] = []
    total = 50
    sent = 1
    registry = RunRegistry(structlog.get_logger("test"))
    with anyio.fail_after(WAIT):
        async with registry.open():

            def next_chain(message: Message) -> None:
                nonlocal sent
                if not isinstance(message, ChainResponse) or sent == total:
                    return
                sent += 1
                step = handle(plugin, session, request(f"r{sent}", [{"node_id": "a"}]),
                              outbox, registry)
                try:
                    step.send(None)  # handle() does not suspend for a chain/req
                except StopIteration:
                    pass
                except Busy as exc:
                    busy.append(exc.message)

            outbox.on_message = next_chain
            await handle(plugin, session, request("r1", [{"node_id": "a"}]), outbox, registry)
            await wait_ended(registry)
    assert busy == [], busy[:3]
    assert [r.req_id for r in outbox.responses()] == [f"r{i}" for i in range(1, total + 1)]


# ── max_total_nodes before anything runs ────────────────────────────────────────


def fan_out_skills(folder: Path, levels: int, copies: int) -> Path:
    """Skills s0 … s<levels-1>, each running ``copies`` copies of the next; the last one
    runs one ``echo``."""
    for level in range(levels):
        name = f"s{level}"
        if level == levels - 1:
            nodes = "  - {node_id: leaf, kind: tool, name: echo}\n"
        else:
            nodes = "".join(
                f"  - {{node_id: c{i}, kind: skill, name: s{level + 1}}}\n" for i in range(copies)
            )
        (folder / f"{name}.yaml").write_text(
            f"name: {name}\nentry_node: {'leaf' if level == levels - 1 else 'c0'}\nnodes:\n{nodes}",
            encoding="utf-8",
        )
    return folder


def declared(folder: Path) -> dict[str, Any]:
    return {p.stem: read_skill_file(p) for p in folder.glob("*.yaml")}


def nodes_of(*specs: dict[str, Any]) -> list[ChainNode]:
    return [ChainNode(**{"kind": "tool", "name": "echo", **s}) for s in specs]


def test_the_worst_case_counts_every_node_at_every_depth_through_declared_skills(
    tmp_path: Path,
) -> None:
    skills = declared(fan_out_skills(tmp_path, levels=8, copies=4))
    top = nodes_of({"node_id": "go", "kind": "skill", "name": "s0"})
    # top 1 + s0…s6: 4 + 16 + … + 4**7 skill nodes + 4**7 leaves in s7
    assert worst_case_node_count(top, skills, max_depth=8) == 1 + sum(
        4**k for k in range(1, 8)
    ) + 4**7
    # past max_depth a skill node counts once (it fails when it starts)
    assert worst_case_node_count(top, skills, max_depth=2) == 1 + 4 + 16


def test_map_templates_branches_and_python_skills_in_the_worst_case(tmp_path: Path) -> None:
    skills = declared(fan_out_skills(tmp_path, levels=2, copies=3))  # s0 = 3 × s1 (1 leaf)
    nodes = nodes_of(
        {"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t",
         "next_node": "b"},
        {"node_id": "t", "kind": "skill", "name": "s0"},  # per item: unknown, not counted
        {"node_id": "b", "kind": "branch", "condition": "input.x", "true_node": "y",
         "false_node": "z"},
        {"node_id": "y", "kind": "skill", "name": "s0"},  # both sides count
        {"node_id": "z", "kind": "skill", "name": "s0"},
        {"node_id": "p", "kind": "skill", "name": "python_skill"},  # not declared: 1
    )
    # m, b, y, z, p; then y and z each start s0: its 3 nodes, each an s1 of one leaf
    assert worst_case_node_count(nodes, skills, max_depth=8) == 5 + 2 * (3 + 3)


@pytest.mark.asyncio
async def test_a_skill_fan_out_over_max_total_nodes_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    """issue 12.7: s0…s7 each running 4 copies of the next, under a session-lowered
    max_total_nodes: chain_limit at once, no event, naming the ceiling."""
    plugin, session = plugin_and_session(
        skills=fan_out_skills(tmp_path, levels=8, copies=4), max_total_nodes=10_000
    )
    req = request("fan", [{"node_id": "go", "kind": "skill", "name": "s0"}])
    outbox = await handle_all(plugin, session, req)
    assert [m.TYPE for m in outbox.sent] == ["chain/resp"]
    error = error_of(outbox.responses()[0])
    expected = 1 + sum(4**k for k in range(1, 8)) + 4**7
    assert error.code == "chain_limit", error
    assert {k: error.details[k] for k in ("ceiling", "scope", "limit", "requested")} == {
        "ceiling": "max_total_nodes", "scope": "session", "limit": 10_000,
        "requested": expected,
    }
    assert error.details["errors"][0]["field"] == "nodes"
    assert f"up to {expected} nodes" in error.message


@pytest.mark.asyncio
async def test_under_the_default_limit_a_six_way_fan_out_eight_deep_is_refused_up_front(
    tmp_path: Path,
) -> None:
    """The default max_total_nodes (250,000) with the default max_depth (8): s0…s7 each
    running 6 copies of the next would make 615,859 node executions."""
    plugin, session = plugin_and_session(skills=fan_out_skills(tmp_path, levels=8, copies=6))
    t = time.perf_counter()
    outbox = await handle_all(
        plugin, session, request("fan", [{"node_id": "go", "kind": "skill", "name": "s0"}])
    )
    assert time.perf_counter() - t < 5.0
    error = error_of(outbox.responses()[0])
    assert (error.details["ceiling"], error.details["scope"]) == (
        "max_total_nodes", "host"
    )
    assert error.details["requested"] == 1 + sum(6**k for k in range(1, 8)) + 6**7


@pytest.mark.asyncio
async def test_a_skill_fan_out_within_max_total_nodes_runs(tmp_path: Path) -> None:
    plugin, session = plugin_and_session(
        skills=fan_out_skills(tmp_path, levels=3, copies=3), max_total_nodes=1 + 3 + 9 + 9
    )
    outbox = await handle_all(
        plugin, session,
        request("ok", [{"node_id": "go", "kind": "skill", "name": "s0"}], streaming=False),
    )
    assert outbox.responses()[0].success, outbox.responses()[0].error


@pytest.mark.asyncio
async def test_under_the_default_limits_s0_to_s8_fails_at_once_not_after_87000_nodes(
    tmp_path: Path,
) -> None:
    """issue 12.7, the deeper fan-out: s0…s8 each running 4 copies of the next nests one
    level past the default max_depth (8) on every path. Its roots always start, so it is
    sure to fail: it fails when s0 would start, instead of after expanding ~87,000
    nodes (47 s and 750 MB on a 2-core machine before)."""
    plugin, session = plugin_and_session(skills=fan_out_skills(tmp_path, levels=9, copies=4))
    t = time.perf_counter()
    outbox = await handle_all(
        plugin, session, request("deep", [{"node_id": "go", "kind": "skill", "name": "s0"}])
    )
    assert time.perf_counter() - t < 5.0
    error = error_of(outbox.responses()[0])
    assert (error.code, error.node_id) == ("chain_limit", "go"), error
    assert error.details == {"ceiling": "max_depth", "scope": "host", "limit": 8,
                                "requested": 9}
    assert [(m.node_id, m.phase) for m in outbox.sent if m.TYPE == "chain/event"] == [
        ("go", "start"), ("go", "error")
    ]


@pytest.mark.asyncio
async def test_a_skill_whose_deep_calls_are_not_certain_still_runs_until_max_depth(
    tmp_path: Path,
) -> None:
    """Only root nodes under on_error abort make nesting certain: behind a branch (or
    under skip) the sub-chain runs, and max_depth refuses the level that passes it."""
    (tmp_path / "down.yaml").write_text(
        "name: down\nentry_node: b\nnodes:\n"
        "  - {node_id: b, kind: branch, condition: 'input.go', true_node: again}\n"
        "  - {node_id: again, kind: skill, name: down, input: {go: true}}\n",
        encoding="utf-8",
    )
    plugin, session = plugin_and_session(skills=tmp_path, max_depth=3)
    outbox = await handle_all(plugin, session, request(
        "d", [{"node_id": "go", "kind": "skill", "name": "down", "input": {"go": True}}]
    ))
    error = error_of(outbox.responses()[0])
    assert error.details["ceiling"] == "max_depth" and error.details["requested"] == 4
    started = [m.node_id for m in outbox.sent if m.TYPE == "chain/event"
               and getattr(m, "phase", "") == "start"]
    assert started == ["go", "go/b", "go/again", "go/again/b", "go/again/again",
                       "go/again/again/b", "go/again/again/again"], started
