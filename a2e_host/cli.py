"""The ``a2e-host`` command line. Parsing only: each command's work lives in
:mod:`a2e_host.commands`, imported when that command runs.

Layer: CLI. Built on :mod:`argparse` (standard library) so that start-up stays short:
``a2e-host stdio`` is spawned by agents, and everything imported before the
``handshake/resp`` is latency they wait for. This module imports nothing beyond the
standard library and the package's ``__init__``.

Every list flag (``--tools``, ``--allow-proc``, ``--skills``, ``--allow-origin``) takes
a comma-separated list, may be repeated, or both: ``--tools fs,json`` is
``--tools fs --tools json`` is ``A2E_TOOLS=fs,json``. ``--tools +PACK`` adds PACK to the
packs the command would otherwise enable (see :mod:`a2e_host.commands.common`).

Exit codes: 0 success; 1 failure (a chain failed, a chain is invalid for ``validate``);
2 usage or invalid input (one line on stderr says which and how to fix it); 130
interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from . import __version__

__all__ = ["build_parser", "main"]

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr, exit code 2, and
    which takes no abbreviated option (``--tool fs`` is an error, not ``--tools fs``):
    a silently completed typo enables something else than was meant."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see '{self.prog} --help')\n")


class _ListAction(argparse.Action):
    """Append comma-separated values: ``--tools fs,json --tools text`` → fs, json, text."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        items = list(getattr(namespace, self.dest, None) or [])
        items.extend(part.strip() for part in str(values).split(",") if part.strip())
        setattr(namespace, self.dest, items)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(
            f"must be an integer 0-65535 (0 picks a free port), got {text!r}"
        )
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


_FORMATTER = argparse.RawDescriptionHelpFormatter


def _add_config(parser: argparse.ArgumentParser, *, root: bool = True) -> None:
    group = parser.add_argument_group("configuration (command line > A2E_* environment > file)")
    group.add_argument("-c", "--config", metavar="FILE",
                       help="TOML configuration file (default: $A2E_CONFIG, if set)")
    group.add_argument("--tools", action=_ListAction, metavar="PACK[,PACK...]",
                       help="tool packs to enable (repeatable); +PACK adds to the packs "
                            "enabled otherwise")
    group.add_argument("--allow-proc", action=_ListAction, metavar="EXE[,EXE...]",
                       help="executables proc nodes may run (repeatable)")
    group.add_argument("--skills", action=_ListAction, metavar="DIR[,DIR...]",
                       help="directories of declarative skills (repeatable)")
    if root:
        group.add_argument("--root", metavar="DIR",
                           help="directory file tools and proc nodes are confined to "
                                "(default: the working directory)")


def _add_store(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("durable runs")
    group.add_argument("--store", metavar="PATH|URL",
                       help="the run store's file (SQLite, created 0600) or a postgresql:// "
                            "URL shared by replicas; none: durable runs are refused")
    group.add_argument("--durability", choices=("normal", "full"),
                       help="normal (default): commits survive a host crash; full: also an "
                            "OS crash (an fsync per commit)")


def _add_logging(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("logging (always on stderr)")
    group.add_argument("--log-format", choices=("auto", "console", "json"),
                       help="auto: console on a terminal, JSON lines otherwise")
    group.add_argument("--log-level", choices=("auto", "debug", "info", "warning", "error"),
                       help="auto (the default): warning for stdio and run, info for serve")


def _add_store_to_read(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("run store (command line > A2E_STORE > file)")
    group.add_argument("--store", metavar="PATH|URL",
                       help="the run store's SQLite file or postgresql:// URL")
    group.add_argument("-c", "--config", metavar="FILE",
                       help="TOML configuration file naming the store (default: "
                            "$A2E_CONFIG, if set)")


def _command(
    sub: Any, name: str, summary: str, description: str, handler: Callable[[Any], int]
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=summary, description=f"{summary}\n\n{description}".rstrip(),
        formatter_class=_FORMATTER,
    )
    parser.set_defaults(handler=handler, command_parser=parser)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, every sub-command included (nothing heavy is imported)."""
    parser = _Parser(
        prog="a2e-host",
        description="An A2E protocol host: runs chain DAGs for agents over WebSocket or "
                    "stdio, or locally from a file.",
        epilog="Run 'a2e-host COMMAND --help' for a command's options.",
        formatter_class=_FORMATTER,
        allow_abbrev=False,
    )
    parser.add_argument("-V", "--version", action="version",
                        version=f"a2e-host {__version__} (Python {sys.version.split()[0]})")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=_Parser)

    p = _command(sub, "serve", "Serve A2E over WebSocket (subprotocol a2e.v1).",
                 "Prints 'a2e-host listening on ws://HOST:PORT' on stderr once listening; "
                 "SIGINT/SIGTERM stop it\ngracefully. Enables only the tool packs you name.",
                 _serve)
    p.add_argument("--host", metavar="ADDR", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=_port, metavar="PORT",
                   help="TCP port (default 8765; 0 picks a free one)")
    _add_config(p)
    p.add_argument("--auth-token", metavar="TOKEN",
                   help="require this token in handshake/req or 'Authorization: Bearer'")
    p.add_argument("--allow-origin", action=_ListAction, metavar="ORIGIN[,ORIGIN...]",
                   help="accept this browser Origin (repeatable)")
    _add_store(p)
    p.add_argument("--replica-id", metavar="NAME",
                   help="this replica's name in a shared postgresql:// store (default: "
                        "hostname-pid); give each replica its own")
    _add_logging(p)

    p = _command(sub, "stdio", "Speak A2E as NDJSON on stdin/stdout (logs on stderr).",
                 "One JSON message per line. Closing stdin lets chains in flight finish, then "
                 "exits 0.\nEnables only the tool packs you name.", _stdio)
    _add_config(p)
    _add_store(p)
    _add_logging(p)

    p = _command(sub, "mcp", "Offer chains to MCP clients (MCP server on stdio, or HTTP).",
                 "Tools: run_chain, validate_chain and one per active skill. Without --port: "
                 "MCP on stdin/stdout;\nwith --port: streamable HTTP at http://HOST:PORT/mcp. "
                 "Needs the 'mcp' extra.", _mcp)
    p.add_argument("--port", type=_port, metavar="PORT",
                   help="serve streamable HTTP on this port (0 picks a free one)")
    p.add_argument("--host", metavar="ADDR", default="127.0.0.1",
                   help="HTTP bind address (default 127.0.0.1)")
    _add_config(p)
    _add_logging(p)

    p = _command(sub, "run", "Run a chain file in-process, with live progress.",
                 "Exit codes: 0 the chain succeeded, 1 it failed, 2 invalid chain or usage, "
                 "130 interrupted,\n141 stdout closed (the chain is cancelled).\n"
                 "Tool packs fs, text and json are enabled when none is named (--tools +PACK "
                 "adds one).", _run)
    p.add_argument("chain", metavar="CHAIN.json", help="a chain/req body (JSON)")
    p.add_argument("--input", metavar="JSON|@FILE",
                   help="initial_input as a JSON object (or @file.json), merged over the "
                        "file's")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the chain/resp only, as JSON")
    out.add_argument("--final", action="store_true",
                     help="print final_output only, as one line of JSON (the host is asked "
                          "for no events and no outputs)")
    p.add_argument("--events", action="store_true",
                   help="with --json: each chain/event as an NDJSON line before the response")
    p.add_argument("--record", metavar="FILE.ndjson",
                   help="write each chain/event and the chain/resp to FILE, one JSON object "
                        "per line (draw it with 'graph CHAIN --events FILE')")
    p.add_argument("--force", action="store_true",
                   help="with --record: overwrite FILE if it exists")
    _add_config(p)
    _add_logging(p)

    p = _command(sub, "validate", "Check a chain file without running it.",
                 "Validates as 'run' would, against this configuration's tools, skills and "
                 "proc allowlist.\nExit codes: 0 valid, 1 invalid, 2 unreadable file or bad "
                 "configuration.", _validate)
    p.add_argument("chain", metavar="CHAIN.json", help="a chain/req body (JSON)")
    p.add_argument("--json", action="store_true", help="diagnostics as one JSON object")
    _add_config(p, root=True)

    p = _command(sub, "graph", "Print the chain as a Mermaid or Graphviz diagram.",
                 "With --events (a file 'run --record' wrote) or --run (a stored run), each "
                 "node coloured by\nits outcome (done, error, skipped, running, interrupted, "
                 "never_started) with its duration;\n--format html writes one "
                 "self-contained page: the diagram, a timeline and the failures.", _graph)
    p.add_argument("chain", metavar="CHAIN.json", nargs="?",
                   help="a chain/req body (JSON); leave out with --run")
    p.add_argument("--format", default="mermaid", metavar="mermaid|dot|html",
                   help="diagram language (default mermaid); html with --events or --run")
    p.add_argument("--events", metavar="FILE.ndjson",
                   help="draw the run recorded in FILE ('a2e-host run CHAIN.json --record "
                        "FILE')")
    p.add_argument("--run", metavar="RUN", help="draw this stored run's chain and outcomes")
    _add_store_to_read(p)

    p = _command(sub, "runs", "List and show the runs kept in a run store.",
                 "Reads the store file directly: no host needs to run. Exit codes: 0 shown, "
                 "1 unknown or expired run,\n2 usage, or a store that is missing or "
                 "unreadable.", _runs_usage)
    actions = p.add_subparsers(title="actions", metavar="ACTION", parser_class=_Parser)
    q = _command(actions, "list", "List runs, newest first.", "", _runs_list)
    q.add_argument("--status", metavar="STATUS", action="append",
                   help="only runs in this status (running, succeeded, failed, cancelled, "
                        "timeout, interrupted, budget_exhausted, expired); several: "
                        "comma-separated or the flag repeated")
    q.add_argument("--failed", action="store_true",
                   help="also every unsuccessful status (failed, cancelled, timeout, "
                        "interrupted, budget_exhausted)")
    q.add_argument("--limit", type=_positive, default=50, metavar="N",
                   help="at most N runs (default 50)")
    q.add_argument("--cursor", metavar="CURSOR",
                   help="continue after the previous page (its last line names the cursor)")
    q.add_argument("--json", action="store_true", help="as one JSON object")
    _add_store_to_read(q)
    q = _command(actions, "show", "Show one run: its record and response summary.",
                 "With --events, every stored frame as one line, read page by page.",
                 _runs_show)
    q.add_argument("run", metavar="RUN", help="the run id")
    q.add_argument("--events", action="store_true", help="also every stored frame, in seq order")
    q.add_argument("--after", type=_non_negative, default=0, metavar="SEQ",
                   help="with --events: start after this seq (default 0)")
    q.add_argument("--limit", type=_positive, default=None, metavar="N",
                   help="with --events: at most N frames (default all)")
    q.add_argument("--json", action="store_true",
                   help="the record as one JSON line; with --events each stored frame "
                        "follows as an NDJSON line")
    _add_store_to_read(q)

    p = _command(sub, "tools", "List the tools, skills and proc allowlist a configuration "
                 "exposes.", "With --all, also the installed tool packs that are not enabled.",
                 _tools)
    p.add_argument("--json", action="store_true", help="as JSON, with input/output schemas")
    p.add_argument("--all", action="store_true", dest="all_packs",
                   help="also list installed tool packs that are not enabled")
    _add_config(p)

    p = _command(sub, "schema", "Write a JSON Schema for every message.",
                 "Default: print them as one document.", _schema)
    p.add_argument("--out", metavar="DIR", help="write one file per message into DIR")
    return parser


# ── handlers: import the command's module only now ───────────────────────────


def _overrides(args: argparse.Namespace, **fields: str) -> dict[str, Any]:
    """CLI values that were given, by HostConfig field name (``fields``: field → attr)."""
    out: dict[str, Any] = {}
    for field, attr in fields.items():
        value = getattr(args, attr, None)
        if value is None or value == []:
            continue
        out[field] = tuple(value) if isinstance(value, list) else value
    return out


_CONFIG_FIELDS = {"tools": "tools", "allow_proc": "allow_proc", "skills_dirs": "skills",
                  "root": "root"}
_LOG_FIELDS = {"log_format": "log_format", "log_level": "log_level"}
_STORE_FIELDS = {"store": "store", "durability": "durability"}


def _import_host_without_rich() -> None:
    """Import the host's modules for ``serve`` / ``stdio`` without loading :mod:`rich`.

    structlog imports rich at import time when it is installed (for pretty tracebacks
    in its console renderer), ~40 ms of start-up the host never uses: its renderer is
    given ``plain_traceback``. A ``None`` entry in :data:`sys.modules` makes that optional
    import fail as if rich were absent (the import system's documented way to block a
    module); the entry is removed again, so later code may import rich normally.
    """
    if "structlog" in sys.modules or "rich" in sys.modules:
        return
    sys.modules["rich"] = None  # type: ignore[assignment]
    try:
        import structlog  # noqa: F401
    finally:
        del sys.modules["rich"]


def _serve(args: argparse.Namespace) -> int:
    _import_host_without_rich()
    from .commands.serve import serve_main

    serve_main(args.config, _overrides(
        args, host="host", port="port", auth_token="auth_token",
        allowed_origins="allow_origin", replica_id="replica_id", **_CONFIG_FIELDS,
        **_STORE_FIELDS, **_LOG_FIELDS,
    ))
    return 0


def _stdio(args: argparse.Namespace) -> int:
    _import_host_without_rich()
    from .commands.serve import stdio_main

    stdio_main(args.config, _overrides(args, **_CONFIG_FIELDS, **_STORE_FIELDS,
                                       **_LOG_FIELDS))
    return 0


def _mcp(args: argparse.Namespace) -> int:
    from .commands.mcp import mcp_main

    return mcp_main(args.config, _overrides(args, **_CONFIG_FIELDS, **_LOG_FIELDS),
                    port=args.port, bind=args.host)


def _run(args: argparse.Namespace) -> int:
    if args.events and not args.json:
        print("a2e-host run: --events goes with --json (see 'a2e-host run --help')",
              file=sys.stderr)
        return EXIT_USAGE
    if args.force and args.record is None:
        print("a2e-host run: --force goes with --record FILE (see 'a2e-host run --help')",
              file=sys.stderr)
        return EXIT_USAGE
    from pathlib import Path

    from .commands.run import run_main

    return run_main(
        Path(args.chain), args.input, json_out=args.json, events=args.events,
        final_only=args.final, config_path=args.config,
        overrides=_overrides(args, **_CONFIG_FIELDS, **_LOG_FIELDS),
        record=Path(args.record) if args.record is not None else None, force=args.force,
    )


def _validate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .commands.validate import validate_main

    return validate_main(Path(args.chain), json_out=args.json, config_path=args.config,
                         overrides=_overrides(args, **_CONFIG_FIELDS))


def _graph(args: argparse.Namespace) -> int:
    from pathlib import Path

    if (args.chain is None) == (args.run is None):
        args.command_parser.error("give either CHAIN.json or --run RUN")
    if args.run is not None and args.events is not None:
        args.command_parser.error("--events goes with CHAIN.json, not --run")
    if args.run is not None:
        from .commands.graph_run import graph_run_main

        return graph_run_main(args.run, args.format, store=args.store,
                              config_path=args.config)
    if args.store is not None or args.config is not None:
        args.command_parser.error("--store and --config go with --run")
    if args.events is not None:
        from .commands.graph_events import graph_events_main

        return graph_events_main(Path(args.chain), Path(args.events), args.format)
    if args.format == "html":
        args.command_parser.error("--format html draws a run: add --events FILE (a file "
                                  "'a2e-host run --record' wrote) or use --run RUN")
    from .commands.graph import graph_main

    return graph_main(Path(args.chain), args.format)


def _runs_usage(args: argparse.Namespace) -> int:
    args.command_parser.print_help(sys.stderr)
    return EXIT_USAGE


def _runs_list(args: argparse.Namespace) -> int:
    from .commands.runs_list import runs_list_main

    return runs_list_main(status=args.status, limit=args.limit, cursor=args.cursor,
                          json_out=args.json, store=args.store, config_path=args.config,
                          failed=args.failed)


def _runs_show(args: argparse.Namespace) -> int:
    if (args.after or args.limit is not None) and not args.events:
        args.command_parser.error("--after and --limit go with --events")
    from .commands.runs_show import runs_show_main

    return runs_show_main(args.run, events=args.events, after=args.after, limit=args.limit,
                          json_out=args.json, store=args.store, config_path=args.config)


def _tools(args: argparse.Namespace) -> int:
    from .commands.tools import tools_main

    return tools_main(json_out=args.json, all_packs=args.all_packs, config_path=args.config,
                      overrides=_overrides(args, **_CONFIG_FIELDS))


def _schema(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .commands.schema import schema_main

    return schema_main(Path(args.out) if args.out else None)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: parse ``argv`` (default ``sys.argv[1:]``) and run the
    command; exits with its code.

    Ctrl-C outside a command's own handling exits 130 without a traceback; a closed
    stdout (``a2e-host tools | head``) ends the command quietly.
    """
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # name the sub-command whose help lists what it takes
        getattr(args, "command_parser", parser).error(
            f"unrecognized arguments: {' '.join(extra)}"
        )
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        sys.exit(EXIT_USAGE)
    try:
        code = handler(args)
        sys.stdout.flush()
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        # the reader went away: say nothing, and keep the interpreter's final flush quiet
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)
    sys.exit(code)
