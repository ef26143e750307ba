"""Optional peer implementations: the same chains run by chainweaver and by langgraph.

Both are measured exactly like the references (``bench.measure``): request bytes in,
``chain/event`` frames into the sink, the encoded ``chain/resp`` out. Only the *scheduling*
is the library's; the rest is shared with the references so the comparison stays about
execution design:

- decoding, validation and the graph come from ``bench.common`` (``REQUEST_DECODER``,
  ``Plan``): every edge of the plan (data dependency or ``next_node``) becomes an edge of
  the library's graph, built per request (the request carries the graph);
- each node's ``input_map`` is evaluated with the same compiled expressions
  (``common.compile_expr``) against the library's own state, and the same ``bench`` tools
  (``common.ASYNC_TOOLS``: ``noop``, ``sleep_ms``) run;
- the library emits no ``chain/event`` frames of its own, so the node callable emits
  ``start`` before and ``done`` after its tool, with ``seq`` 1, 2, 3, … — the events the
  harness verifies (``workloads.check_response``) are therefore checked unchanged.

``chainweaver`` (0.14.1): a ``DAGFlow`` registered per request and run with
``FlowExecutor.execute_flow_async`` (the async lane), ``max_step_concurrency`` =
``HOST_MAX_CONCURRENCY``. A step's ``input_mapping`` names the context keys it reads (its
predecessors, ``input``) plus a literal node index; its ``output_mapping`` stores the
result under the node id. One registered ``Tool`` dispatches to the node. A map has no
construct in chainweaver: its items become one step each (a DAG level run concurrently),
so ``items_path`` must be computable before the run (read only ``input``).

``langgraph`` (1.2.24): a ``StateGraph`` compiled per request; ``add_edge([preds], node)``
for joins, ``START`` for roots; outputs merged into one state dict by a reducer; a map is
a node whose conditional edge returns one ``Send`` per item to the template node, followed
by a collector node.

Constructs neither peer models here (branch nodes, ``on_error`` other than ``abort``, bare
``output``/``error`` in expressions, a map template that is not a tool) raise
:class:`Unsupported`; the harness reports the workload as "unsupported".
"""

from __future__ import annotations

import contextvars
import importlib.util
import os
import time
from collections import ChainMap
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypedDict

from bench.common import (
    ASYNC_TOOLS,
    ENCODER,
    REQUEST_DECODER,
    ChainEvent,
    ChainInvalid,
    ChainRequest,
    ChainResponse,
    IdMaker,
    Plan,
    final_output,
    invalid_response,
)
from bench.impl_ours import Unavailable

PEERS = ("chainweaver", "langgraph")
Call = Callable[[bytes, Callable[[bytes], None]], Awaitable[bytes]]


def installed(impl: str) -> bool:
    """Whether the library behind peer ``impl`` can be found (without importing it).

    ``A2E_BENCH_NO_PEERS=1`` answers False for every peer (to exercise the fallback).
    """
    if os.environ.get("A2E_BENCH_NO_PEERS") == "1":
        return False
    try:
        return importlib.util.find_spec(impl) is not None
    except (ImportError, ValueError):  # a blocked import: sys.modules[impl] is None
        return False


class Unsupported(Exception):
    """The peer cannot express this chain faithfully (the reason is the message)."""


# --------------------------------------------------------------------------- shared


class _Run:
    """One request: decoded, validated, with an event emitter and the response builder."""

    def __init__(self, request: bytes, sink: Callable[[bytes], None]) -> None:
        self.t0 = time.perf_counter()
        self.req: ChainRequest = REQUEST_DECODER.decode(request)
        self.sink = sink
        self.seq = 0
        self.new_id = IdMaker()
        self.plan: Plan | None = None
        self.invalid: bytes | None = None
        try:
            self.plan = Plan(self.req, ASYNC_TOOLS)
        except ChainInvalid as exc:
            self.invalid = invalid_response(self.req, exc, self.t0)
            return
        p = self.plan
        for i, nd in enumerate(p.nodes):
            if nd.kind == "branch":
                raise Unsupported(f"node {nd.node_id!r}: branch nodes are not modelled")
            if nd.on_error != "abort":
                raise Unsupported(f"node {nd.node_id!r}: on_error {nd.on_error!r} not modelled")
            if p.uses_output[i] or p.uses_error[i]:
                raise Unsupported(f"node {nd.node_id!r}: bare output/error not modelled")
            if nd.kind == "map" and p.nodes[p.tmpl[i]].kind != "tool":
                raise Unsupported(f"node {nd.node_id!r}: map template must be a tool")

    def emit(self, node_id: str, phase: str, output: Any = None) -> None:
        if self.req.streaming:
            self.seq += 1
            self.sink(ENCODER.encode(ChainEvent(
                id=self.new_id(), ts=time.time(), req_id=self.req.id, node_id=node_id,
                phase=phase, output=output, seq=self.seq)))

    async def tool(self, i: int, ctx: Any) -> Any:
        """Run tool node ``i`` (or a map template) with its inputs resolved against ``ctx``."""
        assert self.plan is not None
        nd = self.plan.nodes[i]
        inp = dict(nd.input)
        for key, ev in self.plan.inputs[i]:
            inp[key] = ev.search(ctx)
        return await ASYNC_TOOLS[nd.name](inp)

    def response(self, outputs: dict[str, Any], failure: dict[str, Any] | None) -> bytes:
        p = self.plan
        assert p is not None
        status = ["done" if nid in outputs else "" for nid in p.ids]
        values = [outputs.get(nid) for nid in p.ids]
        return ENCODER.encode(ChainResponse(
            id=self.new_id(), ts=time.time(), req_id=self.req.id, chain_id=self.req.chain_id,
            success=failure is None, outputs=outputs,
            final_output=final_output(p, status, values) if failure is None else None,
            duration_ms=int((time.perf_counter() - self.t0) * 1000),
            nodes_run=p.graph_nodes if failure is None else 0, error=failure))


def _failure(message: str) -> dict[str, Any]:
    return {"code": "chain_node_error", "message": message, "node_id": "",
            "retryable": False, "details": {}}


def _preds(plan: Plan, i: int) -> list[str]:
    return [plan.ids[j] for j, _ in plan.preds[i]]


def load(impl: str) -> Call:
    """Return ``async f(request, sink) -> response`` for ``impl`` (one of :data:`PEERS`).

    Raises:
        Unavailable: the library is not installed (the harness reports "unavailable").
    """
    if not installed(impl):
        raise Unavailable(f"{impl} is not installed (pip install the bench's peers extra)")
    if impl == "chainweaver":
        return _chainweaver()
    if impl == "langgraph":
        return _langgraph()
    raise ValueError(f"unknown peer {impl!r}; one of {', '.join(PEERS)}")


# --------------------------------------------------------------------------- chainweaver


def _chainweaver() -> Call:
    try:
        from chainweaver import DAGFlow, DAGFlowStep, FlowExecutor, FlowRegistry, Tool
        from pydantic import BaseModel, ConfigDict
    except ImportError as exc:
        raise Unavailable(f"chainweaver not importable: {exc}") from exc
    import logging

    from bench.workloads import HOST_MAX_CONCURRENCY

    logging.getLogger("chainweaver").setLevel(logging.WARNING)
    current: contextvars.ContextVar[dict[int, Callable[[dict[str, Any]], Awaitable[Any]]]]
    current = contextvars.ContextVar("a2e_bench_chainweaver_steps")

    class StepInput(BaseModel):
        model_config = ConfigDict(extra="allow")
        a2e_step: int

    class StepOutput(BaseModel):
        value: Any = None

    async def dispatch(inp: StepInput) -> dict[str, Any]:
        return {"value": await current.get()[inp.a2e_step](inp.__pydantic_extra__ or {})}

    registry = FlowRegistry()
    executor = FlowExecutor(registry, max_step_concurrency=HOST_MAX_CONCURRENCY)
    executor.register_tool(Tool(name="a2e_step", description="one a2e chain node",
                                input_schema=StepInput, output_schema=StepOutput, fn=dispatch))

    async def call(request: bytes, sink: Callable[[bytes], None]) -> bytes:
        run = _Run(request, sink)
        if run.invalid is not None:
            return run.invalid
        plan = run.plan
        assert plan is not None
        fns: dict[int, Callable[[dict[str, Any]], Awaitable[Any]]] = {}
        steps: list[Any] = []
        collect: dict[str, tuple[str, int]] = {}  # map id -> (template id, item count)

        def step(sid: str, deps: list[str], reads: list[str], fn: Any) -> None:
            k = len(steps)
            fns[k] = fn
            mapping: dict[str, Any] = {"a2e_step": k} | {r: r for r in reads}
            steps.append(DAGFlowStep(tool_name="a2e_step", step_id=sid, depends_on=deps,
                                     input_mapping=mapping, output_mapping={sid: "value"}))

        for i, nd in enumerate(plan.nodes):
            if plan.is_template[i]:
                continue
            nid, deps = nd.node_id, _preds(plan, i)
            if nd.kind == "tool":
                async def node(ctx: dict[str, Any], i: int = i, nid: str = nid) -> Any:
                    run.emit(nid, "start")
                    out = await run.tool(i, ctx)
                    wrapped = {"output": out, "status": "done"}
                    run.emit(nid, "done", output=out)
                    return wrapped

                step(nid, deps, ["input", *deps], node)
                continue
            # map: items must be known before the DAG is built
            if deps:
                raise Unsupported(f"map {nid!r} reads other nodes; chainweaver needs the "
                                  "item count before the run")
            items = plan.items[i].search({"input": run.req.initial_input})
            if not isinstance(items, list):
                raise Unsupported(f"map {nid!r}: items_path did not give a list")
            t = plan.tmpl[i]
            tid = plan.ids[t]
            opener = f"{nid}$start"

            async def start(ctx: dict[str, Any], nid: str = nid) -> Any:
                run.emit(nid, "start")
                return None

            step(opener, [], [], start)
            item_ids = []
            for k, item in enumerate(items):
                async def each(ctx: dict[str, Any], k: int = k, item: Any = item,
                               name: str = f"{tid}[{k}]", t: int = t) -> Any:
                    run.emit(name, "start")
                    out = await run.tool(t, ChainMap(
                        {"item": item, "_item": item, "index": k}, ctx))
                    run.emit(name, "done", output=out)
                    return out

                item_ids.append(f"{tid}[{k}]")
                step(item_ids[-1], [opener], ["input"], each)

            async def gather(ctx: dict[str, Any], nid: str = nid,
                             item_ids: list[str] = item_ids) -> Any:
                out = [ctx[x] for x in item_ids]
                run.emit(nid, "done", output=out)
                return {"output": out, "status": "done"}

            step(nid, item_ids, item_ids, gather)
            collect[nid] = (tid, len(items))

        name = "a2e-chain"  # replaced per request: the registry keeps no old graphs
        registry.register_flow(DAGFlow(name=name, version="1.0.0", description="a2e chain",
                                       steps=steps, on_context_collision="error"),
                               overwrite=True)
        token = current.set(fns)
        try:
            result = await executor.execute_flow_async(
                name, {"input": run.req.initial_input}, deadline=time.time() + run.req.timeout)
        finally:
            current.reset(token)
        if not result.success:
            errs = [r.error_message for r in result.execution_log if not r.success]
            return run.response({}, _failure(f"chainweaver flow failed: {errs[:1]}"))
        ctx = result.final_output or {}
        outputs = {nid: ctx[nid]["output"] for nid in plan.ids
                   if nid in ctx and not plan.is_template[plan.index[nid]]}
        return run.response(outputs, None)

    return call


# --------------------------------------------------------------------------- langgraph


def _merge(a: dict[Any, Any], b: dict[Any, Any]) -> dict[Any, Any]:
    """State reducer: node outputs accumulate in one dict (updated in place, O(1) each)."""
    a.update(b)
    return a


class _State(TypedDict, total=False):
    """LangGraph state: ``out`` = {"input": ..., node_id: {"output", "status"}}, ``mapped`` =
    map results by item index. Module level, as LangGraph resolves the annotations."""

    out: Annotated[dict[str, Any], _merge]
    mapped: Annotated[dict[int, Any], _merge]


def _langgraph() -> Call:
    try:
        from langgraph.graph import END, START, StateGraph
        from langgraph.types import Send
    except ImportError as exc:
        raise Unavailable(f"langgraph not importable: {exc}") from exc

    async def call(request: bytes, sink: Callable[[bytes], None]) -> bytes:
        run = _Run(request, sink)
        if run.invalid is not None:
            return run.invalid
        plan = run.plan
        assert plan is not None
        g: Any = StateGraph(_State)
        for i, nd in enumerate(plan.nodes):
            if plan.is_template[i]:
                continue
            nid = nd.node_id
            if nd.kind == "tool":
                async def node(state: _State, i: int = i, nid: str = nid) -> dict[str, Any]:
                    run.emit(nid, "start")
                    out = await run.tool(i, state["out"])
                    run.emit(nid, "done", output=out)
                    return {"out": {nid: {"output": out, "status": "done"}}}

                g.add_node(nid, node)
                last = nid
            else:
                t = plan.tmpl[i]
                tid = plan.ids[t]
                items_ev = plan.items[i]

                async def opener(state: _State, nid: str = nid,
                                 items_ev: Any = items_ev) -> dict[str, Any]:
                    run.emit(nid, "start")
                    items = items_ev.search(state["out"])
                    if not isinstance(items, list):
                        raise TypeError(f"items_path of {nid!r} did not give a list")
                    return {"out": {f"{nid}$items": items}}

                def fan_out(state: _State, nid: str = nid, tid: str = tid) -> list[Any]:
                    ctx = state["out"]
                    return [Send(tid, {"item": x, "index": k, "ctx": ctx})
                            for k, x in enumerate(ctx[f"{nid}$items"])]

                async def each(arg: dict[str, Any], t: int = t, tid: str = tid) -> Any:
                    k, item = arg["index"], arg["item"]
                    run.emit(f"{tid}[{k}]", "start")
                    out = await run.tool(t, ChainMap(
                        {"item": item, "_item": item, "index": k}, arg["ctx"]))
                    run.emit(f"{tid}[{k}]", "done", output=out)
                    return {"mapped": {k: out}}

                async def closer(state: _State, nid: str = nid) -> dict[str, Any]:
                    mapped = state.get("mapped", {})
                    out = [mapped[k] for k in range(len(state["out"][f"{nid}$items"]))]
                    run.emit(nid, "done", output=out)
                    return {"out": {nid: {"output": out, "status": "done"}}}

                g.add_node(f"{nid}$open", opener)
                g.add_node(tid, each)
                g.add_node(nid, closer)
                g.add_conditional_edges(f"{nid}$open", fan_out, [tid])
                g.add_edge(tid, nid)
                last = f"{nid}$open"
            preds = _preds(plan, i)
            if not preds:
                g.add_edge(START, last)
            else:
                g.add_edge(preds if len(preds) > 1 else preds[0], last)
            if not plan.succ[i]:
                g.add_edge(nid, END)
        graph = g.compile()
        state = await graph.ainvoke(
            {"out": {"input": run.req.initial_input}, "mapped": {}},
            {"recursion_limit": len(plan.nodes) + 10})
        ctx = state["out"]
        outputs = {nid: ctx[nid]["output"] for nid in plan.ids if nid in ctx}
        return run.response(outputs, None)

    return call
