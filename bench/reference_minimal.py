"""Reference 1: a hand-written minimal asyncio scheduler — the yardstick to beat.

Design (README "hand-written minimal asyncio scheduler"): readiness counters per node,
compiled JMESPath expressions cached by text (``common.compile_expr``), one asyncio task
per ready node, a pool of ``max_map_concurrency`` worker tasks per map node, msgspec
structs for the request, every ``chain/event`` and the ``chain/resp``; events go to an
in-memory sink (any ``Callable[[bytes], None]``).

Semantics: PROTOCOL.md §3 (context: ``input``, finished nodes as ``{output, status}``,
``output`` of the activating node, ``item``/``_item``/``index`` in a map, ``error`` in a
handler), §4 (control and data edges, readiness, skip propagation), §5 (events with
``seq`` from 1, ``final_output`` of the last terminal node that is done, ``nodes_run``).
``fast=True`` is the README's variant "with a fast path for plain dotted paths".
"""

from __future__ import annotations

import asyncio
import time
from collections import ChainMap
from collections.abc import Callable
from typing import Any

from bench.common import (
    ASYNC_TOOLS,
    DATA,
    ENCODER,
    FALSE,
    NEXT,
    ONERR,
    REQUEST_DECODER,
    TRUE,
    ChainEvent,
    ChainInvalid,
    ChainRequest,
    ChainResponse,
    IdMaker,
    Plan,
    final_output,
    invalid_response,
)


async def run_request(
    request: bytes,
    *,
    sink: Callable[[bytes], None],
    tools: dict[str, Any] = ASYNC_TOOLS,
    fast: bool = False,
    max_map_concurrency: int = 64,
) -> bytes:
    """Run one encoded ``chain/req``; events go to ``sink``; returns the encoded ``chain/resp``."""
    t0 = time.perf_counter()
    req = REQUEST_DECODER.decode(request)
    try:
        plan = Plan(req, tools, fast)
    except ChainInvalid as exc:
        return invalid_response(req, exc, t0)
    return await _Run(req, plan, tools, sink, max_map_concurrency).run(t0)


def _truthy(v: Any) -> bool:
    return not (v is None or v is False or v == "" or v == [] or v == {})


class _MapItemFailed(Exception):
    def __init__(self, index: int, exc: BaseException) -> None:
        super().__init__(f"map item {index} failed: {exc}")
        self.index = index


class _Run:
    def __init__(self, req: ChainRequest, plan: Plan, tools: dict[str, Any],
                 sink: Callable[[bytes], None], max_map: int) -> None:
        n = len(plan.nodes)
        self.req, self.plan, self.tools, self.sink, self.max_map = req, plan, tools, sink, max_map
        self.remaining = [len(p) for p in plan.preds]
        self.ctl_fired = [0] * n
        self.data_fired = [False] * n
        self.act_out: list[Any] = [None] * n
        self.err_ctx: list[Any] = [None] * n
        self.status = [""] * n
        self.outputs: list[Any] = [None] * n
        self.ctx: dict[str, Any] = {"input": req.initial_input}
        self.left = plan.graph_nodes
        self.tasks: set[asyncio.Task[None]] = set()
        self.finished = asyncio.get_running_loop().create_future()
        self.seq = 0
        self.new_id = IdMaker()
        self.failure: dict[str, Any] | None = None
        self.nodes_run = 0

    # ---------------------------------------------------------------- events
    def emit(self, node_id: str, phase: str, output: Any = None, error: str = "") -> None:
        if self.req.streaming:
            self.seq += 1
            self.sink(ENCODER.encode(ChainEvent(
                id=self.new_id(), ts=time.time(), req_id=self.req.id, node_id=node_id,
                phase=phase, output=output, error=error, seq=self.seq)))

    # ---------------------------------------------------------------- scheduling
    async def run(self, t0: float) -> bytes:
        for i in self.plan.roots:
            self.start(i)
        try:
            async with asyncio.timeout(self.req.timeout):
                await self.finished
        except TimeoutError:
            self.failure = {"code": "timeout", "message": "chain timed out", "node_id": "",
                            "retryable": True, "details": {}}
        if self.tasks:  # abort / timeout: cancel the rest; each emits its error event
            for t in self.tasks:
                t.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
        plan, status = self.plan, self.status
        return ENCODER.encode(ChainResponse(
            id=self.new_id(), ts=time.time(), req_id=self.req.id, chain_id=self.req.chain_id,
            success=self.failure is None,
            outputs={plan.ids[i]: o for i, o in enumerate(self.outputs) if status[i] == "done"},
            final_output=final_output(plan, status, self.outputs),
            duration_ms=int((time.perf_counter() - t0) * 1000),
            nodes_run=self.nodes_run, error=self.failure))

    def start(self, i: int) -> None:
        self.status[i] = "run"
        self.nodes_run += 1
        act = self.act_out[i] if self.ctl_fired[i] == 1 else None
        task = asyncio.create_task(self.run_node(i, act))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def propagate(self, i: int, how: str, cond: bool = False) -> None:
        """Source ``i`` finished: ``how`` is done | skip | skipped-error | handled-error."""
        plan, remaining = self.plan, self.remaining
        work = [(i, how)]
        while work:
            src, how = work.pop()
            out = self.outputs[src]
            for j, kind in plan.succ[src]:
                remaining[j] -= 1
                if how == "done" or how == "skipped-error":
                    if kind == DATA:
                        self.data_fired[j] = True
                    elif kind == NEXT or (kind == TRUE and cond) or (kind == FALSE and not cond):
                        self.ctl_fired[j] += 1
                        self.act_out[j] = out
                elif how == "handled-error" and kind == ONERR:
                    self.ctl_fired[j] += 1
                    self.err_ctx[j] = self.err_ctx[src]
                if remaining[j] == 0 and self.failure is None:
                    fired = self.ctl_fired[j] if plan.has_control_in[j] else self.data_fired[j]
                    if fired:
                        self.start(j)
                    else:  # decided, nothing fired: skip, and propagate the skip
                        nid = plan.ids[j]
                        self.status[j] = "skip"
                        self.ctx[nid] = {"output": None, "status": "skip"}
                        self.emit(nid, "skip")
                        self.finish_one()
                        work.append((j, "skip"))

    def finish_one(self) -> None:
        self.left -= 1
        if self.left == 0 and not self.finished.done():
            self.finished.set_result(None)

    # ---------------------------------------------------------------- running a node
    def resolve(self, static: dict[str, Any], inputs: list[tuple[str, Any]], ctx: Any) -> Any:
        inp = dict(static) if static else {}
        for key, ev in inputs:
            inp[key] = ev.search(ctx)
        return inp

    async def run_node(self, i: int, act: Any) -> None:
        plan = self.plan
        nd = plan.nodes[i]
        nid = nd.node_id
        self.emit(nid, "start")
        cond = False
        try:
            ctx: Any = self.ctx
            if plan.uses_output[i] or plan.uses_error[i]:
                ctx = ChainMap({"output": act, "error": self.err_ctx[i]}, ctx)
            if nd.kind == "tool":
                result = await self.tools[nd.name](self.resolve(nd.input, plan.inputs[i], ctx))
            elif nd.kind == "branch":
                cond = _truthy(plan.cond[i].search(ctx))
                result = {"condition": cond, "taken": nd.true_node if cond else nd.false_node}
            else:
                result = await self.run_map(i, ctx)
        except asyncio.CancelledError:
            self.status[i] = "error"
            self.emit(nid, "error", error="cancelled")
            raise
        except Exception as exc:
            self.node_failed(i, exc)
            return
        self.outputs[i] = result
        self.status[i] = "done"
        self.ctx[nid] = {"output": result, "status": "done"}
        self.emit(nid, "done", output=result)
        self.finish_one()
        self.propagate(i, "done", cond)

    def node_failed(self, i: int, exc: Exception) -> None:
        nd = self.plan.nodes[i]
        self.status[i] = "error"
        self.ctx[nd.node_id] = {"output": None, "status": "error"}
        self.emit(nd.node_id, "error", error=str(exc))
        self.finish_one()
        if nd.on_error == "skip":
            self.propagate(i, "skipped-error")
        elif nd.on_error != "abort":
            self.err_ctx[i] = {"node_id": nd.node_id, "code": "chain_node_error",
                               "message": str(exc)}
            self.propagate(i, "handled-error")
        elif self.failure is None:
            details = {"index": exc.index} if isinstance(exc, _MapItemFailed) else {}
            self.failure = {"code": "chain_node_error", "message": str(exc),
                            "node_id": nd.node_id, "retryable": False, "details": details}
            if not self.finished.done():
                self.finished.set_result(None)

    async def run_map(self, i: int, ctx: Any) -> list[Any]:
        plan = self.plan
        items = plan.items[i].search(ctx)
        if not isinstance(items, list):
            raise TypeError(f"items_path of {plan.ids[i]!r} did not give a list")
        t = plan.tmpl[i]
        tnd = plan.nodes[t]
        tool, inputs, static, tid = self.tools[tnd.name], plan.inputs[t], tnd.input, tnd.node_id
        skip_errors = tnd.on_error == "skip"
        results: list[Any] = [None] * len(items)
        it = iter(enumerate(items))
        emit, resolve = self.emit, self.resolve

        async def worker() -> None:
            for k, item in it:
                name = f"{tid}[{k}]"
                emit(name, "start")
                c = ChainMap({"item": item, "_item": item, "index": k}, ctx)
                try:
                    out = await tool(resolve(static, inputs, c))
                except asyncio.CancelledError:
                    emit(name, "error", error="cancelled")
                    raise
                except Exception as exc:
                    emit(name, "error", error=str(exc))
                    if skip_errors:
                        continue
                    raise _MapItemFailed(k, exc) from exc
                results[k] = out
                emit(name, "done", output=out)

        n_workers = min(self.max_map, len(items))
        if n_workers:
            try:
                async with asyncio.TaskGroup() as tg:
                    for _ in range(n_workers):
                        tg.create_task(worker())
            except BaseExceptionGroup as eg:
                raise eg.exceptions[0] from None
        return results
