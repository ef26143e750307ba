"""Host configuration: one immutable struct, built from a TOML file, ``A2E_*`` environment
variables and CLI flags (precedence: CLI > environment > file > defaults).

Layer: core (reads files only in :func:`load_config`).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from . import config_values as cv
from .grants import ToolGrant, check_grant_principals, parse_named_tokens, parse_tool_grants
from .limits import CEILINGS, Limits, limits_from_mapping
from .secrets import RequestSecretPolicy, Secret, parse_request_policy, parse_secrets

__all__ = [
    "ANONYMOUS_PRINCIPAL",
    "ENV_PREFIX",
    "HostConfig",
    "LOCAL_TOOL_PACKS",
    "TOKEN_PRINCIPAL",
    "ToolGrant",
    "load_config",
    "with_local_tools",
]

ANONYMOUS_PRINCIPAL = "anonymous"
"""The principal of every session on a host without tokens: they all see each other's
durable runs (configure ``auth_tokens`` to keep principals apart)."""

TOKEN_PRINCIPAL = "token"
"""The principal of a session that presented the single ``auth_token``."""

ENV_PREFIX = "A2E_"
"""Environment variables ``A2E_<FIELD>`` (upper case) set :class:`HostConfig` fields and
ceilings, e.g. ``A2E_PORT=9000``, ``A2E_MAX_NODES=100``, ``A2E_TOOLS=fs,text``."""


class HostConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Everything an operator can set. Times are float seconds, sizes int bytes.

    Attributes:
        limits: host-scope ceilings (PROTOCOL.md §6).
        tools: tool packs to enable (entry-point group ``a2e_host.tools``), e.g. ``["fs"]``.
        skills_dirs: directories of declarative skills (JSON or YAML chain files).
        allow_proc: executables proc nodes may run (names or paths; resolved to absolute
            paths). Empty: proc nodes are refused.
        proc_env_allow: environment variable names passed through to child processes
            (beside a minimal ``PATH``, ``LANG``, ``HOME``).
        proc_env_keys: environment variable names a proc node's ``env`` may set. Empty (the
            default): a node may set none. ``LD_*`` / ``DYLD_*`` are refused even if listed.
        max_procs: proc nodes running at once on the host, all sessions together
            (int, default 32); a further one waits for a slot, bounded by its chain's
            timeout, rather than fail.
        root: the directory file tools and proc ``cwd`` are confined to; None = the
            working directory at start.
        host / port: WebSocket bind address (loopback by default).
        auth_token: when set, handshakes must present it (or ``Authorization: Bearer``);
            its sessions' principal is :data:`TOKEN_PRINCIPAL`.
        auth_tokens: named tokens, principal name → token (TOML ``[auth.tokens]``,
            ``A2E_AUTH_TOKENS=alice:tok1,bob:tok2``): a handshake presenting one is the
            session of that principal, which alone may attach to, cancel, list and get its
            durable runs (PROTOCOL.md §5 Durable runs). With neither token set every
            session is the principal :data:`ANONYMOUS_PRINCIPAL`.
        tool_grants: principal → tool-name glob patterns (TOML ``[auth.tool_grants]``,
            ``A2E_TOOL_GRANTS=alice:fs.*|text.upper``): such a principal may list, call and
            chain only matching tools (``tool_denied``); others use every tool (§11).
        allowed_origins: browser ``Origin`` values the WebSocket server accepts; requests
            without an Origin header (non-browser clients) are always accepted.
        keepalive_interval: WebSocket ping interval, seconds; None disables.
        ws_compression: accept permessage-deflate when a client offers it. Off by default:
            events are small and mostly on loopback, where compressing each frame costs
            more CPU than it saves.
        shutdown_grace: seconds chains may run on after SIGINT/SIGTERM before cancel.
        handshake_timeout: seconds a connection may stay open without completing a
            handshake; then it gets ``error`` ``timeout`` and is closed (WebSocket 1008;
            stdio: the host exits). Must be > 0.
        max_connections: WebSocket connections open at once, all peers together; past
            it a new one is refused with HTTP 503 before the WebSocket upgrade.
        max_connections_per_peer: WebSocket connections open at once from one peer
            address (an IPv4 address, or an IPv6 /64 prefix); past it HTTP 503.
        auth_failure_delay: seconds a wrong ``auth_token`` waits before ``auth_failed``
            is sent, queued per peer address: n failures from one peer take at least
            n x this long however many connections it opens. 0 disables.
        outbox_high_water: queued outgoing frames per connection before producers wait.
        outbox_high_water_bytes: queued outgoing bytes per connection before producers
            wait (int bytes; whichever of the two marks is passed first applies).
        step_cache_max_entries: outputs the host's step cache keeps at most (PROTOCOL.md
            §5 Recovery; int, default 1024); 0 turns the cache off.
        step_cache_max_bytes: JSON-encoded bytes of the outputs it keeps at most (int
            bytes, default 16 MiB); an output over an eighth of it is never kept. 0 turns
            the cache off.
        store: the run store's file (SQLite) for durable runs, or a ``postgresql://``
            URL (a store replicas share); "" (the default): no store, and durable runs
            are refused. TOML ``[store] path``.
        durability: ``normal`` (a commit survives a crash of the host process) or
            ``full`` (also an OS crash or power loss: an fsync per commit, slower).
        store_retention: float seconds a finished run is kept after its end before its
            events are pruned and it reads ``expired`` (default 7 days); a request's own
            ``retention`` may ask for another.
        store_prune_interval: float seconds between two retention sweeps (each bounded).
        store_commit_delay: float seconds the store's writer waits for more writes before
            a commit (bigger batches, later frames); 0 (default) commits at once.
        log_format: ``auto`` (console on a TTY, JSON otherwise), ``console`` or ``json``.
        log_level: ``debug``, ``info``, ``warning``, ``error``, or ``auto``: ``warning``
            for ``a2e-host stdio`` (an agent that spawns the host may never read its
            stderr) and ``run``, ``info`` otherwise.
        remote_tools: glob patterns of tools that run as Ray tasks, matched against a
            tool's name or ``<pack>.<name>`` (``["heavy.*", "ocr"]``); default none
            (extra ``a2e-host[ray]``; README "Remote tools on Ray").
        ray_address: the Ray cluster remote tools run on: ``""`` (default) a local
            instance started on the first remote call, ``"auto"`` the cluster running on
            this machine, ``"ray://head:10001"`` a remote one through Ray Client.
        mcp: the ``[mcp]`` table as written (MCP servers whose tools the host serves,
            ``[mcp.servers.NAME]``; who may register more); the ``mcp`` plugin reads it
            (README "MCP servers as tool sources").
        otel_exporter: where spans (and OTLP metrics) go (README "Observability"):
            ``none`` (the default: no span is made), ``console`` (spans as JSON on
            stderr) or ``otlp`` (OTLP/HTTP; endpoint, headers and service name from the
            standard ``OTEL_*`` variables; needs ``a2e-host[otel]``).
        http_endpoints: ``serve`` answers ``GET /healthz``, ``/readyz`` and ``/metrics``
            on its WebSocket port (default true).
        replica_id: this replica's name in a shared (``postgresql://``) run store: the
            owner of the runs it accepts; "" (default): ``hostname-pid``. Give each
            replica its own.
        store_lease: float seconds a replica of a shared store may be silent (no
            heartbeat) before another takes its runs over (default 10; heartbeats every
            fifth of it). TOML ``[store] lease``.
        secrets: secret name → :class:`~a2e_host.secrets.Secret` (TOML ``[secrets]``:
            ``NAME = {env = "VAR"}`` or ``{file = "path"}``, with ``tools`` globs and
            ``executables`` that may receive it; none by default), read when the
            configuration is loaded; chains use them as ``{"$secret": "NAME"}``
            (PROTOCOL.md §5 Secrets).
        request_secrets: what a ``chain/req``'s own ``secrets`` may reach (TOML
            ``[request_secrets]``: ``tools``, ``executables``, ``shadow``); by default no
            tool, no executable, and never a configured secret's name.
    """

    limits: Limits = Limits()
    tools: tuple[str, ...] = ()
    skills_dirs: tuple[str, ...] = ()
    allow_proc: tuple[str, ...] = ()
    proc_env_allow: tuple[str, ...] = ()
    proc_env_keys: tuple[str, ...] = ()
    max_procs: int = 32
    root: str | None = None
    host: str = "127.0.0.1"
    port: int = 8765
    auth_token: str = ""
    auth_tokens: dict[str, str] = {}
    tool_grants: dict[str, tuple[str, ...]] = {}
    allowed_origins: tuple[str, ...] = ()
    keepalive_interval: float | None = 20.0
    ws_compression: bool = False
    shutdown_grace: float = 10.0
    handshake_timeout: float = 10.0
    max_connections: int = 512
    max_connections_per_peer: int = 64
    auth_failure_delay: float = 1.0
    outbox_high_water: int = 1024
    outbox_high_water_bytes: int = 8 * 1024 * 1024
    step_cache_max_entries: int = 1024
    step_cache_max_bytes: int = 16 * 1024 * 1024
    store: str = ""
    durability: str = "normal"
    store_retention: float = 7 * 24 * 3600.0
    store_prune_interval: float = 60.0
    store_commit_delay: float = 0.0
    log_format: str = "auto"
    log_level: str = "auto"
    # remote tools on Ray (a2e_host.tools.remote)
    remote_tools: tuple[str, ...] = ()
    ray_address: str = ""
    # MCP (issue 20): the [mcp] table, parsed by the a2e_mcp plugin (a2e_mcp.settings)
    mcp: dict[str, Any] = {}
    # observability (README "Observability")
    otel_exporter: str = "none"
    http_endpoints: bool = True
    # shared run store (PostgreSQL replicas, issue 18)
    replica_id: str = ""
    store_lease: float = 10.0
    # secrets by reference (README "Secrets")
    secrets: dict[str, Secret] = {}
    request_secrets: RequestSecretPolicy = RequestSecretPolicy()

    @property
    def auth_required(self) -> bool:
        """Whether handshakes must present a token (``auth_token`` or ``auth_tokens``)."""
        return bool(self.auth_token or self.auth_tokens)

    def tool_grant(self, principal: str) -> ToolGrant | None:
        """The tools ``principal`` may use; None: every tool (it has no grant)."""
        patterns = self.tool_grants.get(principal)
        return None if patterns is None else ToolGrant(principal, patterns)

    @property
    def root_path(self) -> Path:
        """The confinement root as an absolute, resolved path."""
        return Path(self.root or ".").resolve()


# ── loading: file < environment < CLI ───────────────────────────────────────

_LOG_FORMATS = ("auto", "console", "json")
_LOG_LEVELS = ("auto", "debug", "info", "warning", "error")
_LIST_FIELDS = (
    "tools", "skills_dirs", "allow_proc", "proc_env_allow", "proc_env_keys", "allowed_origins"
)
_PATH_FIELDS = ("root", "skills_dirs", "store")
_STORE_TABLE = {
    "path": "store", "durability": "durability", "retention": "store_retention",
    "prune_interval": "store_prune_interval", "commit_delay": "store_commit_delay",
    "lease": "store_lease",
}
"""``[store]`` key → HostConfig field."""


def load_config(
    path: str | Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> HostConfig:
    """Build the host's configuration from defaults, a TOML file, ``A2E_*`` variables and
    CLI overrides; a later source wins per key (CLI > environment > file > defaults).

    The file's top-level keys are :class:`HostConfig` field names and its ``[limits]``
    table holds ceilings (PROTOCOL.md §6); relative ``root`` / ``skills_dirs`` in the file
    are taken from the file's directory. Environment variables are ``A2E_`` plus a field
    or ceiling name in upper case; list fields are comma-separated (``A2E_TOOLS=fs,text``)
    and ``A2E_KEEPALIVE_INTERVAL=none`` disables keepalive. ``A2E_CONFIG`` names the file
    when ``path`` is None. Unknown ``A2E_*`` variables are ignored. Overrides are field
    names (as the CLI passes them), ceilings allowed at top level or in ``limits``.

    Args:
        path: the TOML file, or None for none (then ``A2E_CONFIG``, if set).
        overrides: CLI values, e.g. ``{"port": 0, "tools": ("conformance",)}``.
        environ: the environment to read; None reads :data:`os.environ`.

    Returns:
        The frozen :class:`HostConfig`.

    Raises:
        ValueError: a missing or malformed file, an unknown key, or a bad value; the
            message names the key and where it came from.
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    if path is None and env.get(f"{ENV_PREFIX}CONFIG"):
        path = env[f"{ENV_PREFIX}CONFIG"]
    if path is not None:
        _merge(values, limits, _read_file(Path(path)))
    _merge(values, limits, _read_environ(env))
    if overrides:
        source = "the command line"
        flat = dict(overrides)
        nested = flat.pop("limits", None)
        if nested is not None:
            if not isinstance(nested, Mapping):
                raise ValueError(f"'limits' from {source} must be a table of ceilings")
            flat.update(nested)
        _merge(values, limits, [(k, v, source) for k, v in flat.items()])
    config = HostConfig(limits=limits_from_mapping(limits), **values)
    check_grant_principals(config.tool_grants, {*config.auth_tokens, TOKEN_PRINCIPAL}
                           if config.auth_token else set(config.auth_tokens)
                           or {ANONYMOUS_PRINCIPAL})
    return config


_Item = tuple[str, Any, str]  # (key, raw value, source)


def _read_file(path: Path) -> list[_Item]:
    source = f"config file {str(path)!r}"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{source} does not exist; pass an existing --config path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{source} cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{source} is not valid TOML: {exc}") from None
    items: list[_Item] = []
    for key, value in data.items():
        if key == "limits":
            if not isinstance(value, dict):
                raise ValueError(f"'limits' in {source} must be a [limits] table of ceilings")
            items.extend((name, v, f"[limits] of {source}") for name, v in value.items())
            continue
        if key == "auth":
            items.extend(_auth_table(value, source))
            continue
        if key == "store" and isinstance(value, dict):
            items.extend(_store_table(path, value, source))
            continue
        if key in _PATH_FIELDS:
            value = _relative_to(path.parent, key, value)
        if key == "secrets" and isinstance(value, dict):  # a secret's file, like a path
            value = {name: {**entry, "file": str(path.parent / entry["file"])}
                     if isinstance(entry, dict) and isinstance(entry.get("file"), str)
                     and entry["file"] else entry for name, entry in value.items()}
        items.append((key, value, source))
    return items


def _auth_table(value: Any, source: str) -> list[_Item]:
    """``[auth]`` of a config file: ``token`` and a ``[auth.tokens]`` table."""
    if not isinstance(value, dict):
        raise ValueError(f"'auth' in {source} must be an [auth] table")
    items: list[_Item] = []
    for key, raw in value.items():
        if key == "token":
            items.append(("auth_token", raw, f"[auth] of {source}"))
        elif key in ("tokens", "tool_grants"):
            field = "auth_tokens" if key == "tokens" else key
            items.append((field, raw, f"[auth.{key}] of {source}"))
        else:
            raise ValueError(f"unknown key {key!r} in [auth] of {source}; known: token, "
                             "tokens, tool_grants")
    return items


def _store_table(path: Path, table: dict[str, Any], source: str) -> list[_Item]:
    items: list[_Item] = []
    for name, value in table.items():
        if name not in _STORE_TABLE:
            raise ValueError(f"unknown key {name!r} in [store] of {source}; known keys: "
                             + ", ".join(_STORE_TABLE))
        field = _STORE_TABLE[name]
        if field == "store":
            value = _relative_to(path.parent, field, value)
        items.append((field, value, f"[store] of {source}"))
    return items


def _relative_to(base: Path, key: str, value: Any) -> Any:
    if isinstance(value, str) and (value == "" or "://" in value):  # "" or a URL
        return value
    if isinstance(value, str):
        return str(base / value)
    if isinstance(value, list):
        return [str(base / v) if isinstance(v, str) else v for v in value]
    return value


def _read_environ(env: Mapping[str, str]) -> list[_Item]:
    known = set(_FIELDS) | set(CEILINGS)
    items: list[_Item] = []
    for name, raw in env.items():
        if not name.startswith(ENV_PREFIX):
            continue
        key = name[len(ENV_PREFIX) :].lower()
        if key in known:
            items.append((key, raw, f"environment variable {name}"))
    return items


def _merge(values: dict[str, Any], limits: dict[str, Any], items: list[_Item]) -> None:
    for key, raw, source in items:
        if key in CEILINGS:
            limits[key] = cv.ceiling(key, raw, source)
        elif key in _FIELDS:
            values[key] = _FIELDS[key](key, raw, source)
        else:
            known = ", ".join(sorted([*_FIELDS, *CEILINGS]))
            raise ValueError(f"unknown setting {key!r} in {source}; known settings: {known}")


_FIELDS: dict[str, Callable[[str, Any, str], Any]] = {
    "tools": cv.string_list,
    "skills_dirs": cv.string_list,
    "allow_proc": cv.string_list,
    "proc_env_allow": cv.string_list,
    "proc_env_keys": cv.string_list,
    "max_procs": cv.positive_int,
    "root": cv.optional_path,
    "host": cv.string,
    "port": cv.port,
    "auth_token": cv.string,
    "auth_tokens": parse_named_tokens,
    "tool_grants": parse_tool_grants,
    "allowed_origins": cv.string_list,
    "keepalive_interval": cv.optional_seconds,
    "ws_compression": cv.flag,
    "shutdown_grace": cv.seconds,
    "handshake_timeout": cv.positive_seconds,
    "max_connections": cv.positive_int,
    "max_connections_per_peer": cv.positive_int,
    "auth_failure_delay": cv.seconds,
    "outbox_high_water": cv.positive_int,
    "outbox_high_water_bytes": cv.positive_int,
    "step_cache_max_entries": cv.count,
    "step_cache_max_bytes": cv.count,
    "store": cv.string,
    "durability": cv.choice(("normal", "full")),
    "store_retention": cv.positive_seconds,
    "store_prune_interval": cv.positive_seconds,
    "store_commit_delay": cv.seconds,
    "log_format": cv.choice(_LOG_FORMATS),
    "log_level": cv.choice(_LOG_LEVELS),
    # remote tools on Ray (a2e_host.tools.remote)
    "remote_tools": cv.string_list,
    "ray_address": cv.string,
    # MCP (issue 20)
    "mcp": cv.table,
    # observability
    "otel_exporter": cv.choice(("none", "console", "otlp")),
    "http_endpoints": cv.flag,
    # shared run store (PostgreSQL replicas, issue 18)
    "replica_id": cv.string,
    "store_lease": cv.positive_seconds,
    # secrets by reference
    "secrets": parse_secrets,
    "request_secrets": parse_request_policy,
}
"""HostConfig field → converter ``(key, raw, source) -> value`` (raises ValueError)."""


LOCAL_TOOL_PACKS: tuple[str, ...] = ("fs", "text", "json")
"""The packs the local commands (``run``, ``validate``, ``tools``) enable when neither
the command line, the environment nor the configuration file names any. ``serve`` and
``stdio`` enable none by default: what a remote agent may call is the operator's choice."""


def with_local_tools(config: HostConfig) -> HostConfig:
    """``config`` with :data:`LOCAL_TOOL_PACKS` enabled when it names no tool pack."""
    if config.tools:
        return config
    return msgspec.structs.replace(config, tools=LOCAL_TOOL_PACKS)
