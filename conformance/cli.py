"""Command line: ``a2e-conformance (--stdio CMD | --ws URL) [options]``.

Installed with the package as the ``a2e-conformance`` console script;
``python -m conformance`` is the same from a checkout.

Layer: entry point. Exit status: 0 all selected cases passed (or were skipped),
1 some failed, 2 the host could not be reached or the kit itself is broken.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

from websockets.exceptions import InvalidURI

from .cases import Case, CaseError, load_cases
from .manifest import (
    LEVELS,
    README,
    case_level,
    coverage_problems,
    load_requirements,
    readme_with_table,
    render_markdown,
)
from .report import json_report, markdown_report, text_report
from .runner import CaseResult
from .suite import Target, run_suite

__all__ = ["main", "build_parser", "select"]


def default_jobs(target: Target) -> int:
    """Cases at once: 8 over WebSocket; over stdio 2 × CPUs, clamped to 2..8.

    Over stdio a case that cannot share a session spawns a host process, whose
    start-up is CPU-bound, so running more at once than the machine has cores only
    adds contention.
    """
    if target.transport == "ws":
        return 8
    return max(2, min(8, 2 * (os.cpu_count() or 1)))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="a2e-conformance",
        description="Run the A2E chains conformance cases against a host.")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--stdio", metavar="CMD",
                       help='host command speaking NDJSON on stdin/stdout, e.g. '
                            '"a2e-host stdio --tools conformance"')
    where.add_argument("--ws", metavar="URL", help="WebSocket URL, e.g. ws://127.0.0.1:8765")
    parser.add_argument("-k", metavar="PATTERN", action="append",
                        help="only cases whose id or requirement ids contain PATTERN "
                             "(repeat for any of several)")
    parser.add_argument("--level", choices=LEVELS, action="append",
                        help="only cases of this level (repeat for several): spec runs only "
                             "what the chains spec demands (conformance/README.md, Levels)")
    report = parser.add_mutually_exclusive_group()
    report.add_argument("--json", action="store_true", help="print a JSON report instead")
    report.add_argument("--markdown", action="store_true",
                        help="print a Markdown report instead (per-level scores, failed "
                             "requirements with their spec line)")
    parser.add_argument("-j", "--jobs", type=int, default=None,
                        help="cases run at once (default: 8 over WebSocket; over stdio, where "
                             "a connection is a host process, twice the CPU count, 2..8)")
    parser.add_argument("--shared", type=int, default=None, metavar="N",
                        help="over stdio, cases with the same handshake take turns on shared "
                             "sessions (one host process each): N for the largest group, one "
                             "for each other group (default 2; 0 = a process per case)")
    parser.add_argument("--fresh", action="store_true",
                        help="every case on a connection of its own (same as --shared 0)")
    parser.add_argument("--stderr", choices=("capture", "pass", "drop"), default="capture",
                        help="stdio host's stderr: shown on failure (capture, default), "
                             "passed through, or dropped")
    parser.add_argument("--auth-token", help="the token the host was configured with; "
                                             "enables the auth cases")
    parser.add_argument("--host-defaults", action="store_true",
                        help="the host runs with PROTOCOL.md §6 default ceilings; enables "
                             "the cases checking them")
    parser.add_argument("--fast-prune", action="store_true",
                        help="the host prunes a durable run within 2 s of its retention "
                             "passing (a2e-host: [store] prune_interval = 1); enables the "
                             "run_expired case")
    parser.add_argument("--patience", type=float, default=1.0, metavar="N",
                        help="multiply the kit's own waits (case timeouts, handshakes) by N "
                             "on a slow or busy machine; the cases' own bounds stay")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="list skipped cases and every requirement")
    parser.add_argument("--list", action="store_true", help="list the selected cases and exit")
    parser.add_argument("--skills-dir", action="store_true",
                        help="print the directory of the kit's fixture skills (start the "
                             "host with --skills DIR for the skill cases) and exit")
    parser.add_argument("--adapters-dir", action="store_true",
                        help="print the directory of the kit's host adapters (e.g. "
                             "a2e_sdk_stdio.py for the public SDK's host) and exit")
    parser.add_argument("--requirements", action="store_true",
                        help="print the manifest as a Markdown table and exit")
    parser.add_argument("--update-readme", action="store_true",
                        help="regenerate the requirement table in conformance/README.md")
    return parser


def select(cases: list[Case], patterns: list[str] | None) -> list[Case]:
    """The cases whose id or any requirement id contains any of ``patterns``
    (case-insensitive); all of them when no pattern is given."""
    if not patterns:
        return cases
    needles = [p.lower() for p in patterns]
    return [c for c in cases
            if any(n in c.id.lower() or any(n in r.lower() for r in c.requires)
                   for n in needles)]


def main(argv: list[str] | None = None) -> int:
    """Run the command line (the ``a2e-conformance`` console script).

    Returns:
        The exit status: 0 every selected case passed or was skipped, 1 some failed,
        2 the host could not be reached or the kit is broken, 130 interrupted.
    """
    args = build_parser().parse_args(argv)
    if args.skills_dir:
        print(Path(__file__).parent / "skills")
        return 0
    if args.adapters_dir:
        print(Path(__file__).parent / "adapters")
        return 0
    try:
        return _run(args)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `a2e-conformance --list | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _run(args: argparse.Namespace) -> int:
    try:
        requirements = load_requirements()
        all_cases = load_cases()
    except (CaseError, ValueError) as exc:
        print(f"conformance kit is broken: {exc}", file=sys.stderr)
        return 2
    if args.requirements:
        sys.stdout.write(render_markdown(requirements, all_cases))
        return 0
    if args.update_readme:
        table = render_markdown(requirements, all_cases)
        README.write_text(readme_with_table(README.read_text(encoding="utf-8"), table),
                          encoding="utf-8")
        return 0
    problems = coverage_problems(requirements, all_cases)
    if problems:
        print("conformance kit is broken:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    cases = select(all_cases, args.k)
    by_id = {r.id: r for r in requirements}
    if args.level:
        cases = [c for c in cases if case_level(c, by_id) in args.level]
        requirements = [r for r in requirements if r.level in args.level]
    if args.list:
        for case in cases:
            print(f"{case.id:<48} {', '.join(case.requires)}")
        return 0
    if not (args.stdio or args.ws):
        print("give --stdio CMD or --ws URL", file=sys.stderr)
        return 2
    target = Target("stdio" if args.stdio else "ws", args.stdio or args.ws,
                    stderr=args.stderr, auth_token=args.auth_token,
                    host_defaults=args.host_defaults, fast_prune=args.fast_prune,
                    patience=args.patience)

    def progress(result: CaseResult) -> None:
        if not (args.json or args.markdown):
            mark = {"passed": ".", "failed": "F", "skipped": "s"}[result.status]
            print(mark, end="", flush=True, file=sys.stderr)

    shared = 0 if args.fresh else args.shared
    if shared is not None and shared < 0:
        print("--shared must be 0 or more", file=sys.stderr)
        return 2
    try:
        results = asyncio.run(run_suite(cases, target, args.jobs or default_jobs(target),
                                        progress, shared=shared))
    except (RuntimeError, OSError, ValueError, InvalidURI) as exc:
        print(f"\ncannot run against the host: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(json_report(requirements, results, target.transport), indent=2))
    elif args.markdown:
        levels = ", ".join(args.level or LEVELS)
        print(markdown_report(requirements, results,
                              f"A2E conformance: {target.address} ({levels})"))
    else:
        print(file=sys.stderr)
        print(text_report(requirements, results, args.verbose))
    return 1 if any(r.status == "failed" for r in results) else 0
