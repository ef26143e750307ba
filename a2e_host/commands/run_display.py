"""What ``a2e-host run`` shows while a chain runs and when it ends.

Layer: command (presentation; ``rich`` is imported only for a TTY). One :class:`Display`
per run, chosen by :func:`open_display`:

* a TTY: a live table of the nodes (status, durations, map items with a progress bar),
  then the final output as pretty JSON (:class:`LiveDisplay`);
* stdout not a TTY: one plain line per ``chain/event``, then the final output
  (:class:`PlainDisplay`);
* ``--json``: the ``chain/resp`` only, one JSON line, with ``--events`` each
  ``chain/event`` as an NDJSON line before it (:class:`JsonDisplay`);
* ``--final``: ``final_output`` only, one JSON line (:class:`FinalDisplay`).

A failure goes to stderr: one summary line, then each validation problem, with the
command-line fix where the host's hint speaks of the wire (:class:`Hints`).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

import msgspec

from ..chains.messages import ChainEvent, ChainRequest, ChainResponse
from ..codec import encode_message
from ..errors import ChainFailure

__all__ = [
    "Display",
    "FinalDisplay",
    "Hints",
    "JsonDisplay",
    "LiveDisplay",
    "PlainDisplay",
    "open_display",
]


def open_display(
    request: ChainRequest,
    allow_proc: tuple[str, ...],
    *,
    final_only: bool,
    json_out: bool,
    events: bool,
) -> Display:
    """The display for this run: ``--final``, ``--json`` (with ``--events``), a live
    table on a TTY, else plain lines; ``allow_proc`` is the configuration's, for the
    fixes a failure report suggests."""
    hints = Hints(request, allow_proc)
    if final_only:
        return FinalDisplay(sys.stdout, hints)
    if json_out:
        return JsonDisplay(sys.stdout, events)
    if sys.stdout.isatty():
        return LiveDisplay(request, hints)
    return PlainDisplay(request, sys.stdout, hints)


class Hints:
    """What the failure report needs to add command-line fixes to the host's hints."""

    def __init__(self, request: ChainRequest, allow_proc: tuple[str, ...]) -> None:
        self.node_kinds = {node.node_id: node.kind for node in request.nodes}
        self.allow_proc = allow_proc

    def failure_lines(self, response: ChainResponse) -> list[str]:
        """Indented lines under the failure summary: each validation problem, and how to
        raise a ceiling that refused the chain."""
        from .common import problem_hint, refusal_hint

        error = response.error
        details = error.details if error is not None else {}
        lines: list[str] = []
        problems = details.get("errors") or []
        for problem in problems:
            if not isinstance(problem, dict):
                continue
            where = ".".join(str(p) for p in (problem.get("node_id"), problem.get("field")) if p)
            line = f"  - {where + ': ' if where else ''}{problem.get('message', problem)}"
            fix = problem_hint(problem, node_kinds=self.node_kinds,
                               allow_proc=self.allow_proc)
            lines.append(f"{line} (fix: {fix})" if fix else line)
        if not problems and error is not None and error.code == "chain_limit":
            fix = refusal_hint(details)
            if fix:
                lines.append(f"  - fix: {fix}")
        return lines


class Display:
    """What one run shows; this base shows nothing but notes and aborts (on stderr).

    Called in this order: :meth:`begin`, :meth:`event` per ``chain/event`` (and
    :meth:`note` on Ctrl-C), :meth:`end` once the connection is done, then either
    :meth:`response` or :meth:`abort` (the client failed). A closed stdout raises
    :class:`BrokenPipeError` from :meth:`event` or :meth:`response`.
    """

    def begin(self) -> None:
        """The chain is about to be sent."""

    def event(self, event: ChainEvent) -> None:
        """One ``chain/event`` arrived."""

    def note(self, text: str) -> None:
        """A line for the person at the terminal (e.g. that the chain is being cancelled)."""
        print(text, file=sys.stderr, flush=True)

    def abort(self, text: str) -> None:
        """The run ended without a response: ``text`` says why."""
        print(text, file=sys.stderr, flush=True)

    def end(self) -> None:
        """No more events will come."""

    def response(self, response: ChainResponse) -> None:
        """The ``chain/resp``: show the outcome."""


class JsonDisplay(Display):
    """``--json``: the response only; with ``--events`` NDJSON events before it."""

    def __init__(self, out: TextIO, events: bool) -> None:
        self.out = out
        self.events = events

    def event(self, event: ChainEvent) -> None:
        if self.events:
            self.out.write(encode_message(event).decode("utf-8") + "\n")
            self.out.flush()

    def response(self, response: ChainResponse) -> None:
        self.out.write(encode_message(response).decode("utf-8") + "\n")
        self.out.flush()


class FinalDisplay(Display):
    """``--final``: ``final_output`` alone as one JSON line; a failure on stderr only."""

    def __init__(self, out: TextIO, hints: Hints) -> None:
        self.out = out
        self.hints = hints

    def response(self, response: ChainResponse) -> None:
        if response.success:
            self.out.write(msgspec.json.encode(response.final_output).decode("utf-8") + "\n")
            self.out.flush()
            return
        _print_failure(response, _failure_summary(response), self.hints)


def _pretty(value: Any) -> str:
    return json.dumps(msgspec.to_builtins(value), indent=2, ensure_ascii=False)


def _failure_summary(response: ChainResponse) -> str:
    err = response.error or ChainFailure(code="error")
    where = f" at node {err.node_id!r}" if err.node_id else ""
    return f"chain {response.chain_id} failed ({err.code}){where}: {err.message}"


def _print_failure(
    response: ChainResponse, summary: str, hints: Hints, *, summary_shown: bool = False
) -> None:
    """The failure on stderr: the summary line (unless already on screen), then each
    validation problem and the command-line fix where one applies."""
    if not summary_shown:
        print(f"a2e-host run: {summary}", file=sys.stderr)
    for line in hints.failure_lines(response):
        print(line, file=sys.stderr)
    sys.stderr.flush()


def _print_outcome(
    response: ChainResponse, out: TextIO, summary: str, hints: Hints, *,
    summary_shown: bool = False,
) -> None:
    """The final output on success; else the failure (and each validation problem) on
    stderr. ``summary_shown``: the failure line is already on screen (the live table)."""
    if response.success:
        out.write(_pretty(response.final_output) + "\n")
        out.flush()
        return
    _print_failure(response, summary, hints, summary_shown=summary_shown)


class PlainDisplay(Display):
    """stdout not a TTY: one line per event, then the final output."""

    def __init__(self, request: ChainRequest, out: TextIO, hints: Hints) -> None:
        from ..progress import ChainProgress

        self.out = out
        self.hints = hints
        self.progress = ChainProgress(request, time.monotonic())

    def event(self, event: ChainEvent) -> None:
        now = time.monotonic()
        self.progress.feed(event, now)
        self.out.write(self.progress.plain_line(event, now) + "\n")
        self.out.flush()

    def response(self, response: ChainResponse) -> None:
        self.progress.finish(response, time.monotonic())
        if response.success:
            self.out.write(self.progress.summary() + "\n")
        _print_outcome(response, self.out, self.progress.summary(), self.hints)


class LiveDisplay(Display):
    """A TTY: a rich live table while the chain runs, then the final output."""

    def __init__(self, request: ChainRequest, hints: Hints) -> None:
        from rich.console import Console
        from rich.live import Live

        from ..progress import ChainProgress

        self.console = Console()
        self.hints = hints
        self.progress = ChainProgress(request, time.monotonic())
        self.live = Live(
            console=self.console, refresh_per_second=8, transient=True,
            get_renderable=lambda: self.progress.render(time.monotonic()),
        )

    def begin(self) -> None:
        self.live.start()

    def event(self, event: ChainEvent) -> None:
        self.progress.feed(event, time.monotonic())

    def note(self, text: str) -> None:
        self.console.print(text, style="yellow")

    def end(self) -> None:
        if self.live.is_started:
            self.live.refresh()
            self.live.stop()

    def response(self, response: ChainResponse) -> None:
        self.progress.finish(response, time.monotonic())
        self.console.print(self.progress.render(time.monotonic()))
        _print_outcome(response, sys.stdout, self.progress.summary(), self.hints,
                       summary_shown=True)
