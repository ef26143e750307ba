"""Deliberately broken variants of the host, for proving the conformance kit has teeth.

``python -m tests.support.mutant_host MUTANT serve --port 0 --tools conformance`` starts the
real CLI with one defect patched in. Each mutant names the requirement the kit must then
report as failed (``tests/conformance/test_conformance_suite.py``).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import Any

import msgspec

from a2e_host.chains import attempt, events, proc, recovery, reports, scheduler
from a2e_host.chains.messages import ChainEvent
from a2e_host.chains.typecheck import TypeChecks
from a2e_host.chains.validation import _Validator


def seq_not_incremented() -> None:
    """Every event carries seq 1."""

    def send(self: Any, node_id: str, phase: str, output: Any = None, error: str = "") -> None:
        if self.closed or not self.streaming:
            return
        self.emit(ChainEvent(req_id=self.req_id, seq=1, node_id=node_id, phase=phase,
                             output=output, error=error))

    events.EventStream.send = send  # type: ignore[method-assign]


def skip_never_sent() -> None:
    """Nodes a branch leaves behind get no ``skip`` event."""
    original = events.EventStream.send

    def send(self: Any, node_id: str, phase: str, output: Any = None, error: str = "") -> None:
        if phase != "skip":
            original(self, node_id, phase, output, error)

    events.EventStream.send = send  # type: ignore[method-assign]


def event_after_response() -> None:
    """A stray event follows the ``chain/resp``."""
    original = scheduler.ChainRunner._send_response

    def send_response(self: Any, result: Any, started: float) -> Any:
        response = original(self, result, started)
        self.config.emit(ChainEvent(req_id=self.plan.request.id, seq=self.events.seq + 1,
                                    node_id="late", phase="done"))
        return response

    scheduler.ChainRunner._send_response = send_response  # type: ignore[method-assign]


def final_output_first_terminal() -> None:
    """``final_output`` taken from the first terminal node instead of the last."""
    original = scheduler.ChainRunner._result

    def result(self: Any) -> Any:
        res = original(self)
        for t in self.plan.terminals:
            node_id = self.plan.nodes[t].node_id
            if node_id in self.outputs:
                res.final_output = self.outputs[node_id]
                break
        return res

    scheduler.ChainRunner._result = result  # type: ignore[method-assign]


def retry_ignored() -> None:
    """A node's ``retry`` never retries anything."""
    recovery.may_retry = lambda exc, retry, guarded: False  # type: ignore[assignment]


def progress_as_status() -> None:
    """Attempts are reported as further ``start`` events of kind ``status``."""
    original = events.EventStream.send_data

    def send_data(self: Any, node_id: str, phase: str, data: dict[str, Any], *,
                  kind: str = "status", output: Any = None, error: str = "") -> None:
        original(self, node_id, phase, data, kind="status", output=output, error=error)

    events.EventStream.send_data = send_data  # type: ignore[method-assign]


def cycle_accepted() -> None:
    """Cycle detection switched off."""
    _Validator.check_cycles = lambda self: None  # type: ignore[method-assign]


def static_checks_off() -> None:
    """Node inputs are no longer checked against the tools' schemas before the run."""
    TypeChecks.run = lambda self: self.warnings  # type: ignore[method-assign]


def attach_replays_a_seen_frame() -> None:
    """``chain/attach`` resends the event at ``since_seq``, which the client has already."""
    from a2e_chains import durable

    live, stored = durable.DurableRuns.attach_live, durable.DurableRuns.replay

    def attach_live(self: Any, run: Any, ctx: Any, since_seq: int, attach_id: str) -> None:
        live(self, run, ctx, max(0, since_seq - 1), attach_id)

    async def replay(self: Any, record: Any, ctx: Any, since_seq: int, attach_id: str) -> None:
        await stored(self, record, ctx, max(0, since_seq - 1), attach_id)

    durable.DurableRuns.attach_live = attach_live  # type: ignore[method-assign]
    durable.DurableRuns.replay = replay  # type: ignore[method-assign]
def detach_cancels() -> None:
    """``chain/detach`` cancels the durable run instead of leaving it running."""
    from a2e_chains import durable_handlers

    detach = durable_handlers.DurableChains._detach

    async def cancelling(self: Any, message: Any, ctx: Any) -> None:
        found = await self.durable.find(ctx.session.principal, message.run_id,
                                        message.req_id)
        await detach(self, message, ctx)
        found.handle.cancel()

    durable_handlers.DurableChains._detach = cancelling  # type: ignore[method-assign]


def tool_reports_dropped() -> None:
    """A running tool's reports never reach the wire (no ``tool/event``, no progress)."""
    reports.NodeReports._send = lambda self, kind, data: False  # type: ignore[method-assign]


def timeout_unenforced() -> None:
    """The chain's ``timeout`` is never enforced: a node overrunning it runs to its end
    and the chain succeeds (the public SDK's host checks it only between nodes)."""

    async def run_to_response(self: Any, started: float, *,
                              before_response: Any = None) -> Any:
        sent: list[Any] = []

        def respond(result: Any) -> None:
            if before_response is not None:
                before_response()
            sent.append(self._send_response(result, started))

        await self.run(None, respond)
        return sent[0]

    scheduler.ChainRunner.run_to_response = run_to_response  # type: ignore[method-assign]


def early_end_drops_work() -> None:
    """A chain that did not succeed is answered without the work done: ``outputs`` {},
    ``nodes_run`` 0, ``duration_ms`` 0 (as the SDK's timeout, cycle and catch-all
    answers are)."""
    original = scheduler.response_of

    def response_of(request: Any, result: Any, duration_ms: int) -> Any:
        response = original(request, result, duration_ms)
        if not response.success:
            response.outputs, response.nodes_run, response.duration_ms = {}, 0, 0
        return response

    scheduler.response_of = response_of  # type: ignore[assignment]


def map_template_input_dropped() -> None:
    """A map item runs its template with an empty input: the template's own ``input``
    and ``input_map`` are lost (the SDK passes ``{"item": ...}`` alone)."""
    original = attempt.resolve_input

    async def resolve_input(pnode: Any, context: Any, shown: str, scoped: Any) -> Any:
        if re.search(r"\[\d+\]$", shown):
            return {}
        return await original(pnode, context, shown, scoped)

    attempt.resolve_input = resolve_input  # type: ignore[assignment]


def map_failed_items_dropped() -> None:
    """A map's output leaves out the items that failed under ``skip`` instead of a null
    at their position."""
    original = scheduler.KIND_RUNNERS["map"]

    async def run_map(run: Any, shown: str, pnode: Any, context: Any) -> Any:
        output, extra = await original(run, shown, pnode, context)
        return [item for item in output if item is not None], extra

    scheduler.KIND_RUNNERS = {**scheduler.KIND_RUNNERS, "map": run_map}  # type: ignore[misc]


def proc_exit_code_ignored() -> None:
    """A proc node's non-zero exit never fails it (``check`` is taken as false)."""
    original = proc._parse

    def parse(args: dict[str, Any]) -> Any:
        return msgspec.structs.replace(original(args), check=False)

    proc._parse = parse  # type: ignore[assignment]


def proc_timeout_ignored() -> None:
    """A proc node's own ``timeout`` is ignored: the process runs to its end."""
    original = proc._parse

    def parse(args: dict[str, Any]) -> Any:
        return msgspec.structs.replace(original(args), timeout=None)

    proc._parse = parse  # type: ignore[assignment]


def prints_on_stdout() -> None:
    """Debug lines on stdout beside the protocol (the SDK's host prints ``line: ...``
    for every message it sends): stdout is not kept for the protocol, and a line is
    printed for every chain answered."""
    from a2e_host.transports import stdio

    stdio.protect_stdout = lambda: os.dup(1)  # type: ignore[assignment]
    original = scheduler.ChainRunner._send_response

    def send_response(self: Any, result: Any, started: float) -> Any:
        print(f"line: chain {self.plan.request.id} answered", flush=True)
        return original(self, result, started)

    scheduler.ChainRunner._send_response = send_response  # type: ignore[method-assign]


MUTANTS: dict[str, tuple[Callable[[], None], str]] = {
    "seq_not_incremented": (seq_not_incremented, "CHAIN-EVT-SEQ"),
    "skip_never_sent": (skip_never_sent, "CHAIN-EVT-LIFECYCLE"),
    "event_after_response": (event_after_response, "CHAIN-EVT-BEFORE-RESP"),
    "final_output_first_terminal": (final_output_first_terminal, "CHAIN-RESP-FINAL-OUTPUT"),
    "cycle_accepted": (cycle_accepted, "VAL-CYCLE"),
    "retry_ignored": (retry_ignored, "RECOVERY-RETRY"),
    "progress_as_status": (progress_as_status, "CHAIN-EVT-LIFECYCLE"),
    "static_checks_off": (static_checks_off, "VAL-STATIC-INFERRED"),
    "attach_replays_a_seen_frame": (attach_replays_a_seen_frame, "DURABLE-ATTACH-GAPLESS"),
    "tool_reports_dropped": (tool_reports_dropped, "TOOLS-CALL-EVENTS"),
    "detach_cancels": (detach_cancels, "DURABLE-DETACH"),
    "timeout_unenforced": (timeout_unenforced, "SPEC-TIMEOUT"),
    "early_end_drops_work": (early_end_drops_work, "SPEC-OUTPUTS"),
    "map_template_input_dropped": (map_template_input_dropped, "SPEC-MAP-TEMPLATE-INPUT"),
    "map_failed_items_dropped": (map_failed_items_dropped, "RUN-MAP-ITEM-ERRORS"),
    "proc_exit_code_ignored": (proc_exit_code_ignored, "RUN-PROC-EXIT"),
    "proc_timeout_ignored": (proc_timeout_ignored, "PROC-TIMEOUT"),
    "prints_on_stdout": (prints_on_stdout, "FRAME-STDIO"),
}
"""mutant name → (patch, a requirement the conformance kit must report failed)."""

STORE_MUTANTS = frozenset({"attach_replays_a_seen_frame", "detach_cancels"})
"""Mutants whose defect shows only on a host with a run store (``--store``)."""

PROC_MUTANTS = frozenset({"proc_exit_code_ignored", "proc_timeout_ignored"})
"""Mutants whose defect shows only on a host allowing ``cat`` and ``sleep``."""

STDIO_MUTANTS = frozenset({"prints_on_stdout"})
"""Mutants whose defect shows only over stdio."""


def main(argv: list[str]) -> None:
    patch, _ = MUTANTS[argv[0]]
    patch()
    from a2e_host.cli import main as cli_main

    sys.argv = ["a2e-host", *argv[1:]]
    cli_main()


if __name__ == "__main__":
    main(sys.argv[1:])
