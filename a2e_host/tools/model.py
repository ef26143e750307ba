"""The :class:`Tool` object and the :func:`tool` decorator.

Layer: runtime (runs tool functions with anyio: on the loop, awaited, or in a worker
thread). Imports nothing from transports or the scheduler.

A tool is a function with a JSON-object input and a JSON-able output. Its input and output
schemas are derived from type hints (msgspec Structs, TypedDicts, or annotated keyword
parameters); inputs are validated with :func:`msgspec.convert` before the function runs
and outputs after. :meth:`Tool.invoke` is the one entry point the scheduler calls
(PROTOCOL.md §5, kind ``tool``); it is on the hot path, so a tool whose input is "any
object" skips validation entirely.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from functools import partial
from typing import Any, Literal

import anyio
import anyio.to_thread
import msgspec
import structlog

from ..chains.nodes import current_node
from ..exceptions import A2EError, NodeError, NodeTimeout

__all__ = ["INVALID_INPUT", "Tool", "tool", "json_schema", "SIDE_EFFECTS", "SideEffects"]

SideEffects = Literal["none", "read", "write", "external"]
SIDE_EFFECTS: tuple[str, ...] = ("none", "read", "write", "external")
"""What a tool may touch: nothing, reads (files, clock), writes (files), the outside world."""

INVALID_INPUT = "invalid_input"
"""The own code of the :class:`~a2e_host.exceptions.NodeError` a tool raises for an input
that does not fit its schema (on the wire still ``chain_node_error``): the same input fails
the same way again, so a node's ``retry`` never retries it (PROTOCOL.md §5 Recovery)."""

_log = structlog.get_logger("a2e_host.tools")
_MISSING = re.compile(r"^Object missing required field `([^`]*)`(?: - at `\$(.*)`)?$")
_AT = re.compile(r" - at `(\$[^`]*)`$")
_ANY_OBJECT: dict[str, Any] = {"type": "object"}
_TRIVIAL = (Any, object, dict, dict[str, Any], inspect.Parameter.empty)

# How invoke runs the function: awaited, inline on the loop, or in a worker thread.
_AWAIT, _INLINE, _THREAD = 0, 1, 2


class Tool:
    """One callable tool (PROTOCOL.md §5 kind ``tool``; fixtures in §7).

    Build one with :func:`tool` (schemas from type hints) or directly.

    Args:
        name: the name chain nodes call it by (``node.name``).
        fn: ``fn(value)`` sync or async. ``value`` is the input dict when ``input_type``
            is None, else the converted ``input_type`` instance (or, with
            ``call_kwargs``, the converted fields passed as keyword arguments).
        description: one line for listings (``tool/list/req``, ``a2e-host tools``).
        input_type: a msgspec-convertible type of the whole input (a Struct or TypedDict);
            None means "any JSON object" and skips validation.
        output_type: the type the output must convert to; None means any JSON value.
        call_kwargs: call ``fn(**fields)`` with the fields of the converted Struct.
        timeout: float seconds the call may take, None for no limit of its own (the node
            and chain deadlines still apply).
        max_output_bytes: cap on the JSON-encoded output, int bytes; None for no cap of
            the tool's own (the session's ``max_output_bytes`` is the scheduler's).
        side_effects: one of :data:`SIDE_EFFECTS`.
        version: free-form version string; part of the step cache's key, so a new
            version never answers from an older one's outputs.
        idempotent: calling it twice with one input has the effect of calling it once:
            a ``write`` or ``external`` tool that says so may be retried by a node's
            ``retry`` (one that does not is retried only for codes the node's
            ``retry_on`` names; PROTOCOL.md §5 Recovery).
        cacheable: its output may be answered from the host's step cache for the same
            input and version; None (the default) means "when ``side_effects`` is
            ``none``".
        blocking: for sync functions: True runs them in a worker thread (abandoned when
            cancelled); False calls them on the event loop (cheap pure functions only).
        tags: free-form labels for listings (``tool/list/req.filter_tags`` and ``query``
            match them); default none.
        toolkit: the toolkit it belongs to (``ToolDefinition.toolkit``); None: the
            tool pack it was enabled from.
        defer_loading: leave it out of a plain ``tool/list/req`` (it is found by a
            ``query`` with ``include_deferred``, and callable as any other); default false.
        streaming: it reports progress while it runs (``ToolDefinition.streaming``, a
            hint for listings: every tool may report, :func:`a2e_host.tools.report`).
        remote: run the function as a Ray task (:mod:`a2e_host.tools.remote`, extra
            ``a2e-host[ray]``; configuration ``remote_tools`` marks tools too); default
            false: in-process.

    Attributes:
        input_schema / output_schema: JSON Schemas (dicts) of the input and output.

    Raises:
        ValueError: an unknown ``side_effects`` or a non-positive ``timeout``.
    """

    __slots__ = (
        "name",
        "description",
        "fn",
        "input_type",
        "output_type",
        "input_schema",
        "output_schema",
        "timeout",
        "max_output_bytes",
        "side_effects",
        "version",
        "idempotent",
        "cacheable",
        "blocking",
        "tags",
        "toolkit",
        "defer_loading",
        "streaming",
        "remote",
        "is_async",
        "_mode",
        "_call_kwargs",
    )

    def __init__(
        self,
        name: str,
        fn: Callable[..., Any],
        *,
        description: str = "",
        input_type: Any = None,
        output_type: Any = None,
        call_kwargs: bool = False,
        timeout: float | None = None,
        max_output_bytes: int | None = None,
        side_effects: str = "none",
        version: str = "1",
        idempotent: bool = False,
        cacheable: bool | None = None,
        blocking: bool = True,
        tags: tuple[str, ...] | list[str] = (),
        toolkit: str | None = None,
        defer_loading: bool = False,
        streaming: bool = False,
        remote: bool = False,
    ) -> None:
        if side_effects not in SIDE_EFFECTS:
            raise ValueError(
                f"tool {name!r}: side_effects must be one of {', '.join(SIDE_EFFECTS)}, "
                f"got {side_effects!r}"
            )
        if timeout is not None and timeout <= 0:
            raise ValueError(f"tool {name!r}: timeout must be > 0 seconds or None, got {timeout}")
        self.name = name
        self.fn = fn
        self.description = description
        self.input_type = input_type
        self.output_type = output_type
        self.input_schema: dict[str, Any] = (
            dict(_ANY_OBJECT) if input_type is None else json_schema(input_type)
        )
        self.output_schema: dict[str, Any] = {} if output_type is None else json_schema(output_type)
        self.timeout = timeout
        self.max_output_bytes = max_output_bytes
        self.side_effects = side_effects
        self.version = version
        self.idempotent = idempotent
        self.cacheable = side_effects == "none" if cacheable is None else cacheable
        self.blocking = blocking
        self.tags: tuple[str, ...] = tuple(tags)
        self.toolkit = toolkit
        self.defer_loading = defer_loading
        self.streaming = streaming
        self.remote = remote
        self.is_async = inspect.iscoroutinefunction(fn)
        self._mode = _AWAIT if self.is_async else (_THREAD if blocking else _INLINE)
        self._call_kwargs = call_kwargs

    def __repr__(self) -> str:
        return f"Tool({self.name!r}, side_effects={self.side_effects!r})"

    async def invoke(self, args: dict[str, Any]) -> Any:
        """Validate ``args``, run the tool, validate and size-check its output.

        Args:
            args: the node's resolved input (a JSON object).

        Returns:
            The output as plain JSON-able builtins (Structs are converted).

        Raises:
            NodeError: invalid input ("tool 'add': input field 'b' is required"; its own
                code :data:`INVALID_INPUT`), invalid
                output, output over ``max_output_bytes``, or the function raised
                (``"ValueError: …"``; the traceback is logged, never sent). An
                :class:`~a2e_host.exceptions.A2EError` the function raises passes unchanged.
            NodeTimeout: the tool's own ``timeout`` passed ("tool 'x' timed out after 2 s");
                a worker thread that ignores it is abandoned and its result discarded.

        Cancellation of the calling task propagates unchanged.
        """
        value: Any = args
        if self.input_type is not None:
            try:
                value = msgspec.convert(args, self.input_type)
            except msgspec.ValidationError as exc:
                raise NodeError(self._input_problem(str(exc)), code=INVALID_INPUT) from None
        try:
            if self.timeout is None:
                out = await self._run(value)
            else:
                with anyio.move_on_after(self.timeout) as scope:
                    out = await self._run(value)
                if scope.cancelled_caught:
                    raise NodeTimeout(f"tool {self.name!r} timed out after {self.timeout:g} s")
        except A2EError:
            raise
        except Exception as exc:
            _log.warning("tool raised", tool=self.name, error=repr(exc), exc_info=exc)
            raise NodeError(f"{type(exc).__name__}: {exc}") from None
        if self.output_type is not None or isinstance(out, msgspec.Struct):
            out = self._checked_output(out)
        if self.max_output_bytes is not None:
            size = len(msgspec.json.encode(out))
            if size > self.max_output_bytes:
                raise NodeError(
                    f"tool {self.name!r} returned {size} bytes of output, over its "
                    f"max_output_bytes cap of {self.max_output_bytes}; ask for less"
                )
        return out

    async def _run(self, value: Any) -> Any:
        if self.remote:  # imported here: a host without remote tools never imports Ray's
            from .remote import run_remote

            return await run_remote(self.name, self.fn, value, self._call_kwargs)
        fn = self.fn
        if self._call_kwargs:
            fn = partial(fn, **msgspec.structs.asdict(value))
            if self._mode == _AWAIT:
                return await fn()
            if self._mode == _INLINE:
                return fn()
            return await _in_thread(fn)
        if self._mode == _AWAIT:
            return await fn(value)
        if self._mode == _INLINE:
            return fn(value)
        return await _in_thread(partial(fn, value))

    def _checked_output(self, out: Any) -> Any:
        try:
            if self.output_type is not None:
                out = msgspec.convert(out, self.output_type, from_attributes=True)
            return msgspec.to_builtins(out)
        except (msgspec.ValidationError, TypeError) as exc:
            raise NodeError(
                f"tool {self.name!r} returned an output that does not match its output "
                f"schema: {_readable(str(exc))}; this is a bug in the tool"
            ) from None

    def _input_problem(self, text: str) -> str:
        missing = _MISSING.match(text)
        if missing:
            field = missing.group(1)
            where = missing.group(2) or ""
            path = f"{where.lstrip('.')}.{field}" if where else field
            return f"tool {self.name!r}: input field {path!r} is required"
        return f"tool {self.name!r}: invalid input: {_readable(text)}"


def _readable(text: str) -> str:
    """msgspec's ``Expected `int | float`, got `str` - at `$.a``` as
    ``Expected `number`, got `str` at $.a``."""
    return _AT.sub(r" at \1", text).replace("`int | float`", "`number`")


def json_schema(type_: Any) -> dict[str, Any]:
    """The JSON Schema of ``type_`` (msgspec), with a top-level ``$ref`` inlined."""
    schema = msgspec.json.schema(type_)
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/") and len(schema) == 2:
        defs = dict(schema["$defs"])
        root = dict(defs.pop(ref.removeprefix("#/$defs/")))
        root.pop("title", None)
        if ref.encode() in msgspec.json.encode([root, defs]):
            return schema  # recursive: the root is referenced from inside
        if defs:
            root["$defs"] = defs
        return root
    return schema


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    max_output_bytes: int | None = None,
    side_effects: str = "none",
    version: str = "1",
    idempotent: bool = False,
    cacheable: bool | None = None,
    blocking: bool = True,
    tags: tuple[str, ...] | list[str] = (),
    toolkit: str | None = None,
    defer_loading: bool = False,
    streaming: bool = False,
    remote: bool = False,
) -> Any:
    """Make a :class:`Tool` of a function, deriving its schemas from its type hints.

    The input is read from the signature:

    * one parameter annotated with a msgspec Struct or a TypedDict: the whole input is
      converted to it and passed;
    * one parameter annotated ``dict`` / ``dict[str, Any]`` / ``Any`` (or not at all): the
      input is "any JSON object", passed as is, never validated;
    * otherwise each parameter is one input field (its annotation the field type, its
      default making it optional), passed as keyword arguments.

    The output schema comes from the return annotation (``Any``, ``dict`` or none: any).

    Usable bare (``@tool``) or with options (``@tool(timeout=2.0, side_effects="read")``);
    the options are :class:`Tool`'s. ``description`` defaults to the docstring's first paragraph.

    Raises:
        TypeError: a parameter without annotation among several, or ``*args``/``**kwargs``.
    """

    def build(func: Callable[..., Any]) -> Tool:
        hints = typing.get_type_hints(func, include_extras=True)
        params = list(inspect.signature(func).parameters.values())
        tool_name = name or func.__name__
        input_type: Any = None
        call_kwargs = False
        sole = params[0] if len(params) == 1 else None
        if sole is not None and sole.kind not in (sole.VAR_KEYWORD, sole.VAR_POSITIONAL):
            ann = hints.get(sole.name, inspect.Parameter.empty)
            if _is_whole_input(ann):
                input_type = ann
            elif ann not in _TRIVIAL:
                input_type, call_kwargs = _fields_struct(tool_name, params, hints), True
        else:  # several parameters, or none: each one an input field
            input_type, call_kwargs = _fields_struct(tool_name, params, hints), True
        ret = hints.get("return", inspect.Parameter.empty)
        output_type = None if ret in _TRIVIAL or ret is None else ret
        doc = description
        if doc is None:
            doc = " ".join((inspect.getdoc(func) or "").strip().split("\n\n", 1)[0].split())
        made = Tool(
            tool_name,
            func,
            description=doc,
            input_type=input_type,
            output_type=output_type,
            call_kwargs=call_kwargs,
            timeout=timeout,
            max_output_bytes=max_output_bytes,
            side_effects=side_effects,
            version=version,
            idempotent=idempotent,
            cacheable=cacheable,
            blocking=blocking,
            tags=tags,
            toolkit=toolkit,
            defer_loading=defer_loading,
            streaming=streaming,
            remote=remote,
        )
        if ret in (dict, dict[str, Any]):
            made.output_schema = dict(_ANY_OBJECT)
        return made

    return build(fn) if fn is not None else build


def _is_whole_input(ann: Any) -> bool:
    if isinstance(ann, type) and issubclass(ann, msgspec.Struct):
        return True
    return typing.is_typeddict(ann)


def _fields_struct(
    tool_name: str, params: list[inspect.Parameter], hints: dict[str, Any]
) -> type[msgspec.Struct]:
    """A Struct type with one field per keyword parameter (``defstruct``)."""
    fields: list[Any] = []
    for p in params:
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL, p.POSITIONAL_ONLY):
            raise TypeError(f"tool {tool_name!r}: parameter {p.name!r} cannot be an input field")
        if p.name not in hints:
            raise TypeError(f"tool {tool_name!r}: parameter {p.name!r} needs a type annotation")
        if p.default is p.empty:
            fields.append((p.name, hints[p.name]))
        else:
            fields.append((p.name, hints[p.name], p.default))
    return msgspec.defstruct(f"{tool_name}_input", fields, kw_only=True)


async def _in_thread(fn: Callable[[], Any]) -> Any:
    """Run a blocking tool in a worker thread; when the awaiting scope is cancelled (the
    tool's own or the node's timeout, the chain's cancel, a dropped connection) the
    thread is abandoned and its node context marked cancelled, so a tool that asks
    (``context().cancelled``) stops (PROTOCOL.md §11 Tool context)."""
    try:
        return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        ctx = current_node.get()
        if ctx is not None:
            ctx.mark_cancelled()
        raise
