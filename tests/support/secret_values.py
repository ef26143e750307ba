"""What the secrets tests share: two secret values hard to redact (quotes, a backslash,
non-ASCII), a configuration that gives one to the ``secretprobe`` tools, the chains that
use both, and the scan that says whether any form of a value is in some bytes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import msgspec

HOST_VALUE = 'host"Sécret\\value-7Q2x'
"""The configured secret ``HOSTKEY`` (read from the environment variable ``SP_HOSTKEY``)."""

REQUEST_VALUE = "req'séc✓ret/9Zp4-w"
"""The request's own secret ``REQKEY``."""

HOST_ENV = {"SP_HOSTKEY": HOST_VALUE}

CONFIG = """\
tools = ["secretprobe", "conformance"]
log_level = "debug"
otel_exporter = "console"

[secrets]
HOSTKEY = {env = "SP_HOSTKEY", tools = ["secret_*"]}

[request_secrets]
tools = ["secret_echo", "secret_fail"]
"""


def write_config(directory: Path, text: str = CONFIG) -> Path:
    """``text`` as ``host.toml`` in ``directory``; its path."""
    path = directory / "host.toml"
    path.write_text(text, encoding="utf-8")
    return path


def probe_nodes() -> list[dict[str, Any]]:
    """echo (both secrets into its output) → fail (both into its error message)."""
    refs = {"a": {"$secret": "HOSTKEY"}, "b": {"$secret": "REQKEY"}}
    return [
        {"node_id": "echo", "kind": "tool", "name": "secret_echo", "input": refs,
         "next_node": "fail"},
        {"node_id": "fail", "kind": "tool", "name": "secret_fail", "input": refs},
    ]


def probe_request(req_id: str, **fields: Any) -> dict[str, Any]:
    """A ``chain/req`` of :func:`probe_nodes` carrying ``REQKEY``."""
    return {"type": "chain/req", "id": req_id, "entry_node": "echo", "nodes": probe_nodes(),
            "secrets": {"REQKEY": REQUEST_VALUE}, **fields}


def forms(value: str) -> list[bytes]:
    """Every way ``value`` could be written in output: raw UTF-8, JSON-escaped (msgspec's,
    ``json.dumps``' ASCII escapes), inside a Python repr, and JSON-escaped twice."""
    once = msgspec.json.encode(value)[1:-1]
    found = {
        value.encode(),
        once,
        json.dumps(value)[1:-1].encode(),
        repr(value)[1:-1].encode(),
        msgspec.json.encode(once.decode())[1:-1],
        json.dumps(json.dumps(value))[3:-3].encode(),
    }
    return sorted(found)


def leaks(data: bytes, *values: str) -> list[str]:
    """Which forms of which ``values`` appear in ``data`` (``[]``: none)."""
    return [f"{value[:4]}…: {form!r}" for value in values for form in forms(value)
            if form in data]


def digest(value: str) -> str:
    """sha256 hex of ``value`` as ``secretprobe`` records it."""
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def probe_records(root: Path) -> list[dict[str, str]]:
    """What the ``secretprobe`` tools recorded in ``root`` (tool, digests of a and b)."""
    path = root / "secretprobe.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def store_bytes(directory: Path) -> dict[str, bytes]:
    """Every file of a run store in ``directory`` (the database, its WAL, shared memory,
    lock), by name."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())
            if p.is_file() and p.name.startswith("runs.db")}
