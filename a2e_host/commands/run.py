"""``a2e-host run CHAIN.json``: run a chain file in this process, with live progress.

Layer: command. No shortcut: a :class:`~a2e_host.host.Host` is built from the
configuration, an in-memory connection is opened to it, the client handshakes (asking for
``chains``, ``tools``, ``proc`` and ``skill``), sends the ``chain/req`` and reads its
events until the ``chain/resp`` — the path a wire request takes (plugin, validation,
scheduler).

Output:

* on a TTY: a live table of the nodes (status, durations, map items with a progress
  bar), then the final output as pretty JSON;
* stdout not a TTY: one plain line per ``chain/event``, then the final output;
* ``--json``: the ``chain/resp`` only, one JSON line (with ``--events``, each
  ``chain/event`` as an NDJSON line before it).

Tool packs: when neither ``--tools`` nor the configuration (file or ``A2E_TOOLS``) names
any, ``fs``, ``text`` and ``json`` are enabled
(:data:`~a2e_host.config.LOCAL_TOOL_PACKS`, what the examples need). Host logs go to
stderr at ``warning`` unless ``--log-level`` says otherwise.

Ctrl-C (SIGINT) or SIGTERM sends ``chain/cancel``: the host cancels the running nodes
(processes killed) and the ``cancelled`` response is printed. A second Ctrl-C, or no
response within :data:`CANCEL_WAIT` seconds, closes the connection (which cancels too).

Exit codes: 0 the chain succeeded; 1 it failed (a node error, a timeout, cancelled);
2 usage: the file cannot be read or is not a chain, ``--input`` is not a JSON object, the
configuration is bad, or the host refused the chain as invalid (``chain_invalid``,
``chain_cycle``, ``chain_limit`` at validation).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import anyio
import msgspec

from ..codec import decode_message, encode_message
from ..exceptions import A2EError
from ..messages import ChainEvent, ChainRequest, ChainResponse

__all__ = [
    "CANCEL_WAIT",
    "ChainFileError",
    "read_chain_request",
    "run_main",
]

"""Tool packs enabled when neither ``--tools`` nor the configuration names any."""

CANCEL_WAIT = 10.0
"""Seconds to wait for the ``cancelled`` response after Ctrl-C before closing."""

INVALID_CODES = frozenset({"chain_invalid", "chain_cycle", "chain_limit"})
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
_REQUEST_FIELDS = frozenset(ChainRequest.__struct_fields__) | {"type"}


class ChainFileError(ValueError):
    """A chain file or ``--input`` that cannot be used; the message says which and why."""


def read_chain_request(path: Path, input_text: str | None = None) -> ChainRequest:
    """Read a chain file: a ``chain/req`` body in JSON (``type``, ``id``, ``ts`` and
    ``session_id`` may be left out and are filled in).

    Args:
        path: the JSON file.
        input_text: ``--input``: a JSON object, or ``@file.json``; merged over the file's
            ``initial_input`` (its keys win). None keeps the file's.

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
    body = {k: v for k, v in body.items() if k in _REQUEST_FIELDS}
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
        message = decode_message(msgspec.json.encode(body))
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
) -> int:
    """Run the chain file ``chain`` through an in-process host and print the result.

    Args:
        chain: a JSON file holding a ``chain/req`` body.
        input: ``--input``: JSON object text or ``@file.json``, merged over ``initial_input``.
        json_out: print the ``chain/resp`` only (one JSON line).
        events: with ``json_out``, print each ``chain/event`` as an NDJSON line first.
        config_path: the TOML configuration, None for defaults and ``A2E_*`` variables.
        overrides: CLI values for the configuration (``tools``, ``allow_proc``, ``root`` …).

    Returns:
        The exit code: 0 success, 1 the chain failed, 2 usage or an invalid chain.
    """
    try:
        request = read_chain_request(chain, input)
    except ChainFileError as exc:
        print(f"a2e-host run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        config = _load_config(config_path, overrides)
    except ValueError as exc:
        print(f"a2e-host run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from ..logs import configure_logging

    configure_logging(config.log_format, config.log_level)
    if json_out:
        display: _Display = _JsonDisplay(sys.stdout, events)
    elif sys.stdout.isatty():
        display = _LiveDisplay(request)
    else:
        display = _PlainDisplay(request, sys.stdout)
    response = anyio.run(_run, request, config, display)
    if response is None:
        return EXIT_FAILED
    if response.success:
        return EXIT_OK
    code = (response.error or {}).get("code", "")
    return EXIT_USAGE if code in INVALID_CODES and response.nodes_run == 0 else EXIT_FAILED


def _load_config(config_path: Path | None, overrides: dict[str, Any]) -> Any:
    from ..config import load_config, with_local_tools

    overrides = dict(overrides)
    overrides.setdefault("log_level", "warning")
    return with_local_tools(load_config(config_path, overrides=overrides))


async def _run(request: ChainRequest, config: Any, display: _Display) -> ChainResponse | None:
    from ..client import ClientError, ConnectionLost, connect_memory
    from ..host import Host

    host = Host(config)
    response: ChainResponse | None = None
    failure: ClientError | None = None
    interrupted = anyio.Event()
    try:
        async with connect_memory(host, agent_id="a2e-host run") as client:
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
                except ConnectionLost as exc:
                    if not interrupted.is_set():
                        failure = exc
                except ClientError as exc:
                    failure = exc
                finally:
                    tg.cancel_scope.cancel()
    except ClientError as exc:  # the handshake failed
        failure = exc
    finally:
        display.end()
    if failure is not None:
        display.abort(f"a2e-host run: {failure}")
        return None
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
    display.response(response)
    return response


async def _cancel_on_signal(run: Any, display: _Display, interrupted: anyio.Event) -> None:
    """First SIGINT/SIGTERM: ``chain/cancel``; a second one, or no answer within
    :data:`CANCEL_WAIT` seconds: close the connection (which cancels the chain too)."""
    try:
        receiver = anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM)
    except (NotImplementedError, ValueError, RuntimeError):  # not the main thread
        return
    with receiver as signals:
        async for _ in signals:
            break
        interrupted.set()
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


def _pretty(value: Any) -> str:
    return json.dumps(msgspec.to_builtins(value), indent=2, ensure_ascii=False)


def _print_outcome(
    response: ChainResponse, out: TextIO, summary: str, *, summary_shown: bool = False
) -> None:
    """The final output on success; else the failure (and each validation problem) on
    stderr. ``summary_shown``: the failure line is already on screen (the live table)."""
    if response.success:
        out.write(_pretty(response.final_output) + "\n")
        out.flush()
        return
    if not summary_shown:
        print(f"a2e-host run: {summary}", file=sys.stderr)
    errors = ((response.error or {}).get("details") or {}).get("errors") or []
    for problem in errors:
        if isinstance(problem, dict):
            where = ".".join(str(p) for p in (problem.get("node_id"), problem.get("field")) if p)
            print(f"  - {where + ': ' if where else ''}{problem.get('message', problem)}",
                  file=sys.stderr)
    sys.stderr.flush()


class _PlainDisplay(_Display):
    """stdout not a TTY: one line per event, then the final output."""

    def __init__(self, request: ChainRequest, out: TextIO) -> None:
        from ..progress import ChainProgress

        self.out = out
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
        _print_outcome(response, self.out, self.progress.summary())


class _LiveDisplay(_Display):
    """A TTY: a rich live table while the chain runs, then the final output."""

    def __init__(self, request: ChainRequest) -> None:
        from rich.console import Console
        from rich.live import Live

        from ..progress import ChainProgress

        self.console = Console()
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
        _print_outcome(response, sys.stdout, self.progress.summary(), summary_shown=True)
