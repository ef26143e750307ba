"""The ``a2e-host`` command line (typer). Parsing only: each command's work lives in
:mod:`a2e_host.commands`.

Exit codes: 0 success, 1 failure (a chain failed, a chain is invalid for ``validate``),
2 usage or invalid input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(
    name="a2e-host",
    help="An A2E protocol host: runs chain DAGs for agents over WebSocket or stdio.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="TOML configuration file.", dir_okay=False)
]
ToolsOpt = Annotated[
    list[str] | None, typer.Option("--tools", help="Enable a tool pack (repeatable).")
]
AllowProcOpt = Annotated[
    list[str] | None,
    typer.Option("--allow-proc", help="Allow proc nodes to run this executable (repeatable)."),
]
SkillsOpt = Annotated[
    list[Path] | None, typer.Option("--skills", help="Directory of declarative skills.")
]
RootOpt = Annotated[
    Path | None, typer.Option("--root", help="Directory file tools and procs are confined to.")
]
LogFormatOpt = Annotated[
    str | None, typer.Option("--log-format", help="auto, console or json (stderr).")
]
LogLevelOpt = Annotated[
    str | None, typer.Option("--log-level", help="debug, info, warning, error.")
]


def _overrides(**values: Any) -> dict[str, Any]:
    """CLI values that were given (None and empty lists mean 'not given')."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value is None or value == []:
            continue
        if isinstance(value, list):
            value = tuple(str(v) for v in value)
        elif isinstance(value, Path):
            value = str(value)
        out[key] = value
    return out


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="TCP port (default 8765; 0 = any).")] = None,
    config: ConfigOpt = None,
    tools: ToolsOpt = None,
    allow_proc: AllowProcOpt = None,
    skills: SkillsOpt = None,
    root: RootOpt = None,
    auth_token: Annotated[str | None, typer.Option(help="Require this token.")] = None,
    allow_origin: Annotated[
        list[str] | None, typer.Option(help="Accept this browser Origin (repeatable).")
    ] = None,
    log_format: LogFormatOpt = None,
    log_level: LogLevelOpt = None,
) -> None:
    """Serve A2E over WebSocket (subprotocol a2e.v1)."""
    from .commands.serve import serve_main

    serve_main(
        config,
        _overrides(
            host=host, port=port, tools=tools, allow_proc=allow_proc, skills_dirs=skills,
            root=root, auth_token=auth_token, allowed_origins=allow_origin,
            log_format=log_format, log_level=log_level,
        ),
    )


@app.command()
def stdio(
    config: ConfigOpt = None,
    tools: ToolsOpt = None,
    allow_proc: AllowProcOpt = None,
    skills: SkillsOpt = None,
    root: RootOpt = None,
    log_format: LogFormatOpt = None,
    log_level: LogLevelOpt = None,
) -> None:
    """Speak A2E as NDJSON on stdin/stdout (logs on stderr)."""
    from .commands.serve import stdio_main

    stdio_main(
        config,
        _overrides(
            tools=tools, allow_proc=allow_proc, skills_dirs=skills, root=root,
            log_format=log_format, log_level=log_level,
        ),
    )


@app.command()
def run(
    chain: Annotated[Path, typer.Argument(help="Chain file: a chain/req body (JSON).")],
    input: Annotated[
        str | None, typer.Option("--input", help="initial_input as JSON, or @file.json.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the chain/resp only.")] = False,
    events: Annotated[
        bool, typer.Option("--events", help="With --json: NDJSON events too.")
    ] = False,
    config: ConfigOpt = None,
    tools: ToolsOpt = None,
    allow_proc: AllowProcOpt = None,
    skills: SkillsOpt = None,
    root: RootOpt = None,
    log_format: LogFormatOpt = None,
    log_level: LogLevelOpt = None,
) -> None:
    """Run a chain file in-process, with live progress."""
    from .commands.run import run_main

    raise typer.Exit(
        run_main(
            chain, input, json_out=json_out, events=events, config_path=config,
            overrides=_overrides(
                tools=tools, allow_proc=allow_proc, skills_dirs=skills, root=root,
                log_format=log_format, log_level=log_level,
            ),
        )
    )


@app.command()
def validate(
    chain: Annotated[Path, typer.Argument(help="Chain file: a chain/req body (JSON).")],
    json_out: Annotated[bool, typer.Option("--json", help="Diagnostics as JSON.")] = False,
    config: ConfigOpt = None,
    tools: ToolsOpt = None,
    allow_proc: AllowProcOpt = None,
    skills: SkillsOpt = None,
) -> None:
    """Check a chain file without running it; exit 1 when invalid."""
    from .commands.validate import validate_main

    raise typer.Exit(
        validate_main(
            chain, json_out=json_out, config_path=config,
            overrides=_overrides(tools=tools, allow_proc=allow_proc, skills_dirs=skills),
        )
    )


@app.command()
def graph(
    chain: Annotated[Path, typer.Argument(help="Chain file: a chain/req body (JSON).")],
    format: Annotated[str, typer.Option("--format", help="mermaid or dot.")] = "mermaid",
) -> None:
    """Print the chain as a Mermaid or Graphviz diagram."""
    from .commands.graph import graph_main

    raise typer.Exit(graph_main(chain, format))


@app.command("tools")
def tools_cmd(
    json_out: Annotated[bool, typer.Option("--json", help="As JSON, with schemas.")] = False,
    config: ConfigOpt = None,
    tools: ToolsOpt = None,
    allow_proc: AllowProcOpt = None,
    skills: SkillsOpt = None,
    root: RootOpt = None,
) -> None:
    """List the tools, skills and proc allowlist this configuration exposes."""
    from .commands.tools import tools_main

    raise typer.Exit(
        tools_main(
            json_out=json_out, config_path=config,
            overrides=_overrides(tools=tools, allow_proc=allow_proc, skills_dirs=skills, root=root),
        )
    )


@app.command()
def schema(
    out: Annotated[Path | None, typer.Option("--out", help="Directory (default: print).")] = None,
) -> None:
    """Write a JSON Schema for every message (default: schemas/ printed as one document)."""
    from .commands.schema import schema_main

    raise typer.Exit(schema_main(out))


def main() -> None:
    """Console-script entry point."""
    app()
