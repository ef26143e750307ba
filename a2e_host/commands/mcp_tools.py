"""The MCP tools ``a2e-host mcp`` offers: ``run_chain``, ``validate_chain`` and one tool per
active skill (README "Chains offered to MCP clients"; PROTOCOL.md §12).

Layer: command (the official ``mcp`` SDK's types; an A2E client of an in-process host).
Every call takes the wire's path: ``run_chain`` and the skill tools send a ``chain/req``
over an in-memory connection to the host (plugin, validation, scheduler, as ``a2e-host
run`` does); ``validate_chain`` runs the host's own validation against the host's live
catalog (its MCP servers' tools included), in a worker thread.

* ``run_chain``: input a ``chain/req`` body (``nodes``, ``entry_node``, ``initial_input``,
  ``timeout``, …); output the ``chain/resp`` as structured content (and as JSON text),
  ``isError`` when the chain did not succeed. Each ``chain/event`` is sent as an MCP
  progress notification (``progress`` counts the events; ``message`` says
  ``node: phase``). Cancelling the MCP request (``notifications/cancelled``), or an HTTP
  client's connection closing before the answer, sends ``chain/cancel``.
* one tool per active skill, named as the skill (``skill_NAME`` when that name is taken by
  the two above, with characters MCP does not allow as ``_``): input the skill's input
  schema; it runs as a chain of one ``skill`` node, so it reports and cancels the same way;
  output the ``chain/resp``.
* ``validate_chain``: input a ``chain/req`` body; output ``{"valid", "errors",
  "warnings"}`` (the problems as ``chain_invalid`` lists them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec

from ..chains.messages import ChainEvent, ChainNode, ChainRequest, ChainResponse, chain_codec
from ..chains.validation import validate_chain
from ..exceptions import A2EError, ChainInvalid
from ..limits import SessionLimits

__all__ = ["CANCEL_WAIT", "CLIENT_POLL", "ChainTools", "chain_body_schema"]

CANCEL_WAIT = 5.0
"""Seconds a cancelled MCP call waits to hand its ``chain/cancel`` to the host."""

CLIENT_POLL = 0.5
"""Seconds between two checks that an HTTP client is still connected to its call."""

_ENVELOPE = ("type", "id", "version", "ts", "a2e", "session_id", "durable",
             "idempotency_key", "retention")
_REQUEST_FIELDS = frozenset(ChainRequest.__struct_fields__) - set(_ENVELOPE)
_BAD_NAME = re.compile(r"[^A-Za-z0-9_.-]")
RUN_CHAIN, VALIDATE_CHAIN = "run_chain", "validate_chain"


def chain_body_schema() -> dict[str, Any]:
    """The JSON Schema of a ``chain/req`` body as the two chain tools take it: the
    request's fields but the envelope, the session and durable runs."""
    schema = msgspec.json.schema(ChainRequest)
    defs = dict(schema["$defs"])
    root = dict(defs.pop("ChainRequest"))
    root["properties"] = {k: v for k, v in root["properties"].items() if k in _REQUEST_FIELDS}
    root["required"] = ["nodes", "entry_node"]
    root.pop("title", None)
    root["description"] = ("A chain: a DAG of tool/skill/proc/branch/map nodes (the A2E "
                           "chain/req body, PROTOCOL.md §3-§5).")
    root["$defs"] = defs
    return root


def _mcp_name(name: str, taken: set[str]) -> str:
    mcp_name = _BAD_NAME.sub("_", name)[:128] or "skill"
    return f"skill_{mcp_name}"[:128] if mcp_name in taken else mcp_name


class ChainTools:
    """The tools, and what calling each does.

    Args:
        client: an A2E client connected to the host (chains and skills granted).
        host: the in-process host (its chain plugin's live catalog, for validation).
        skills: the active skills, ``(name, description, input_schema)``.
        granted: what the client's session was granted (capabilities and gates), which
            ``validate_chain`` checks a chain against.
    """

    def __init__(self, client: Any, host: Any, skills: list[tuple[str, str, dict[str, Any]]],
                 granted: frozenset[str]) -> None:
        self.client = client
        self.host = host
        self.granted = granted
        self.body_schema = chain_body_schema()
        taken = {RUN_CHAIN, VALIDATE_CHAIN}
        self.skills: dict[str, tuple[str, str, dict[str, Any]]] = {}
        for name, description, schema in skills:
            mcp_name = _mcp_name(name, taken)
            taken.add(mcp_name)
            self.skills[mcp_name] = (name, description, schema or {"type": "object"})

    def list(self) -> list[Any]:
        """The tools as ``mcp.types.Tool``."""
        from mcp.types import Tool, ToolAnnotations

        tools = [
            Tool(name=RUN_CHAIN, description=(
                "Run an A2E chain (a DAG of tool, skill, proc, branch and map nodes) and "
                "return its chain/resp; node events stream as progress."),
                 input_schema=self.body_schema,
                 annotations=ToolAnnotations(read_only_hint=False, open_world_hint=True)),
            Tool(name=VALIDATE_CHAIN, description=(
                "Check an A2E chain without running it: every problem at once, with hints."),
                 input_schema=self.body_schema,
                 annotations=ToolAnnotations(read_only_hint=True)),
        ]
        for mcp_name, (name, description, schema) in sorted(self.skills.items()):
            tools.append(Tool(name=mcp_name, input_schema=schema,
                              description=description or f"Run the skill {name!r}."))
        return tools

    async def call(self, name: str, arguments: dict[str, Any], report: Any,
                   client_gone: Callable[[], Awaitable[bool]] | None = None) -> Any:
        """Call tool ``name`` with ``arguments``; ``report(progress, total, message)``
        sends an MCP progress notification. Returns an ``mcp.types.CallToolResult``.

        ``client_gone`` (HTTP: the request's ``is_disconnected``) is asked every
        :data:`CLIENT_POLL` seconds while the call runs; once it says so the call is
        cancelled as a ``notifications/cancelled`` would (its chain with it): nobody
        could receive the answer, and no event store keeps it for a reconnect."""
        if client_gone is None:
            return await self._call(name, arguments, report)
        result: Any = None
        async with anyio.create_task_group() as tg:
            async def watch() -> None:
                while not await client_gone():  # noqa: ASYNC110 - HTTP has no event for it
                    await anyio.sleep(CLIENT_POLL)
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            result = await self._call(name, arguments, report)
            tg.cancel_scope.cancel()
        if result is None:
            return _failed("the MCP client went away; the call was cancelled")
        return result

    async def _call(self, name: str, arguments: dict[str, Any], report: Any) -> Any:
        if name == VALIDATE_CHAIN:
            return await self._validate(arguments)
        if name == RUN_CHAIN:
            try:
                request = _request_of(arguments)
            except A2EError as exc:
                return _failed(f"the chain is not a valid chain/req body: {exc.message}")
            return await self._run(request, report)
        skill = self.skills.get(name)
        if skill is None:
            return _failed(f"unknown tool {name!r}; list the tools with tools/list")
        node = ChainNode(node_id="skill", kind="skill", name=skill[0], input=dict(arguments))
        return await self._run(ChainRequest(nodes=[node], entry_node="skill",
                                            chain_id=f"mcp:{skill[0]}"), report)

    async def _run(self, request: ChainRequest, report: Any) -> Any:
        from ..client import ClientError

        run = self.client.send_request(request)
        response: ChainResponse | None = None
        count = 0
        try:
            async for message in run:
                if isinstance(message, ChainResponse):
                    response = message
                elif isinstance(message, ChainEvent):
                    count += 1
                    await report(float(count), None, _event_line(message))
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_WAIT):
                await run.cancel()
                await run.aclose()
            raise
        except (ClientError, TimeoutError) as exc:  # e.g. busy: max_parallel chains run
            await run.aclose()
            if isinstance(exc, ClientError) and exc.code == "busy":
                limit = self.host.config.limits.max_parallel
                return _failed(f"the host runs at most {limit} chains at once for its MCP "
                               f"clients ([limits] max_parallel) and all {limit} are running; "
                               "call again once one has answered")
            return _failed(f"the host refused or lost the chain: {exc}")
        if response is None:  # pragma: no cover - the client raises instead
            return _failed("the host closed the connection before answering")
        body = msgspec.to_builtins(response)
        return _result(body, is_error=not response.success)

    async def _validate(self, arguments: dict[str, Any]) -> Any:
        try:
            request = _request_of(arguments)
        except A2EError as exc:
            problem = {"code": exc.code, "message": exc.message}
            return _result({"valid": False, "errors": [problem], "warnings": []}, True)
        plugin = self.host.plugin_for("chain/req")
        catalog = plugin.toolbox
        limits = SessionLimits(self.host.config.limits)
        granted = self.granted

        def check() -> dict[str, Any]:
            try:
                plan = validate_chain(request, catalog, limits, granted=granted)
            except ChainInvalid as exc:
                return {"valid": False, "errors": exc.details.get("errors", []),
                        "warnings": exc.details.get("warnings", [])}
            return {"valid": True, "errors": [], "warnings": list(plan.warnings)}

        verdict = await anyio.to_thread.run_sync(check)
        return _result(msgspec.to_builtins(verdict), not verdict["valid"])


def _request_of(arguments: dict[str, Any]) -> ChainRequest:
    """The ``chain/req`` of a body (fields outside it are dropped, as the decoder does).

    Raises:
        A2EError: a field of the wrong type (``schema_violation`` naming its path).
    """
    body = {k: v for k, v in arguments.items() if k in _REQUEST_FIELDS}
    body.update(type="chain/req", session_id="")
    message = chain_codec.decode(msgspec.json.encode(body))
    assert isinstance(message, ChainRequest)
    return message


def _event_line(event: ChainEvent) -> str:
    """One line for a chain event: ``node: phase`` and what it carries."""
    text = f"{event.node_id or 'chain'}: {event.phase}"
    if event.kind == "progress":
        data = event.data
        parts = [str(data[k]) for k in ("message",) if data.get(k)]
        if "pct" in data:
            parts.append(f"{data['pct']}%")
        text = f"{event.node_id}: {data.get('report', 'progress')}"
        if parts:
            text += " " + " ".join(parts)
    elif event.error:
        text += f": {event.error}"
    return text[:1000]


def _result(body: dict[str, Any], is_error: bool) -> Any:
    from mcp.types import CallToolResult, TextContent

    text = json.dumps(body, ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structured_content=body, is_error=is_error)


def _failed(message: str) -> Any:
    from mcp.types import CallToolResult, TextContent

    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)
