"""``a2e-host run CHAIN.json``: run a chain file in this process, with live progress.

Layer: command. No shortcut: a :class:`~a2e_host.runtime.host.Host` is built from the
configuration, an in-memory connection is opened to it, the client handshakes (asking for
every capability the configuration serves: ``proc`` only with ``--allow-proc``; with the
host's own ``auth_token`` when one is set), sends the ``chain/req`` and reads its events
until the ``chain/resp`` — the path a wire request takes (plugin, validation, scheduler).

Output:

* on a TTY: a live table of the nodes (status, durations, map items with a progress
  bar), then the final output as pretty JSON;
* stdout not a TTY: one plain line per ``chain/event``, then the final output;
* ``--json``: the ``chain/resp`` only, one JSON line (with ``--events``, each
  ``chain/event`` as an NDJSON line before it);
* ``--final``: ``final_output`` only, one JSON line; the request asks the host for no
  events (``streaming: false``) and to leave ``outputs`` out of the response
  (``include_outputs: false``).

A failure goes to stderr: one summary line, then each validation problem, with the
command-line fix where the host's hint speaks of the wire (``--allow-proc`` for a proc
node; ``A2E_MAX_…`` or ``[limits]`` for a ceiling that refused the chain).

Tool packs: when neither ``--tools`` nor the configuration (file or ``A2E_TOOLS``) names
any, ``fs``, ``text`` and ``json`` are enabled
(:data:`~a2e_host.config.LOCAL_TOOL_PACKS`, what the examples need); ``--tools +PACK``
adds PACK to them. Host logs go to stderr at ``warning`` unless ``--log-level`` (or
``A2E_LOG_LEVEL``, or the file's ``log_level``) says otherwise.

Ctrl-C (SIGINT) or SIGTERM sends ``chain/cancel``: the host cancels the running nodes
(processes killed) and the ``cancelled`` response is printed. A second Ctrl-C, or no
response within :data:`CANCEL_WAIT` seconds, closes the connection (which cancels too).

Exit codes: 0 the chain succeeded; 1 it failed (a node error, a timeout); 2 usage: the
file cannot be read or is not a chain, ``--input`` is not a JSON object, the
configuration is bad (an unknown tool pack, an executable not on PATH, a missing skills
directory), or the host refused the chain as invalid (``chain_invalid``,
``chain_cycle``, ``chain_limit`` at validation); 128 + the signal's number when a signal
interrupted the run, as a shell reports it: 130 for Ctrl-C (SIGINT), 143 for SIGTERM.

A closed stdout (``a2e-host run … | head``) ends the run quietly: the chain is cancelled,
nothing more is printed (no traceback), and the exit code is 141, a SIGPIPE'd process's
(128 + 13), as for any tool in a shell pipeline.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import anyio
import msgspec

from ..chains.messages import ChainEvent, ChainRequest, ChainResponse, chain_codec
from ..codec import encode_message
from ..exceptions import A2EError

__all__ = [
    "CANCEL_WAIT",
    "ChainFileError",
    "read_chain_request",
    "run_main",
]

CANCEL_WAIT = 10.0
"""Seconds to wait for the ``cancelled`` response after Ctrl-C before closing."""

INVALID_CODES = frozenset({"chain_invalid", "chain_cycle", "chain_limit"})
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
_REQUEST_FIELDS = frozenset(ChainRequest.__struct_fields__) | {"type"}


class ChainFileError(ValueError):
    """A chain file or ``--input`` that cannot be used; the message says which and why."""


def read_chain_request(
    path: Path, input_text: str | None = None, *, extra: dict[str, Any] | None = None
) -> ChainRequest:
    """Read a chain file: a ``chain/req`` body in JSON (``type``, ``id``, ``ts`` and
    ``session_id`` may be left out and are filled in).

    Args:
        path: the JSON file.
        input_text: ``--input``: a JSON object, or ``@file.json``; merged over the file's
            ``initial_input`` (its keys win). None keeps the file's.
        extra: request fields to set over the file's (e.g. ``{"include_outputs": False}``);
            a field this version's :class:`~a2e_host.messages.ChainRequest` does not
            declare is dropped, as the decoder drops unknown fields.

    Returns:
        The request (``session_id`` empty: the client fills it in).

    Raises:
        ChainFileError: unreadable file, invalid JSON, not an object, a field of the wrong
            type (the message names its path, e.g. ``$.nodes[0].kind``), or a bad ``--input``.
    """
    body = _read_json_object(path, f"chain file {str(path)!r}")
    if body.get("type", "chain/req") != "chain/req":
        raise ChainFileError(
            f"chain file {str(path)!r} has type {body['type']!r}; a chain file is a "
            "chain/req body (drop 'type' or set it to \"chain/req\")"
        )
    body = {k: v for k, v in {**body, **(extra or {})}.items() if k in _REQUEST_FIELDS}
    body["type"] = "chain/req"
    body.setdefault("session_id", "")
    if input_text is not None:
        given = _parse_input(input_text)
        base = body.get("initial_input") or {}
        if not isinstance(base, dict):
            raise ChainFileError(
                f"initial_input in chain file {str(path)!r} must be a JSON object"
            )
        body["initial_input"] = {**base, **given}
    try:
        message = chain_codec.decode(msgspec.json.encode(body))
    except A2EError as exc:
        raise ChainFileError(f"chain file {str(path)!r} is not a valid chain/req: {exc}") from None
    assert isinstance(message, ChainRequest)
    return message


def _read_json_object(path: Path, what: str) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ChainFileError(f"{what} does not exist; check the path") from None
    except IsADirectoryError:
        raise ChainFileError(f"{what} is a directory; pass a JSON file") from None
    except OSError as exc:
        raise ChainFileError(f"{what} cannot be read: {exc.strerror or exc}") from None
    try:
        value = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise ChainFileError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ChainFileError(f"{what} must hold a JSON object, got {type(value).__name__}")
    return value


def _parse_input(text: str) -> dict[str, Any]:
    if text.startswith("@"):
        return _read_json_object(Path(text[1:]), f"--input file {text[1:]!r}")
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise ChainFileError(
            f"--input is not valid JSON ({exc}); pass an object like '{{\"pattern\": \"*.py\"}}' "
            "or @file.json"
        ) from None
    if not isinstance(value, dict):
        raise ChainFileError(
            f"--input must be a JSON object (it replaces keys of initial_input), "
            f"got {type(value).__name__}"
        )
    return value


def run_main(
    chain: Path,
    input: str | None,
    *,
    json_out: bool,
    events: bool,
    config_path: Path | None,
    overrides: dict[str, Any],
    final_only: bool = False,
) -> int:
    """Run the chain file ``chain`` through an in-process host and print the result.

    Args:
        chain: a JSON file holding a ``chain/req`` body.
        input: ``--input``: JSON object text or ``@file.json``, merged over ``initial_input``.
        json_out: print the ``chain/resp`` only (one JSON line).
        events: with ``json_out``, print each ``chain/event`` as an NDJSON line first.
        config_path: the TOML configuration, None for defaults and ``A2E_*`` variables.
        overrides: CLI values for the configuration (``tools``, ``allow_proc``, ``root`` …);
            a ``tools`` list of ``+PACK`` entries adds to the defaults
            (:func:`~a2e_host.commands.common.load_command_config`).
        final_only: print ``final_output`` only, as one JSON line, and ask the host for
            no events (``streaming: false``) and a response without ``outputs``
            (``chain/req.include_outputs: false``).

    Returns:
        The exit code: 0 success, 1 the chain failed, 2 usage, a bad configuration or an
        invalid chain, 128 + the signal number when interrupted (130 Ctrl-C, 143 SIGTERM)
        or when stdout was closed (141: the chain is cancelled, nothing more printed).
    """
    try:
        # --final needs neither events nor outputs: ask for the response alone
        extra = {"streaming": False, "include_outputs": False} if final_only else None
        request = read_chain_request(chain, input, extra=extra)
    except ChainFileError as exc:
        print(f"a2e-host run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from ..logs import configure_logging
    from ..runtime.host import Host
    from .common import load_command_config

    try:
        config = load_command_config(config_path, overrides, local_defaults=True)
        configure_logging(config.log_format, config.log_level, auto_level="warning")
        host = Host(config)  # a plugin refusing the configuration raises ValueError
    except ValueError as exc:
        print(f"a2e-host run: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    hints = _Hints(request, config.allow_proc)
    display: _Display
    if final_only:
        display = _FinalDisplay(sys.stdout, hints)
    elif json_out:
        display = _JsonDisplay(sys.stdout, events)
    elif sys.stdout.isatty():
        display = _LiveDisplay(request, hints)
    else:
        display = _PlainDisplay(request, sys.stdout, hints)
    response, signum = anyio.run(_run, request, host, display)
    if signum is not None:
        return 128 + signum
    if response is None:
        return EXIT_FAILED
    if response.success:
        return EXIT_OK
    code = (response.error or {}).get("code", "")
    return EXIT_USAGE if code in INVALID_CODES and response.nodes_run == 0 else EXIT_FAILED


class _Interrupt:
    """Set by the first SIGINT/SIGTERM: ``event`` and the signal's number."""

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.signum: int | None = None


async def _run(
    request: ChainRequest, host: Any, display: _Display
) -> tuple[ChainResponse | None, int | None]:
    """Run ``request`` on ``host`` over an in-memory connection.

    Returns:
        ``(response, signum)``: the response (None when the client failed) and the
        number of the signal that interrupted the run (SIGPIPE when stdout's reader went
        away), else None.
    """
    from ..client import ClientError, ConnectionLost, connect_memory
    from .common import local_capabilities

    response: ChainResponse | None = None
    failure: ClientError | None = None
    interrupted = _Interrupt()
    stdout_closed = False
    try:
        # the session asks for what the configuration allows (proc with --allow-proc),
        # and an in-process run authenticates with the host's own token
        async with connect_memory(
            host, agent_id="a2e-host run", agent_caps=local_capabilities(host),
            auth_token=host.config.auth_token,
        ) as client:
            run = client.send_request(request)
            async with anyio.create_task_group() as tg:
                tg.start_soon(_cancel_on_signal, run, display, interrupted)
                display.begin()
                try:
                    async for message in run:
                        if isinstance(message, ChainResponse):
                            response = message
                        else:
                            display.event(message)
                except BrokenPipeError:  # stdout's reader went away (`| head`)
                    stdout_closed = True
                    await _cancel_unread(run)
                except ConnectionLost as exc:
                    if not interrupted.event.is_set():
                        failure = exc
                except ClientError as exc:
                    failure = exc
                finally:
                    tg.cancel_scope.cancel()
    except ClientError as exc:  # the handshake failed
        failure = exc
    finally:
        display.end()
        with anyio.CancelScope(shield=True):
            await host.aclose()
    if stdout_closed:
        return _stdout_closed(response)
    if failure is not None:
        display.abort(f"a2e-host run: {failure}")
        return None, interrupted.signum
    if response is None:  # the connection was closed after an interrupt
        response = ChainResponse(
            req_id=request.id,
            chain_id=request.chain_id,
            success=False,
            error={
                "code": "cancelled",
                "message": "the run was interrupted and the connection closed before the "
                "host answered",
                "node_id": "",
                "retryable": False,
                "details": {},
            },
        )
    try:
        display.response(response)
    except BrokenPipeError:
        return _stdout_closed(response)
    return response, interrupted.signum


async def _cancel_unread(run: Any) -> None:
    """Nobody reads the output any more: cancel the chain (its nodes stop, processes are
    killed) and wait up to :data:`CANCEL_WAIT` seconds for its response, unshown; the
    connection closing after that cancels whatever is left."""
    from ..client import ClientError

    with anyio.move_on_after(CANCEL_WAIT):
        try:
            await run.cancel()
            async for _ in run:
                pass
        except (ClientError, A2EError, TimeoutError):
            pass


def _stdout_closed(response: ChainResponse | None) -> tuple[ChainResponse | None, int]:
    """End quietly after stdout's reader went away: later writes and the interpreter's
    final flush go to /dev/null, and the exit code is a SIGPIPE'd process's (141)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
    return response, signal.SIGPIPE


async def _cancel_on_signal(run: Any, display: _Display, interrupted: _Interrupt) -> None:
    """First SIGINT/SIGTERM: ``chain/cancel``; a second one, or no answer within
    :data:`CANCEL_WAIT` seconds: close the connection (which cancels the chain too)."""
    try:
        receiver = anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM)
    except (NotImplementedError, ValueError, RuntimeError):  # not the main thread
        return
    with receiver as signals:
        async for signum in signals:
            interrupted.signum = int(signum)
            break
        interrupted.event.set()
        display.note("cancelling the chain (Ctrl-C again to stop at once)…")
        try:
            await run.cancel()
        except A2EError:
            pass
        else:
            with anyio.move_on_after(CANCEL_WAIT):
                async for _ in signals:
                    break
    await run.client.aclose()


# ── displays ────────────────────────────────────────────────────────────────


class _Hints:
    """What the failure report needs to add command-line fixes to the host's hints."""

    def __init__(self, request: ChainRequest, allow_proc: tuple[str, ...]) -> None:
        self.node_kinds = {node.node_id: node.kind for node in request.nodes}
        self.allow_proc = allow_proc

    def failure_lines(self, response: ChainResponse) -> list[str]:
        """Indented lines under the failure summary: each validation problem, and how to
        raise a ceiling that refused the chain."""
        from .common import problem_hint, refusal_hint

        error = response.error or {}
        details = error.get("details") or {}
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
        if not problems and error.get("code") == "chain_limit":
            fix = refusal_hint(details)
            if fix:
                lines.append(f"  - fix: {fix}")
        return lines


class _Display:
    def begin(self) -> None:
        pass

    def event(self, event: ChainEvent) -> None:
        pass

    def note(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def abort(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def end(self) -> None:
        pass

    def response(self, response: ChainResponse) -> None:
        pass


class _JsonDisplay(_Display):
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


class _FinalDisplay(_Display):
    """``--final``: ``final_output`` alone as one JSON line; a failure on stderr only."""

    def __init__(self, out: TextIO, hints: _Hints) -> None:
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
    err = response.error or {}
    where = f" at node {err.get('node_id')!r}" if err.get("node_id") else ""
    return (f"chain {response.chain_id} failed ({err.get('code', 'error')}){where}: "
            f"{err.get('message', '')}")


def _print_failure(
    response: ChainResponse, summary: str, hints: _Hints, *, summary_shown: bool = False
) -> None:
    """The failure on stderr: the summary line (unless already on screen), then each
    validation problem and the command-line fix where one applies."""
    if not summary_shown:
        print(f"a2e-host run: {summary}", file=sys.stderr)
    for line in hints.failure_lines(response):
        print(line, file=sys.stderr)
    sys.stderr.flush()


def _print_outcome(
    response: ChainResponse, out: TextIO, summary: str, hints: _Hints, *,
    summary_shown: bool = False,
) -> None:
    """The final output on success; else the failure (and each validation problem) on
    stderr. ``summary_shown``: the failure line is already on screen (the live table)."""
    if response.success:
        out.write(_pretty(response.final_output) + "\n")
        out.flush()
        return
    _print_failure(response, summary, hints, summary_shown=summary_shown)


class _PlainDisplay(_Display):
    """stdout not a TTY: one line per event, then the final output."""

    def __init__(self, request: ChainRequest, out: TextIO, hints: _Hints) -> None:
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


class _LiveDisplay(_Display):
    """A TTY: a rich live table while the chain runs, then the final output."""

    def __init__(self, request: ChainRequest, hints: _Hints) -> None:
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
