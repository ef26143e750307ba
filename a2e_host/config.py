"""Host configuration: one immutable struct, built from a TOML file, ``A2E_*`` environment
variables and CLI flags (precedence: CLI > environment > file > defaults).

Layer: core (reads files only in :func:`load_config`).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from .limits import Limits

__all__ = ["HostConfig"]


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
        root: the directory file tools and proc ``cwd`` are confined to; None = the
            working directory at start.
        host / port: WebSocket bind address (loopback by default).
        auth_token: when set, handshakes must present it (or ``Authorization: Bearer``).
        allowed_origins: browser ``Origin`` values the WebSocket server accepts; requests
            without an Origin header (non-browser clients) are always accepted.
        keepalive_interval: WebSocket ping interval, seconds; None disables.
        shutdown_grace: seconds chains may run on after SIGINT/SIGTERM before cancel.
        outbox_high_water: queued outgoing frames per connection before producers wait.
        log_format: ``auto`` (console on a TTY, JSON otherwise), ``console`` or ``json``.
        log_level: ``debug``, ``info``, ``warning`` or ``error``.
    """

    limits: Limits = Limits()
    tools: tuple[str, ...] = ()
    skills_dirs: tuple[str, ...] = ()
    allow_proc: tuple[str, ...] = ()
    proc_env_allow: tuple[str, ...] = ()
    root: str | None = None
    host: str = "127.0.0.1"
    port: int = 8765
    auth_token: str = ""
    allowed_origins: tuple[str, ...] = ()
    keepalive_interval: float | None = 20.0
    shutdown_grace: float = 10.0
    outbox_high_water: int = 1024
    log_format: str = "auto"
    log_level: str = "info"

    @property
    def root_path(self) -> Path:
        """The confinement root as an absolute, resolved path."""
        return Path(self.root or ".").resolve()
