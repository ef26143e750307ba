"""``a2e-host graph --run RUN [--store PATH] [--format mermaid|dot|html]``: a stored run's
chain, each node coloured by its outcome.

Layer: command (reads the store read-only, prints to stdout). The chain is the run's
stored request (the validated ``chain/req``); the outcomes are folded from its stored
frames a page at a time (:class:`~a2e_host.commands.run_outcomes.OutcomeFold`: bounded
memory whatever the run's length). The drawing is :func:`~a2e_host.commands.graph.to_mermaid`'s
(or :func:`~a2e_host.commands.graph.to_dot`'s) with a Mermaid class per outcome —
``done``, ``error``, ``skipped``, ``running``, ``interrupted`` — declared with its colours
(``classDef``), ``never_started`` for a node without events, a map template's label counting
its items per outcome, and each node's duration (from its frames' ``ts``,
:class:`~a2e_host.commands.run_trace.RunTrace`). ``html`` is the page
``graph CHAIN --events FILE --format html`` writes (:mod:`~a2e_host.commands.run_page`).

Exit codes: 0 drawn; 1 unknown or expired run; 2 unknown format, a store that is missing
or unreadable, or a stored request that is not a chain.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from ..chains.messages import ChainRequest, chain_codec
from ..exceptions import A2EError
from ..store import RunStatus
from .graph_events import draw_run, unknown_format
from .run_trace import RunTrace
from .store_access import (
    EXIT_USAGE,
    StoreAccessError,
    fail,
    find_run,
    iter_frames,
    open_readonly,
    resolve_store,
)

__all__ = ["graph_run_main", "read_run"]


def graph_run_main(run_id: str, format: str, *, store: str | None,
                   config_path: str | None) -> int:
    """Print the run ``run_id``'s chain with its outcomes.

    Args:
        run_id: the run's id.
        format: ``mermaid``, ``dot`` or ``html``.
        store: ``--store``; None: ``A2E_STORE`` or the configuration's ``store``.
        config_path: ``--config``.

    Returns:
        The exit code (see the module docstring).
    """
    if unknown_format(format):
        return EXIT_USAGE
    try:
        path = resolve_store(store, config_path)
        request, trace, running = anyio.run(read_run, path, run_id)
    except StoreAccessError as exc:
        return fail("graph", exc)
    # the ids came from an agent: draw_run escapes them for a terminal or for HTML
    sys.stdout.write(draw_run(request.nodes, trace, format, title=f"run {run_id}",
                              run_running=running) + "\n")
    return 0


async def read_run(path: Path | str, run_id: str) -> tuple[ChainRequest, RunTrace, bool]:
    """The run's request, its frames folded, and whether it was still running.

    Raises:
        StoreAccessError: the store cannot be read, the run is unknown or expired, or
            its stored request is not a ``chain/req``.
    """
    async with open_readonly(path) as store:
        record = await find_run(store, run_id, path)
        try:
            request = chain_codec.decode(record.request)
        except A2EError as exc:
            raise StoreAccessError(f"run {run_id!r} holds no readable chain/req ({exc})",
                                   EXIT_USAGE) from None
        if not isinstance(request, ChainRequest):
            raise StoreAccessError(f"run {run_id!r} holds a {request.TYPE!r} request, not "
                                   "a chain/req: there is no chain to draw", EXIT_USAGE)
        trace = RunTrace(declared=frozenset(n.node_id for n in request.nodes))
        async for frame in iter_frames(store, run_id):
            try:
                trace.add_frame(frame.frame, frame.output if frame.phase == "error" else None)
            except ValueError as exc:
                raise StoreAccessError(f"run {run_id!r} holds an unreadable frame at seq "
                                       f"{frame.seq} ({exc})", EXIT_USAGE) from None
    # the status read before the frames: a run that had ended then had all its frames
    # committed; one still running may end while they are read, and its unended nodes
    # are then shown running, not interrupted
    return request, trace, record.status == RunStatus.RUNNING
