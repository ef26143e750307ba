"""``tool/call/req``: one tool run directly, through the chain engine's own tool path.

Source: PROTOCOL.md §11. A direct call is run as a chain of one ``tool`` node whose
``input`` is the call's ``arguments``: it is validated against the tool's input schema
(statically, then by the tool), held to the session's ceilings (``max_output_bytes``,
``max_timeout``), run by the same executor (:meth:`~a2e_host.chains.toolbox.Toolbox.run_tool`,
with the file confinement of its pack), cut off at its ``timeout`` even when the tool
ignores cancellation, and cancelled with its connection. Nothing of the node shows: its
``chain/event`` frames are dropped, but for the tool's reports (``kind: "progress"`` with
``data.report``), which become ``tool/event`` frames (or, for a call with ``streaming:
false``, ``ToolResult.events``); its ``chain/resp`` becomes the ``tool/call/resp``.
"""

from __future__ import annotations

import time
from typing import Any

from a2e_host.chains.messages import ChainEvent, ChainNode, ChainRequest, ChainResponse
from a2e_host.chains.scheduler import ChainRunner
from a2e_host.chains.toolbox import Toolbox
from a2e_host.chains.validation import validate_chain
from a2e_host.errors import ChainFailure, chain_failure_of
from a2e_host.exceptions import A2EError, ChainInvalid, NodeTimeout
from a2e_host.messages import Message
from a2e_host.plugin import RunHandle, SessionInfo
from a2e_host.tools.messages import ToolCallRequest, ToolCallResponse, ToolEvent, ToolResult

__all__ = ["NODE_ID", "run_call"]

NODE_ID = "call"
"""The id of the one node a direct call runs as (its idempotency key derives from it)."""

_INVALID_INPUT = "invalid_input"
_TOOL_ERROR = "tool_error"
_PREFIXES = (f"node {NODE_ID!r} failed: ", f"node {NODE_ID!r}: ")


async def run_call(
    run: RunHandle,
    request: ToolCallRequest,
    call_timeout: int,
    toolbox: Toolbox,
    session: SessionInfo,
    log: Any,
    started: float,
) -> None:
    """Run ``request`` as a run of the host; send its ``tool/event`` frames and exactly
    one ``tool/call/resp`` to ``run.sink``.

    Args:
        run: the run (its sink, its release before the response).
        request: the call; its tool exists (the plugin checked).
        call_timeout: its effective timeout, int seconds within ``max_timeout``.
        toolbox: the tools.
        session: the caller's session (limits, grants).
        log: a structlog logger bound with the request's ids.
        started: ``time.monotonic()`` when the request arrived.
    """
    sink = run.sink
    name = request.tool_name
    chain = ChainRequest(
        id=request.id,
        session_id=session.session_id,
        chain_id=f"tool/call:{name}",
        nodes=[ChainNode(node_id=NODE_ID, kind="tool", name=name, input=request.arguments)],
        entry_node=NODE_ID,
        timeout=call_timeout,
        include_outputs=False,
        event_outputs=False,
    )
    events: list[ToolEvent] = []
    answered = False
    own_codes: list[str] = []  # the code the tool failed with, which the chain's hides

    async def run_tool(node: ChainNode, args: dict[str, Any], ctx: Any) -> Any:
        try:
            return await toolbox.run_tool(node, args, ctx)
        except NodeTimeout:
            own_codes.append("timeout")
            raise
        except A2EError as exc:
            own_codes.append(exc.code)
            raise

    def respond(result: ToolResult) -> None:
        nonlocal answered
        if answered:
            return
        answered = True
        log.info("tool call finished", success=result.success, code=result.error_code or "",
                 duration_ms=result.duration_ms, reports=len(events))
        if not request.streaming:
            result.events = events
        run.release()
        sink.send_nowait(ToolCallResponse(req_id=request.id, data=result))

    def emit(message: Message) -> None:
        if isinstance(message, ChainEvent):
            data = message.data
            if message.kind == "progress" and "report" in data and not answered:
                payload = dict(data)
                event = ToolEvent(kind=str(payload.pop("report")), req_id=request.id,
                                  data=payload, seq=len(events) + 1)
                events.append(event)
                if request.streaming:
                    sink.send_nowait(event)
        elif isinstance(message, ChainResponse):
            respond(_result_of(name, message, call_timeout, own_codes))

    try:
        plan = validate_chain(chain, toolbox, session.limits, granted=session.granted)
    except ChainInvalid as exc:
        respond(_refused(name, exc, started))
        return
    except RecursionError:
        respond(_refused(name, ChainInvalid(
            "the arguments are nested too deeply to check; flatten them"), started))
        return
    except Exception as exc:  # noqa: BLE001 — a bug must still answer the call, once
        log.error("the tool call failed inside the host while checking it", exc_info=exc)
        respond(_failed(name, chain_failure_of(exc, stage="validating"), started))
        return
    executors = {**toolbox.executors, "tool": run_tool}
    secrets = toolbox.secrets.resolver_for(chain)  # None on a host without secrets
    runner = ChainRunner(
        plan,
        executors=executors if secrets is None else secrets.wrap(executors),
        limits=session.limits,
        emit=emit,
        wait_writable=sink.wait_writable,
        granted=session.granted,
        log=log,
        tool_of=toolbox.tools.get,
        run_key=f"{session.session_id}/{request.id}",
    )
    run.on_cancel(runner.cancel)
    try:
        await runner.run_to_response(started)
    except Exception as exc:  # noqa: BLE001 — a bug must still answer the call, once
        log.error("the tool call failed inside the host", exc_info=exc)
        respond(_failed(name, chain_failure_of(exc, stage="running"), started))


def _cleaned(message: str, name: str) -> str:
    """A node failure's message without the one-node chain's ``node 'call' …`` prefix
    (``node 'call' output …`` reads ``tool '<name>' output …``)."""
    for prefix in _PREFIXES:
        if message.startswith(prefix):
            return message[len(prefix):]
    node = f"node {NODE_ID!r} "
    if message.startswith(node):
        return f"tool {name!r} {message[len(node):]}"
    return message


def _result_of(
    name: str, response: ChainResponse, timeout: int, own_codes: list[str]
) -> ToolResult:
    """The ``ToolResult`` of the one-node chain's response; a node failure's code is the
    tool's own (``own_codes``: ``invalid_input``, ``timeout`` …) or ``tool_error``."""
    if response.success:
        return ToolResult(success=True, tool_name=name, data=response.final_output,
                          duration_ms=response.duration_ms)
    failure = response.error
    code = failure.code if failure is not None else "runtime_error"
    if code == "timeout":
        message = (f"tool {name!r} did not finish within the call's timeout of {timeout} s; "
                   "send a larger timeout (within max_timeout) or ask for less work")
    elif failure is None:
        message = "the call failed inside the host; see the host log"
    else:
        message = _cleaned(failure.message, name)
    if code == "chain_node_error":
        own = own_codes[-1] if own_codes else ""
        code = own if own and own != "chain_node_error" else _TOOL_ERROR
    return ToolResult(success=False, tool_name=name, error=message, error_code=code,
                      duration_ms=response.duration_ms)


def _refused(name: str, exc: ChainInvalid, started: float) -> ToolResult:
    """The ``ToolResult`` of arguments refused before the tool ran: ``invalid_input``
    (``chain_limit`` for a ceiling) naming the first problem and its field
    (``arguments.<field>``), with the count when there are more."""
    problems = exc.details.get("errors") or []
    first = problems[0] if problems else {}
    message = str(first.get("message") or exc.message)
    message = message.replace(" but input gives ", " but arguments give ")
    message = message.replace("which neither input nor input_map gives", "which arguments lack")
    field = str(first.get("field") or "")
    if field.startswith("input"):
        message += f" (at arguments{field.removeprefix('input')})"
    if len(problems) > 1:
        message += f"; {len(problems) - 1} more problem(s)"
    code = _INVALID_INPUT if exc.code == "chain_invalid" else exc.code
    return ToolResult(success=False, tool_name=name, error=message, error_code=code,
                      duration_ms=int((time.monotonic() - started) * 1000))


def _failed(name: str, failure: ChainFailure, started: float) -> ToolResult:
    return ToolResult(success=False, tool_name=name, error=failure.message,
                      error_code=_TOOL_ERROR,
                      duration_ms=int((time.monotonic() - started) * 1000))
