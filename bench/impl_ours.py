"""The "ours" slot: a2e-host's in-process API, measured exactly like the references.

API used (a2e_host/inprocess.py): ``InProcessHost(HostConfig(tools=("bench",)))`` built once
per process — as a running host builds its ChainPlugin once — and ``await host.run(request,
sink)`` per request: decode → validation → scheduler → encode, every message (events,
*then the chain/resp*) into ``sink``, the encoded ``chain/resp`` returned. Falls back to the
one-shot ``run_request(request, tools=["bench"], sink=...)`` if ``InProcessHost`` is absent.
The trailing ``chain/resp`` is dropped from the sink after the timed call (the references
put only events there). Logging is configured as the CLI does (stderr, INFO), so the
host's per-chain log lines are part of its cost, as in production.

Until ``a2e_host.inprocess`` imports, :func:`load` raises :class:`Unavailable` and the
harness reports "unavailable" for this slot.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any


class Unavailable(Exception):
    """This implementation cannot be measured here (the reason is the message)."""


Call = Callable[[bytes, Callable[[bytes], None]], Awaitable[bytes]]


def load() -> Call:
    """Return ``async f(request, sink) -> response`` bound to the host's bench tool pack."""
    try:
        from a2e_host import inprocess
    except ImportError as exc:
        raise Unavailable(f"a2e_host.inprocess not importable: {exc}") from exc
    try:
        from a2e_host.logs import configure_logging

        configure_logging("json", "info")
    except (ImportError, TypeError, ValueError):
        pass

    host_cls = getattr(inprocess, "InProcessHost", None)
    if host_cls is not None:
        from a2e_host.config import HostConfig
        from a2e_host.limits import Limits
        from bench.workloads import HOST_MAX_CONCURRENCY

        limits = Limits(max_concurrency=HOST_MAX_CONCURRENCY)
        host = host_cls(HostConfig(tools=("bench",), limits=limits))

        async def call(request: bytes, sink: Callable[[bytes], None]) -> bytes:
            out: bytes = await host.run(request, sink)
            return out

        return call

    run_request: Any = getattr(inprocess, "run_request", None)
    if run_request is None or not inspect.iscoroutinefunction(run_request):
        raise Unavailable("a2e_host.inprocess has neither InProcessHost nor async run_request")
    kwargs: dict[str, Any] = {}
    if "tools" in inspect.signature(run_request).parameters:
        kwargs["tools"] = ["bench"]

    async def call_once(request: bytes, sink: Callable[[bytes], None]) -> bytes:
        out: bytes = await run_request(request, sink=sink, **kwargs)
        return out

    return call_once
