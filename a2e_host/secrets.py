"""Secrets by reference: where their values come from, who may receive them, and the one
process-wide redaction every output path goes through (README "Secrets"; PROTOCOL.md §5
Secrets).

Layer: core (no anyio). Two sources:

- the host's configuration, ``[secrets] NAME = {env = "VAR"}`` or ``{file = "path"}``
  with the tools (globs) and executables that may receive it, read once when the
  configuration is loaded (:func:`parse_secrets`); a file is opened by handle, must be a
  regular file of at most :data:`MAX_SECRET_FILE_BYTES`, and loses one trailing newline;
- a ``chain/req``'s own ``secrets`` (its agent's code fills them), usable by the tools
  and executables ``[request_secrets]`` lists (:func:`parse_request_policy`; none by
  default), never shadowing a host secret of the same name unless ``shadow = true``.

A chain uses one only as ``{"$secret": "NAME"}`` in a node's static input
(:mod:`a2e_host.chains.secret_refs`).

**Redaction.** Every secret value the process knows — the configured ones of each live
host, and the request secrets of each chain in flight — is kept in one registry
(:func:`register` / :func:`unregister`); :func:`redact` (text: log lines, span
attributes) and :func:`redact_frame` (encoded frames, called by
:func:`a2e_host.codec.encode_message`) replace each by ``«secret:NAME»``. With no secret
registered both return their argument after one global read.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import threading
from collections.abc import Mapping
from itertools import count
from typing import Any

from .redaction import PENDING_LIMIT, PLACEHOLDER, PendingText, Redactor, placeholder
from .tool_patterns import tool_matches

__all__ = [
    "MAX_SECRET_FILE_BYTES",
    "MIN_SECRET_CHARS",
    "PLACEHOLDER",
    "RequestSecretPolicy",
    "SECRET_KEY",
    "Secret",
    "active_redactor",
    "is_secret_name",
    "parse_request_policy",
    "parse_secrets",
    "pending_text",
    "placeholder",
    "redact",
    "redact_frame",
    "redactor",
    "register",
    "unregister",
]

SECRET_KEY = "$secret"
"""The key of a reference: ``{"$secret": "NAME"}``."""

MIN_SECRET_CHARS = 8
"""The shortest value a secret may have: a shorter one would be replaced wherever those
few characters happen to appear (every ``true``, every ``1234``) and is refused."""

MAX_SECRET_FILE_BYTES = 65_536
"""The largest secret file read (bytes); a bigger one stops the start."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}\Z")


def is_secret_name(name: object) -> bool:
    """Whether ``name`` may name a secret: a letter or ``_``, then up to 63 letters,
    digits, ``_``, ``.`` or ``-``."""
    return isinstance(name, str) and _NAME.match(name) is not None


class Secret:
    """One secret of the host's configuration. Its ``repr`` never shows the value.

    Args:
        name: its name, as references write it.
        value: the value (at least :data:`MIN_SECRET_CHARS` characters).
        tools: glob patterns of the tools that may receive it, each matching a tool's
            ``<name>`` or ``<pack>.<name>`` (:func:`a2e_host.tool_patterns.tool_matches`);
            empty: no tool.
        executables: the executables (as ``allow_proc`` names them, or their absolute
            paths) a proc node may pass it to; empty: none.
        source: where it was read from, e.g. ``env OPENAI_API_KEY`` (never the value).
        paths: ``executables`` already resolved (each name and the paths ``PATH``
            gives it); None: resolved here, one ``shutil.which`` per executable.
    """

    __slots__ = ("name", "value", "tools", "executables", "source", "_paths")

    def __init__(self, name: str, value: str, *, tools: tuple[str, ...] = (),
                 executables: tuple[str, ...] = (), source: str = "",
                 paths: frozenset[str] | None = None) -> None:
        self.name = name
        self.value = value
        self.tools = tools
        self.executables = executables
        self.source = source
        if paths is not None:  # resolved once already (RequestSecretPolicy)
            self._paths = paths
            return
        found_paths = {e for e in executables}
        for exe in executables:
            found = shutil.which(exe) if not os.path.isabs(exe) else exe
            if found:
                found_paths.add(os.path.realpath(found))
                found_paths.add(found)
        self._paths = frozenset(found_paths)

    def __repr__(self) -> str:
        return (f"Secret({self.name!r}, source={self.source!r}, tools={list(self.tools)!r}, "
                f"executables={list(self.executables)!r})")

    def allows_tool(self, tool: str, pack: str = "") -> bool:
        """Whether the tool named ``tool``, of tool pack ``pack``, may receive it."""
        return tool_matches(self.tools, tool, pack)

    def allows_executable(self, argv0: str) -> bool:
        """Whether a proc node whose ``argv[0]`` is ``argv0`` may receive it."""
        return argv0 in self._paths


class RequestSecretPolicy:
    """What a ``chain/req``'s own ``secrets`` may reach (``[request_secrets]``).

    Args:
        tools: glob patterns of the tools they may be passed to (default none).
        executables: executables they may be passed to (default none).
        shadow: whether one may carry the name of a configured secret and replace it for
            that request (default false: such a request is refused).
    """

    __slots__ = ("tools", "executables", "shadow", "_probe")

    def __init__(self, tools: tuple[str, ...] = (), executables: tuple[str, ...] = (),
                 shadow: bool = False) -> None:
        self.tools = tools
        self.executables = executables
        self.shadow = shadow
        self._probe = Secret("request", "x" * MIN_SECRET_CHARS, tools=tools,
                             executables=executables)

    def __repr__(self) -> str:
        return (f"RequestSecretPolicy(tools={list(self.tools)!r}, "
                f"executables={list(self.executables)!r}, shadow={self.shadow!r})")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RequestSecretPolicy) and (
            (self.tools, self.executables, self.shadow)
            == (other.tools, other.executables, other.shadow))

    def __hash__(self) -> int:
        return hash((self.tools, self.executables, self.shadow))

    def secret(self, name: str, value: str) -> Secret:
        """A request's secret ``name`` with this policy's allowances."""
        return Secret(name, value, tools=self.tools, executables=self.executables,
                      source="request", paths=self._probe._paths)

    def allows_tool(self, tool: str, pack: str = "") -> bool:
        """Whether request secrets may reach the tool ``tool`` of tool pack ``pack``."""
        return self._probe.allows_tool(tool, pack)

    def allows_executable(self, argv0: str) -> bool:
        """Whether request secrets may reach the executable ``argv0``."""
        return self._probe.allows_executable(argv0)


# ── configuration ───────────────────────────────────────────────────────────


def _strings(key: str, raw: Any, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, list) and all(isinstance(v, str) for v in raw):
        return tuple(raw)
    raise ValueError(f"{key!r} of {where} must be a list of strings, e.g. [\"pack.*\"]")


def parse_secrets(key: str, raw: Any, source: str) -> dict[str, Secret]:
    """The ``[secrets]`` table: each ``NAME = {env = "VAR"}`` or ``{file = "path"}``, with
    optional ``tools = [globs]`` and ``executables = [names]``; values read now (``env``
    from the process's own environment, :data:`os.environ`, whatever environment
    :func:`~a2e_host.config.load_config` reads its ``A2E_*`` settings from).

    Args:
        key: the setting's name (``secrets``).
        raw: the TOML table (a dict); a string (an environment variable) is refused.
        source: where it came from, for messages.

    Returns:
        Secret name → :class:`Secret`.

    Raises:
        ValueError: a malformed entry, an unset variable, an unreadable, oversized or
            not-regular file, or a value shorter than :data:`MIN_SECRET_CHARS`; the
            message names the secret and its source, never its value.
    """
    if not isinstance(raw, dict):
        raise ValueError(f"{key!r} from {source} must be a [secrets] table of the "
                         "configuration file, e.g. API_KEY = {env = \"API_KEY\"}")
    found: dict[str, Secret] = {}
    for name, entry in raw.items():
        where = f"secret {name!r} in [secrets] of {source}"
        if not is_secret_name(name):
            raise ValueError(f"{where}: a name is a letter or '_' then up to 63 letters, "
                             "digits, '_', '.' or '-'; rename it")
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be a table, e.g. {{env = \"VAR\"}}")
        unknown = sorted(set(entry) - {"env", "file", "tools", "executables"})
        if unknown:
            raise ValueError(f"{where}: unknown key {unknown[0]!r}; known: env, file, "
                             "tools, executables")
        if ("env" in entry) == ("file" in entry):
            raise ValueError(f"{where} needs exactly one of env = \"VAR\" or file = \"path\"")
        if "env" in entry:
            var = entry["env"]
            if not isinstance(var, str) or not var:
                raise ValueError(f"{where}: env must name an environment variable")
            value = os.environ.get(var)
            if value is None:
                raise ValueError(f"{where}: environment variable {var} is not set; set it "
                                 "or remove the secret")
            origin = f"env {var}"
        else:
            path = entry["file"]
            if not isinstance(path, str) or not path:
                raise ValueError(f"{where}: file must be a path")
            value = _read_secret_file(path, where)
            origin = f"file {path}"
        if len(value) < MIN_SECRET_CHARS:
            raise ValueError(f"{where}: its value is shorter than {MIN_SECRET_CHARS} "
                             "characters, too short to redact safely; use a longer one")
        found[name] = Secret(name, value, source=origin,
                             tools=_strings("tools", entry.get("tools"), where),
                             executables=_strings("executables", entry.get("executables"),
                                                  where))
    return found


def _read_secret_file(path: str, where: str) -> str:
    """A secret file's text, read by handle: a regular file of at most
    :data:`MAX_SECRET_FILE_BYTES`, UTF-8, one trailing newline removed."""
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ValueError(f"{where}: file {path!r} cannot be opened "
                         f"({exc.strerror or exc}); fix the path or its permissions") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{where}: {path!r} is not a regular file")
        if info.st_size > MAX_SECRET_FILE_BYTES:
            raise ValueError(f"{where}: file {path!r} is over {MAX_SECRET_FILE_BYTES} bytes")
        data = os.read(fd, MAX_SECRET_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_SECRET_FILE_BYTES:
        raise ValueError(f"{where}: file {path!r} is over {MAX_SECRET_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{where}: file {path!r} is not UTF-8 text") from None
    if text.endswith("\r\n"):
        return text[:-2]
    return text[:-1] if text.endswith("\n") else text


def parse_request_policy(key: str, raw: Any, source: str) -> RequestSecretPolicy:
    """The ``[request_secrets]`` table: ``tools = [globs]``, ``executables = [names]``,
    ``shadow = bool`` (each optional).

    Raises:
        ValueError: not a table, an unknown key or a value of the wrong type.
    """
    if isinstance(raw, RequestSecretPolicy):
        return raw
    if not isinstance(raw, dict):
        raise ValueError(f"{key!r} from {source} must be a [request_secrets] table, e.g. "
                         "tools = [\"http.*\"]")
    where = f"[request_secrets] of {source}"
    unknown = sorted(set(raw) - {"tools", "executables", "shadow"})
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} in {where}; known: tools, "
                         "executables, shadow")
    shadow = raw.get("shadow", False)
    if not isinstance(shadow, bool):
        raise ValueError(f"'shadow' of {where} must be true or false")
    return RequestSecretPolicy(_strings("tools", raw.get("tools"), where),
                               _strings("executables", raw.get("executables"), where), shadow)


# ── the process-wide registry ───────────────────────────────────────────────

_lock = threading.Lock()
_entries: dict[int, Mapping[str, str]] = {}
_tokens = count(1)
active_redactor: Redactor | None = None
"""The redactor of every registered secret, None when none is registered: what the hot
paths read (one module attribute) before redacting anything. Read it, never set it."""


def register(secrets: Mapping[str, str]) -> int:
    """Add ``secrets`` (name → value) to what :func:`redact` and :func:`redact_frame`
    replace, until :func:`unregister` is called with the token returned.

    Args:
        secrets: name → value; empty registers nothing (the token is still valid).

    Returns:
        A token for :func:`unregister`.
    """
    global active_redactor
    if not secrets:  # most requests carry none: no lock, no rebuild
        return next(_tokens)
    with _lock:
        token = next(_tokens)
        _entries[token] = dict(secrets)
        active_redactor = _build()
        return token


def unregister(token: int) -> None:
    """Forget the secrets registered under ``token`` (unknown tokens are ignored)."""
    global active_redactor
    if token not in _entries:  # a token of nothing (the common case): no lock
        return
    with _lock:
        if _entries.pop(token, None) is not None:
            active_redactor = _build()


def _build() -> Redactor | None:
    pairs = [pair for entry in _entries.values() for pair in entry.items()]
    return Redactor(pairs) if pairs else None


def redactor() -> Redactor | None:
    """The redactor of every registered secret, None when there is none."""
    return active_redactor


def redact(text: str) -> str:
    """``text`` with every registered secret value replaced by ``«secret:NAME»``.

    The one function to call on text leaving the host by a path of its own (a log
    line, a trace attribute): ``a2e_host.secrets.redact(str(value))``. It costs one
    global read when no secret is registered.

    Args:
        text: any text.

    Returns:
        ``text`` itself when it holds no registered value, else the redacted copy.
    """
    current = active_redactor
    return text if current is None else current.redact(text)


def redact_frame(data: bytes) -> bytes:
    """An encoded frame (compact JSON) with every registered value replaced inside its
    strings; the result is valid JSON (see :meth:`Redactor.redact_frame`)."""
    current = active_redactor
    return data if current is None else current.redact_frame(data)


def pending_text(limit: int = PENDING_LIMIT) -> PendingText:
    """A :class:`~a2e_host.redaction.PendingText` redacting with every registered
    secret (as registered at each call): for a stream written in pieces, so a value
    split over writes or lines (a PEM key) is replaced whole.

    Args:
        limit: characters kept without a newline before they are let go anyway.
    """
    return PendingText(redactor, limit=limit)
