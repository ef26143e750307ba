"""``a2e-host run CHAIN.json``: run a chain file in this process, with live progress.

Layer: command. No shortcut: a :class:`~a2e_host.runtime.host.Host` is built from the
configuration, an in-memory connection is opened to it, the client handshakes (asking for
every capability the configuration serves: ``proc`` only with ``--allow-proc``; with the
host's own ``auth_token`` when one is set), sends the ``chain/req`` and reads its events
until the ``chain/resp`` — the path a wire request takes (plugin, validation, scheduler).

Output (:mod:`~a2e_host.commands.run_display`): a live table on a TTY, one plain line per
``chain/event`` otherwise, the ``chain/resp`` alone with ``--json`` (``--events`` adds
the events as NDJSON), ``final_output`` alone with ``--final`` (the request then asks
the host for no events, ``streaming: false``, and a response without ``outputs``,
``include_outputs: false``). A failure goes to stderr: one summary line, then each
validation problem, with the command-line fix where the host's hint speaks of the wire
(``--allow-proc`` for a proc node; ``A2E_MAX_…`` or ``[limits]`` for a ceiling that
refused the chain).

A key of the chain file that no field reads (a misspelling: ``"timout"``) is said on
stderr before the run, one ``a2e-host run: warning: …`` line each, as ``validate`` warns.

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

``--record FILE.ndjson`` writes every ``chain/event`` and the ``chain/resp`` to FILE as
they arrive, one per line (:mod:`~a2e_host.commands.run_record`; an existing FILE only with
``--force``); with ``--final`` the host is then asked for its events all the same. A
record that cannot be written is said on stderr and makes a successful run exit 1.

A closed stdout (``a2e-host run … | head``) ends the run quietly: the chain is cancelled,
nothing more is printed (no traceback), and the exit code is 141, a SIGPIPE'd process's
(128 + 13), as for any tool in a shell pipeline.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import msgspec

from ..chains.messages import ChainRequest, ChainResponse, chain_codec
from ..chains.unknown_fields import unknown_field_warnings
from ..errors import cancelled_failure
from ..exceptions import A2EError
from .run_display import Display, open_display
from .run_record import RecordFileError, RunRecord
from .run_streams import redacted_stdout

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
    path: Path, input_text: str | None = None, *, extra: dict[str, Any] | None = None,
    warnings: list[dict[str, Any]] | None = None,
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
        warnings: when given, a ``chain_warning`` is appended to it for each key of the
            file no field reads (a misspelling, ``"timout"``), as ``validate`` warns
            (:func:`~a2e_host.chains.unknown_fields.unknown_field_warnings`).

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
    if warnings is not None:
        warnings.extend(unknown_field_warnings(body))
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
    record: Path | None = None,
    force: bool = False,
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
        record: ``--record``: write each ``chain/event`` and the ``chain/resp`` to this
            file, one JSON object per line; None records nothing.
        force: ``--force``: overwrite an existing ``record`` file.

    Returns:
        The exit code: 0 success, 1 the chain failed, 2 usage, a bad configuration or an
        invalid chain, 128 + the signal number when interrupted (130 Ctrl-C, 143 SIGTERM)
        or when stdout was closed (141: the chain is cancelled, nothing more printed).
    """
    try:
        # --final needs neither events nor outputs: ask for the response alone (the
        # events all the same when they are recorded)
        extra: dict[str, Any] | None = None
        if final_only:
            extra = {"include_outputs": False} if record else {"streaming": False,
                                                                "include_outputs": False}
        stray: list[dict[str, Any]] = []
        request = read_chain_request(chain, input, extra=extra, warnings=stray)
    except ChainFileError as exc:
        print(f"a2e-host run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from .common import problem_line

    for warning in stray:  # as validate warns: a misspelt field would do nothing, silently
        print(f"a2e-host run: warning: {problem_line(warning)}", file=sys.stderr)
    from ..logs import configure_logging
    from ..runtime.host import Host
    from ..telemetry.setup import configure_telemetry
    from .common import load_command_config

    try:
        config = load_command_config(config_path, overrides, local_defaults=True)
        if config.store:  # a local run is never durable: leave a serving host's store be
            config = msgspec.structs.replace(config, store="")
        # stderr through the log writer, as for stdio/serve: redacted (README "Secrets")
        configure_logging(config.log_format, config.log_level, auto_level="warning",
                          take_over_stderr=True)
    except ValueError as exc:
        print(f"a2e-host run: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # the record file is opened (with --force: emptied) only once the host and its
    # telemetry are built: a configuration error leaves the user's file as it was
    recorder: RunRecord | None = None
    try:
        try:
            host = Host(config)  # a plugin refusing the configuration raises ValueError
        except ValueError as exc:
            print(f"a2e-host run: configuration error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        try:  # spans as otel_exporter says (console: on stderr, never stdout)
            stop_telemetry = configure_telemetry(config)
        except ValueError as exc:
            print(f"a2e-host run: configuration error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        try:
            try:
                recorder = (RunRecord.create(record, force=force) if record is not None
                            else None)
            except RecordFileError as exc:
                print(f"a2e-host run: {exc}", file=sys.stderr)
                return EXIT_USAGE
            with redacted_stdout():
                display = open_display(request, config.allow_proc, final_only=final_only,
                                       json_out=json_out, events=events)
                response, signum = anyio.run(_run, request, host, display, recorder)
        finally:
            stop_telemetry()
    finally:
        if recorder is not None:
            recorder.close()
    if recorder is not None:
        if recorder.error is not None:
            print(f"a2e-host run: --record file {str(recorder.path)!r} is incomplete: "
                  f"writing it failed after {recorder.lines} lines ({recorder.error})",
                  file=sys.stderr)
            if signum is None and response is not None and response.success:
                return EXIT_FAILED
    if signum is not None:
        return 128 + signum
    if response is None:
        return EXIT_FAILED
    if response.success:
        return EXIT_OK
    code = response.error.code if response.error is not None else ""
    return EXIT_USAGE if code in INVALID_CODES and response.nodes_run == 0 else EXIT_FAILED


class _Interrupt:
    """Set by the first SIGINT/SIGTERM: ``event`` and the signal's number."""

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.signum: int | None = None


async def _run(
    request: ChainRequest, host: Any, display: Display, recorder: RunRecord | None = None
) -> tuple[ChainResponse | None, int | None]:
    """Run ``request`` on ``host`` over an in-memory connection; ``recorder`` gets each
    frame as it arrives.

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
            auth_token=host.config.auth_token or next(iter(host.config.auth_tokens.values()), ""),
        ) as client:
            run = client.send_request(request)
            async with anyio.create_task_group() as tg:
                tg.start_soon(_cancel_on_signal, run, display, interrupted)
                display.begin()
                try:
                    async for message in run:
                        if recorder is not None:
                            recorder.write(message)
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
            error=cancelled_failure(
                "the run was interrupted and the connection closed before the host answered"
            ),
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


async def _cancel_on_signal(run: Any, display: Display, interrupted: _Interrupt) -> None:
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
