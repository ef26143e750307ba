"""Runs owned by the host, not by a connection (issue 14, item 3): a run's task lives in
the host's registry, its sink keeps the run's position and forwards frames to whichever
outbox is attached, and detaching cancels it only where the policy says so."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest
import structlog

from a2e_host.chains.messages import ChainEvent, ChainRequest, ChainResponse, chain_codec
from a2e_host.config import HostConfig
from a2e_host.exceptions import Busy
from a2e_host.messages import ErrorMessage, Ping
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import open_memory_client
from a2e_host.runtime.runs import DetachPolicy, Run, RunRegistry
from tests.support.memory import handshaken

WAIT = 10  # seconds: the bound on every wait


class Frames:
    """An outbox that keeps what it is given (implements FrameOutbox)."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.full = False

    def send_frame_nowait(self, frame: bytes) -> None:
        self.frames.append(frame)

    async def wait_writable(self) -> None:
        return None

    def ids(self) -> list[str]:
        return [chain_codec.decode(f).id for f in self.frames]


def registry() -> RunRegistry:
    return RunRegistry(structlog.get_logger("test"))


class Steps:
    """A run body that sends one ping per step, each when the test allows it."""

    def __init__(self, count: int) -> None:
        self.go = [anyio.Event() for _ in range(count)]
        self.sent = [anyio.Event() for _ in range(count)]
        self.cancelled = anyio.Event()

    async def __call__(self, run: Run) -> None:
        try:
            for n, (go, sent) in enumerate(zip(self.go, self.sent, strict=True), start=1):
                await go.wait()
                run.sink.send_nowait(Ping(id=f"p{n}"))
                sent.set()
        except anyio.get_cancelled_exc_class():
            self.cancelled.set()
            raise

    async def step(self, n: int) -> None:
        self.go[n - 1].set()
        await self.sent[n - 1].wait()


@pytest.mark.asyncio
async def test_a_kept_run_survives_its_connections_detach_and_writes_to_the_next_outbox(
) -> None:
    runs, first, second = registry(), Frames(), Frames()
    body = Steps(3)
    with anyio.fail_after(WAIT):
        async with runs.open():
            run = runs.start(body, key=("s1", "r1"), policy=DetachPolicy.KEEP, outbox=first)
            await body.step(1)
            assert run.detach() is False  # the policy says keep: not cancelled
            await body.step(2)  # emitted while detached: counted, sent nowhere
            assert (run.sink.position, run.sink.attached) == (2, False)
            run.attach(second, after=2)
            await body.step(3)
            await run.done.wait()
            assert not body.cancelled.is_set()
            assert (len(runs), runs.listed, runs.get(("s1", "r1"))) == (0, 0, None)
    assert first.ids() == ["p1"]
    assert second.ids() == ["p3"]
    assert run.sink.position == 3


@pytest.mark.asyncio
async def test_a_run_is_cancelled_when_its_connection_detaches_by_default() -> None:
    runs, outbox = registry(), Frames()
    body = Steps(2)
    with anyio.fail_after(WAIT):
        async with runs.open():
            run = runs.start(body, key=("s1", "r1"), outbox=outbox)
            assert run.policy is DetachPolicy.CANCEL
            await body.step(1)
            assert run.detach() is True
            await run.done.wait()
            assert body.cancelled.is_set()
            assert (len(runs), runs.listed) == (0, 0)
    assert outbox.ids() == ["p1"]


@pytest.mark.asyncio
async def test_the_append_hook_sees_every_frame_with_its_position_before_it_is_sent() -> None:
    runs, outbox = registry(), Frames()
    seen: list[tuple[int, bytes, int]] = []  # position, frame, frames the outbox had then

    def append(position: int, frame: bytes) -> None:
        seen.append((position, frame, len(outbox.frames)))

    async def two(run: Run) -> None:
        run.sink.send_nowait(Ping(id="a"))
        run.sink.send_nowait(Ping(id="b"))

    with anyio.fail_after(WAIT):
        async with runs.open():
            run = runs.start(two, outbox=outbox, append=append)
            await run.done.wait()
    assert [(p, before) for p, _, before in seen] == [(1, 0), (2, 1)]
    assert [frame for _, frame, _ in seen] == outbox.frames


@pytest.mark.asyncio
async def test_attaching_twice_or_asking_for_frames_not_kept_is_refused() -> None:
    runs = registry()
    body = Steps(1)
    with anyio.fail_after(WAIT):
        async with runs.open():
            run = runs.start(body, policy=DetachPolicy.KEEP, outbox=Frames())
            await body.step(1)
            with pytest.raises(RuntimeError, match="attached to another connection"):
                run.attach(Frames())
            run.detach()
            with pytest.raises(ValueError, match="after position 0 are not kept"):
                run.attach(Frames(), after=0)
            run.attach(Frames(), after=1)


@pytest.mark.asyncio
async def test_a_listed_run_counts_until_released_and_its_key_is_taken_until_then() -> None:
    runs = registry()
    body = Steps(1)
    with anyio.fail_after(WAIT):
        async with runs.open():
            run = runs.start(body, key=("s1", "r1"), capability="chains")
            other = runs.start(Steps(1), key=("s2", "r1"), capability="chains")
            assert runs.view("s1", "chains").get("r1") is run
            assert runs.view("s1", "other").get("r1") is None
            assert (len(runs.view("s1", "chains")), runs.count("s2", "chains")) == (1, 1)
            with pytest.raises(ValueError, match="already listed for request 'r1'"):
                runs.start(Steps(1), key=("s1", "r1"), capability="chains")
            run.release()  # before its last frame: no longer counted nor found
            assert (runs.count("s1", "chains"), runs.get(("s1", "r1"), "chains")) == (0, None)
            assert len(runs) == 2  # its task is still tracked
            await body.step(1)
            await run.done.wait()
            other.abort()
            await other.done.wait()
            assert (len(runs), runs.listed) == (0, 0)


@pytest.mark.asyncio
async def test_a_cancel_asked_before_the_run_is_ready_is_applied_when_it_is() -> None:
    runs = registry()
    applied: list[str] = []
    ready = anyio.Event()

    async def late(run: Run) -> None:
        await ready.wait()
        run.on_cancel(lambda: applied.append("now"))

    with anyio.fail_after(WAIT):
        async with runs.open():
            run = runs.start(late, key=("s1", "r1"))
            run.cancel()
            run.cancel()  # idempotent
            assert applied == [] and run.cancel_requested
            ready.set()
            await run.done.wait()
    assert applied == ["now"]


@pytest.mark.asyncio
async def test_an_exception_in_a_run_becomes_one_wire_error_with_its_request_id() -> None:
    runs, outbox = registry(), Frames()

    async def broken(run: Run) -> None:
        raise Busy("too busy right now")

    with anyio.fail_after(WAIT):
        async with runs.open():
            run = runs.start(broken, key=("s1", "r9"), capability="chains", outbox=outbox)
            await run.done.wait()
    [error] = [chain_codec.decode(f) for f in outbox.frames]
    assert isinstance(error, ErrorMessage)
    assert (error.req_id, error.code, error.capability_name) == ("r9", "busy", "chains")
    assert len(runs) == 0


@pytest.mark.asyncio
async def test_a_run_whose_error_cannot_be_made_still_answers_runtime_error() -> None:
    def broken_mapping(exc: BaseException, **kwargs: Any) -> ErrorMessage:
        raise KeyError("a bug in the mapping")

    runs, outbox = RunRegistry(structlog.get_logger("test"), broken_mapping), Frames()

    async def broken(run: Run) -> None:
        raise Busy("too busy right now")

    with anyio.fail_after(WAIT):
        async with runs.open():
            run = runs.start(broken, key=("s1", "r9"), capability="chains", outbox=outbox)
            await run.done.wait()
    [error] = [chain_codec.decode(f) for f in outbox.frames]
    assert isinstance(error, ErrorMessage)
    assert (error.req_id, error.code, error.capability_name, error.detail) == (
        "r9", "runtime_error", "chains", {})
    assert (len(runs), run.sink.position) == (0, 1)


@pytest.mark.asyncio
async def test_runs_start_only_while_the_host_runs() -> None:
    runs = registry()
    with pytest.raises(RuntimeError, match="the host is not running"):
        runs.start(Steps(1))
    host = Host(HostConfig(tools=("conformance",)))
    with pytest.raises(RuntimeError, match=r"inside 'async with host\.running\(\)'"):
        await host.serve_connection(object())  # type: ignore[arg-type]
    assert host.connections == set()


@pytest.mark.asyncio
async def test_the_host_runs_while_any_entry_is_inside_and_the_first_waits_for_the_rest(
) -> None:
    runs = registry()
    guest_in, guest_may_leave, opener_left = anyio.Event(), anyio.Event(), anyio.Event()

    async def opener() -> None:
        async with runs.open():
            await guest_in.wait()
        opener_left.set()

    async def guest() -> None:
        await anyio.wait_all_tasks_blocked()
        async with runs.open():
            guest_in.set()
            await guest_may_leave.wait()
            assert runs.is_open and not opener_left.is_set()
            body = Steps(1)
            run = runs.start(body)
            await body.step(1)
            await run.done.wait()

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(opener)
            tg.start_soon(guest)
            await guest_in.wait()
            await anyio.wait_all_tasks_blocked()
            assert not opener_left.is_set()  # it waits for the guest
            guest_may_leave.set()
    assert opener_left.is_set() and not runs.is_open


# ── through a host: chains are runs of the host ─────────────────────────────────

SLEEP = [{"node_id": "nap", "kind": "tool", "name": "sleep", "input": {"seconds": 30}}]


@pytest.mark.asyncio
async def test_a_chain_is_a_run_of_the_host_and_its_connection_dropping_cancels_it() -> None:
    host = Host(HostConfig(tools=("conformance",)))
    with anyio.fail_after(WAIT):
        async with host.running():
            async with open_memory_client(host) as client:
                session_id = await handshaken(client)
                client.send(ChainRequest(id="long", nodes=SLEEP, entry_node="nap"))
                start = await client.receive()
                assert isinstance(start, ChainEvent) and (start.seq, start.phase) == (1, "start")
                [run] = list(host.runs)
                assert run.key == (session_id, "long") and run.capability == "chains"
                assert run.sink.position == 1 and run.sink.attached
                [conn] = host.connections
                assert not conn.closing
            # the client left: the connection detached the run, which was cancelled
            assert run.done.is_set() and run.sink.position == 3  # its error event + resp
            assert (len(host.runs), host.runs.listed) == (0, 0)


@pytest.mark.asyncio
async def test_a_chain_finishing_leaves_the_registry_empty_and_its_frames_in_seq_order(
) -> None:
    host = Host(HostConfig(tools=("conformance",)))
    chain = [{"node_id": "a", "kind": "tool", "name": "echo", "input": {"x": 1}}]
    with anyio.fail_after(WAIT):
        async with open_memory_client(host) as client:
            await handshaken(client)
            client.send(ChainRequest(id="quick", nodes=chain, entry_node="a"))
            got = [await client.receive() for _ in range(3)]
            client.send(Ping(id="after"))
            await client.receive()
            assert (len(host.runs), host.runs.listed) == (0, 0)
    assert [m.seq for m in got if isinstance(m, ChainEvent)] == [1, 2]
    assert isinstance(got[-1], ChainResponse) and got[-1].success


@pytest.mark.asyncio
async def test_a_run_waits_while_its_outbox_is_over_the_mark_and_never_when_detached() -> None:
    from a2e_host.runtime.outbox import Outbox

    runs, outbox = registry(), Outbox(high_water=2)
    body = Steps(3)
    through = anyio.Event()

    async def paced(run: Run) -> None:
        await body(run)
        await run.sink.wait_writable()
        through.set()

    with anyio.fail_after(WAIT):
        async with runs.open():
            run = runs.start(paced, policy=DetachPolicy.KEEP, outbox=outbox)
            for n in (1, 2, 3):
                await body.step(n)
            await anyio.wait_all_tasks_blocked()
            assert outbox.full and not through.is_set()  # 3 queued, the mark is 2
            await outbox.receive_batch(max_frames=1)
            await run.done.wait()
            assert through.is_set() and not outbox.full and len(outbox) == 2

            again = Steps(3)
            kept = runs.start(again, policy=DetachPolicy.KEEP, outbox=Outbox(high_water=1))
            await again.step(1)
            await again.step(2)
            kept.detach()
            await kept.sink.wait_writable()  # detached: nobody to wait for
            await again.step(3)
            await kept.done.wait()


@pytest.mark.asyncio
async def test_a_stray_cancel_out_of_a_run_is_its_error_and_other_runs_go_on() -> None:
    runs, outbox = registry(), Frames()
    other = Steps(1)

    async def awaits_a_cancelled_future(run: Run) -> None:
        future = asyncio.get_running_loop().create_future()
        future.cancel()  # something else cancelled what the run awaited
        await future

    with anyio.fail_after(WAIT):
        async with runs.open():
            running = runs.start(other, key=("s2", "r1"), outbox=Frames())
            run = runs.start(awaits_a_cancelled_future, key=("s1", "r1"),
                             capability="chains", outbox=outbox)
            await run.done.wait()
            other.go[0].set()
            await running.done.wait()
    [error] = [chain_codec.decode(f) for f in outbox.frames]
    assert isinstance(error, ErrorMessage)
    assert (error.req_id, error.code, error.capability_name) == ("r1", "runtime_error", "chains")
    assert other.sent[0].is_set() and not other.cancelled.is_set()
