"""Reference 2: the spec's reference execution design (seed 000, "Execution Model").

    1. Build node index: map node_id -> ChainNode
    2. Track state: completed, running, failed sets
    3. Evaluate readiness: a node can run when all its dependencies are finished
    4. Resolve inputs: merge static input with resolved input_map values
    5. Parallel execution: ready nodes spawn on daemon threads
    6. Poll loop: check for newly-ready nodes every 10 ms

Implemented as written, without handicaps: the poll loop waits on a ``threading.Event``
with a 10 ms timeout, so a finishing node wakes it at once (the README's separate row
"each level waits for a poll tick" is the handicapped variant, ``tick_wait=True`` here).
Each pass scans the pending nodes for readiness — that scan *is* the design. A map node's
thread fans its items out to a pool of ``max_map_concurrency`` worker threads (or, with
``thread_per_item=True``, a daemon thread per item, at most that many alive — the reading
the README's figures suggest: its spec row costs as much per map item as per node). Expressions are
compiled once through the same cache as the minimal reference, the graph and readiness
rules (PROTOCOL.md §4) are the same, events and the response are the same msgspec structs;
only the execution design differs. Tools are blocking callables (``time.sleep``).
"""

from __future__ import annotations

import threading
import time
from collections import ChainMap
from collections.abc import Callable
from typing import Any

from bench.common import (
    DATA,
    ENCODER,
    FALSE,
    NEXT,
    ONERR,
    REQUEST_DECODER,
    SYNC_TOOLS,
    TRUE,
    ChainEvent,
    ChainInvalid,
    ChainResponse,
    IdMaker,
    Plan,
    final_output,
    invalid_response,
)

POLL_INTERVAL = 0.010  # seconds


def _truthy(v: Any) -> bool:
    return not (v is None or v is False or v == "" or v == [] or v == {})


def run_request(
    request: bytes,
    *,
    sink: Callable[[bytes], None],
    tools: dict[str, Any] = SYNC_TOOLS,
    max_map_concurrency: int = 64,
    tick_wait: bool = False,
    thread_per_item: bool = False,
) -> bytes:
    """Run one encoded ``chain/req`` (blocking); events go to ``sink``; returns the chain/resp."""
    t0 = time.perf_counter()
    req = REQUEST_DECODER.decode(request)
    try:
        plan = Plan(req, tools)
    except ChainInvalid as exc:
        return invalid_response(req, exc, t0)

    nodes, ids, preds = plan.nodes, plan.ids, plan.preds
    n = len(nodes)
    completed: set[int] = set()
    running: set[int] = set()
    failed: set[int] = set()
    skipped: set[int] = set()
    status = [""] * n
    outputs: list[Any] = [None] * n
    err_ctx: list[Any] = [None] * n
    ctx: dict[str, Any] = {"input": req.initial_input}
    lock = threading.Lock()
    wake = threading.Event()
    new_id = IdMaker()
    seq = 0
    failure: list[dict[str, Any]] = []
    nodes_run = 0

    def emit(node_id: str, phase: str, output: Any = None, error: str = "") -> None:
        nonlocal seq
        if req.streaming:
            with lock:
                seq += 1
                sink(ENCODER.encode(ChainEvent(
                    id=new_id(), ts=time.time(), req_id=req.id, node_id=node_id, phase=phase,
                    output=output, error=error, seq=seq)))

    def resolve(nd_input: dict[str, Any], inputs: list[tuple[str, Any]], c: Any) -> Any:
        merged = dict(nd_input)
        for key, ev in inputs:
            merged[key] = ev.search(c)
        return merged

    def run_map(i: int, c: Any) -> list[Any]:
        items = plan.items[i].search(c)
        if not isinstance(items, list):
            raise TypeError(f"items_path of {ids[i]!r} did not give a list")
        t = plan.tmpl[i]
        tnd = nodes[t]
        tool, inputs, tid = tools[tnd.name], plan.inputs[t], tnd.node_id
        results: list[Any] = [None] * len(items)
        it = iter(enumerate(items))
        errors: list[BaseException] = []

        def do_item(k: int, item: Any) -> None:
            name = f"{tid}[{k}]"
            emit(name, "start")
            try:
                out = tool(resolve(tnd.input, inputs,
                                   ChainMap({"item": item, "_item": item, "index": k}, c)))
            except Exception as exc:
                emit(name, "error", error=str(exc))
                if tnd.on_error != "skip":
                    errors.append(exc)
                return
            results[k] = out
            emit(name, "done", output=out)

        if thread_per_item:  # a daemon thread per item, at most max_map_concurrency alive
            gate = threading.BoundedSemaphore(max_map_concurrency)

            def one(k: int, item: Any) -> None:
                try:
                    do_item(k, item)
                finally:
                    gate.release()

            threads = []
            for k, item in it:
                gate.acquire()
                if errors or failure:
                    gate.release()
                    break
                th = threading.Thread(target=one, args=(k, item), daemon=True)
                th.start()
                threads.append(th)
            for th in threads:
                th.join()
        else:  # a pool of max_map_concurrency daemon threads pulling items

            def item_worker() -> None:
                for k, item in it:
                    if errors or failure:
                        return
                    do_item(k, item)

            workers = [threading.Thread(target=item_worker, daemon=True)
                       for _ in range(min(max_map_concurrency, len(items)))]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
        if errors:
            raise errors[0]
        return results

    def node_thread(i: int, act: Any) -> None:
        nd = nodes[i]
        emit(nd.node_id, "start")
        try:
            c: Any = ctx
            if plan.uses_output[i] or plan.uses_error[i]:
                c = ChainMap({"output": act, "error": err_ctx[i]}, ctx)
            if nd.kind == "tool":
                result = tools[nd.name](resolve(nd.input, plan.inputs[i], c))
            elif nd.kind == "branch":
                cond = _truthy(plan.cond[i].search(c))
                result = {"condition": cond, "taken": nd.true_node if cond else nd.false_node}
            else:
                result = run_map(i, c)
        except Exception as exc:
            ctx[nd.node_id] = {"output": None, "status": "error"}
            emit(nd.node_id, "error", error=str(exc))
            with lock:
                if nd.on_error not in ("abort", "skip"):
                    err_ctx[i] = {"node_id": nd.node_id, "code": "chain_node_error",
                                  "message": str(exc)}
                elif nd.on_error == "abort" and not failure:
                    failure.append({"code": "chain_node_error", "message": str(exc),
                                    "node_id": nd.node_id, "retryable": False, "details": {}})
                status[i] = "error"
                failed.add(i)
                running.discard(i)
            wake.set()
            return
        outputs[i] = result
        ctx[nd.node_id] = {"output": result, "status": "done"}
        emit(nd.node_id, "done", output=result)
        with lock:
            status[i] = "done"
            completed.add(i)
            running.discard(i)
        wake.set()

    def fired(seen: list[str], src: int, kind: int) -> bool:
        st = nodes[src]
        if seen[src] == "done":
            if kind == DATA or kind == NEXT:
                return True
            if kind == TRUE or kind == FALSE:
                return bool(outputs[src]["condition"] == (kind == TRUE))
            return False
        if seen[src] == "error":
            return kind == ONERR or (st.on_error == "skip" and kind in (DATA, NEXT))
        return False

    pending = [i for i in range(n) if not plan.is_template[i]]
    deadline = time.monotonic() + req.timeout
    while pending or running:
        wake.clear()
        # tick_wait: readiness from the state at the start of the pass, so every level of
        # the graph waits for the next tick (the README's handicapped row).
        seen = list(status) if tick_wait else status
        still: list[int] = []
        for i in pending:
            if failure:
                break
            # readiness: every dependency is finished (completed, failed or skipped)
            if all(seen[s] in ("done", "error", "skip") for s, _ in preds[i]):
                fires = [(s, k) for s, k in preds[i] if fired(seen, s, k)]
                if plan.has_control_in[i]:
                    ctl = [(s, k) for s, k in fires if k != DATA]
                    go = bool(ctl)
                else:
                    ctl, go = [], bool(fires) or not preds[i]
                if go:
                    act = outputs[ctl[0][0]] if len(ctl) == 1 else None
                    if len(ctl) == 1 and ctl[0][1] == ONERR:
                        err_ctx[i] = err_ctx[ctl[0][0]]
                    with lock:
                        running.add(i)
                    nodes_run += 1
                    threading.Thread(target=node_thread, args=(i, act), daemon=True).start()
                else:
                    status[i] = "skip"
                    skipped.add(i)
                    ctx[ids[i]] = {"output": None, "status": "skip"}
                    emit(ids[i], "skip")
                    wake.set()  # a skip can make others ready: rescan at once
            else:
                still.append(i)
        pending = still
        if failure and not running:
            break
        if time.monotonic() > deadline:
            failure.append({"code": "timeout", "message": "chain timed out", "node_id": "",
                            "retryable": True, "details": {}})
            break  # daemon threads are abandoned, as the spec says
        if pending or running:
            if tick_wait:
                time.sleep(POLL_INTERVAL)
            else:
                wake.wait(POLL_INTERVAL)

    with lock:
        return ENCODER.encode(ChainResponse(
            id=new_id(), ts=time.time(), req_id=req.id, chain_id=req.chain_id,
            success=not failure,
            outputs={ids[i]: outputs[i] for i in range(n) if status[i] == "done"},
            final_output=final_output(plan, status, outputs),
            duration_ms=int((time.perf_counter() - t0) * 1000),
            nodes_run=nodes_run, error=failure[0] if failure else None))
