"""``a2e-host graph CHAIN.json --events FILE [--format mermaid|dot|html]``: a chain with
what one recorded run of it did.

Layer: command (reads two files, prints to stdout). ``FILE`` is what ``a2e-host run
--record`` wrote: NDJSON, one ``chain/event`` per line and the ``chain/resp`` last (any
other line type is ignored, blank lines too). It is read one line at a time, by one open
handle, and folded (:class:`~a2e_host.commands.run_trace.RunTrace`): memory is bounded by
the chain's nodes and the map items in flight, not by the run's length; a line longer than
:data:`MAX_LINE_BYTES` is refused.

``mermaid`` and ``dot`` are :func:`~a2e_host.commands.graph.to_mermaid`'s and
:func:`~a2e_host.commands.graph.to_dot`'s drawings with each node's outcome class and
duration; ``html`` is one self-contained page (:func:`~a2e_host.commands.run_page.
render_page`): the diagram, a timeline and the failures. A recording without its
``chain/resp`` (the run was cut off) shows its unended nodes ``interrupted``.

Events naming nodes the chain file does not declare (a recording of another chain) are
drawn all the same, with a warning on stderr (and on the page) naming the first.

Exit codes: 0 drawn; 2 an unreadable or malformed chain or events file (one line on
stderr names the file, the line and what is wrong), or an unknown format.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ..chains.messages import ChainNode
from .graph import to_dot, to_mermaid
from .run import ChainFileError, read_chain_request
from .run_page import render_page
from .run_trace import RunTrace
from .store_access import printable

__all__ = ["MAX_LINE_BYTES", "RUN_FORMATS", "EventsFileError", "draw_run",
           "graph_events_main", "read_events", "unknown_format"]

RUN_FORMATS = ("mermaid", "dot", "html")
"""The formats a run is drawn in."""


def unknown_format(format: str) -> bool:
    """Whether ``format`` is not one of :data:`RUN_FORMATS` (then said on stderr, naming
    the ones there are)."""
    if format in RUN_FORMATS:
        return False
    print(f"a2e-host graph: unknown --format {format!r}; use one of: "
          f"{', '.join(RUN_FORMATS)}", file=sys.stderr)
    return True

MAX_LINE_BYTES = 64 * 1024 * 1024
"""The longest line an events file may hold (four times the default
``max_message_bytes``: a frame the host sent fits)."""

EXIT_USAGE = 2
_BIDI = {c: f"\\u{c:04x}" for c in (0x061C, 0x200E, 0x200F, 0x2028, 0x2029,
                                     *range(0x202A, 0x202F), *range(0x2066, 0x206A))}
"""Line separators and bidirectional formatting characters, shown as ``\\uNNNN``: an
agent's id must not reorder or break the drawing's text."""


class EventsFileError(ValueError):
    """An events file that cannot be read; the message names it, the line and why."""


def graph_events_main(chain: Path, events: Path, format: str) -> int:
    """Print the chain file ``chain`` drawn with the run recorded in ``events``.

    Args:
        chain: a JSON file holding the ``chain/req`` body the run was made of.
        events: the NDJSON file ``a2e-host run --record`` wrote.
        format: one of :data:`RUN_FORMATS`.

    Returns:
        The exit code (see the module docstring).
    """
    if unknown_format(format):
        return EXIT_USAGE
    try:
        request = read_chain_request(chain)
        trace = read_events(events, frozenset(n.node_id for n in request.nodes))
    except (ChainFileError, EventsFileError) as exc:
        print(f"a2e-host graph: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    if trace.cut_line:
        print(f"a2e-host graph: warning: line {trace.cut_line} of events file "
              f"{printable(repr(str(events)))} is cut off (the recording stopped while "
              "writing it); drawn without it", file=sys.stderr)
    missing = trace.undeclared(n.node_id for n in request.nodes)
    if missing:
        print(printable(
            f"a2e-host graph: warning: events file {str(events)!r} names {len(missing):,} "
            f"node{'s' if len(missing) > 1 else ''} that {str(chain)!r} does not declare "
            f"(first: {missing[0]!r}); draw it on the chain file it was recorded from"),
            file=sys.stderr)
    sys.stdout.write(draw_run(request.nodes, trace, format, title=events.name,
                              run_running=False) + "\n")
    return 0


def draw_run(nodes: Sequence[ChainNode], trace: RunTrace, format: str, *, title: str,
             run_running: bool | None) -> str:
    """The run drawn in ``format`` (one of :data:`RUN_FORMATS`): Mermaid or DOT text with
    control characters shown as ``\\xNN`` and bidirectional formatting characters as
    ``\\uNNNN`` (the ids came from an agent), or the HTML page."""
    if format == "html":
        return render_page(nodes, trace, title=title, run_running=run_running)
    outcomes = trace.outcomes(run_running=run_running)
    draw = to_mermaid if format == "mermaid" else to_dot
    return printable(draw(nodes, outcomes)).translate(_BIDI)


def read_events(path: Path, declared: frozenset[str] = frozenset()) -> RunTrace:
    """Fold the events file ``path``, a line at a time; ``declared``: the chain's node ids
    (:attr:`RunTrace.declared`).

    Raises:
        EventsFileError: the file cannot be opened or read, a line is longer than
            :data:`MAX_LINE_BYTES`, or a line is not a JSON object of a frame's shape
            (but the last after some frames, when it has no newline: a recording cut off
            while writing it leaves that line half written; it is left out and its
            number kept in :attr:`RunTrace.cut_line`).
    """
    what = f"events file {str(path)!r}"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise EventsFileError(f"{what} does not exist; record one with "
                              "'a2e-host run CHAIN.json --record FILE'") from None
    except OSError as exc:
        raise EventsFileError(f"{what} cannot be opened: {exc.strerror or exc}") from None
    trace = RunTrace(declared=declared)
    with os.fdopen(fd, "rb") as file:
        number = 0
        while True:
            try:
                line = file.readline(MAX_LINE_BYTES + 1)
            except IsADirectoryError:
                raise EventsFileError(f"{what} is a directory; pass the NDJSON file "
                                      "'a2e-host run --record' wrote") from None
            except OSError as exc:
                raise EventsFileError(f"{what} cannot be read: {exc.strerror or exc}"
                                      ) from None
            if not line:
                return trace
            number += 1
            if len(line) > MAX_LINE_BYTES:
                raise EventsFileError(f"line {number} of {what} is longer than "
                                      f"{MAX_LINE_BYTES:,} bytes; is it an events file?")
            if not line.strip():
                continue
            try:
                trace.add_frame(line)
            except ValueError as exc:
                if trace.frames and not line.endswith(b"\n"):  # cut off while written
                    trace.cut_line = number
                    return trace
                raise EventsFileError(
                    f"line {number} of {what} is not a chain/event or chain/resp ({exc}); "
                    "pass the NDJSON file 'a2e-host run --record' wrote") from None
