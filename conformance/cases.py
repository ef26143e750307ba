"""Loading the case transcripts in ``conformance/cases/*.jsonl``.

Layer: pure (reads files). No host, no sockets.

A file is JSON Lines. A line with a ``"case"`` key starts a case; the lines after it,
up to the next ``"case"`` line, are its steps. Blank lines are ignored.

Case header::

    {"case": "chain-linear-two-tools",          # unique id, [a-z0-9-]
     "requires": ["CHAIN-EVT-SEQ", ...],        # requirement ids it checks (>= 1)
     "doc": "what it shows, one line",
     "handshake": {...} | false,                # extra handshake/req fields; false = none
     "features": ["chain/cancel"],              # host features it needs (else skipped)
     "ceilings": ["max_total_nodes"],           # ceilings the host must publish (else skipped)
     "needs": ["auth"],                         # runner conditions (suite.CONDITIONS;
                                                # cap:NAME, proc:NAME too)
     "transports": ["ws"],                      # only on these transports (default: all)
     "own_connection": true,                    # never share a session (see below)
     "timeout": 10}                             # seconds for the whole case

A case's level, and the extensions that gate it, follow from the requirements it names
(:func:`conformance.manifest.case_level`, :func:`conformance.manifest.gating_features`).

Sessions. Over stdio the suite lets cases with the same handshake take turns on one
session (one host process), each with its own ids; a case that needs a connection of
its own -- one it closes, reconnects, expects the host to close, or handshakes itself
(``"handshake": false``) -- gets one. Those four are recognised from the steps; any
other reason is declared with ``"own_connection": true``. Over WebSocket every case
has its own connection anyway.

Steps (one key names the kind)::

    {"send": <message>, "as": "r1", "exact": false}   # templated, envelope filled
    {"send_text": "<raw frame text>", "as": "r"}       # sent verbatim as one frame/line
                                                       # (a list of pieces is joined)
    {"send_bytes": "<hex>"}                            # raw bytes (stdio line / ws binary)
    {"send_text_bytes": "<hex>"}                       # ws only: a text frame of raw bytes
    {"expect": <matcher>, "for": "r1", "as": "x", "within": 5}
        # the next unconsumed message (of request r1, if "for"; the first one
        # matching "where", if given) must match <matcher>
    {"expect_chain": {...}, "for": "r1"}               # see runner.check_chain
    {"expect_silence": 0.3}                            # nothing unconsumed arrives meanwhile
    {"expect_close": {"ws_code": 1009, "within": 5, "ignore": <matcher>}}
                                                       # the host closes the connection;
                                                       # frames matching "ignore" may come first
    {"close": {}}                                      # the client goes away (stdio: EOF)
    {"reconnect": {}}                                  # a fresh connection (+ handshake)
    {"expect_transport": {"subprotocol": "a2e.v1"}}    # ws handshake facts
    {"sleep": 0.2}
    {"comment": "..."}
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CASES_DIR", "CONNECTION_STEPS", "Case", "CaseError", "load_cases", "load_file",
           "STEP_KINDS"]

CASES_DIR = Path(__file__).parent / "cases"

STEP_KINDS = (
    "send", "send_text", "send_bytes", "send_text_bytes", "expect", "expect_chain",
    "expect_silence", "expect_close", "expect_transport", "sleep", "comment", "close",
    "reconnect",
)
_STEP_OPTIONS = {"as", "for", "where", "exact", "within"}
_HEADER_KEYS = {"case", "requires", "doc", "handshake", "features", "ceilings", "needs",
                "transports", "timeout", "own_connection"}
#: Steps that end or replace the connection: a case using one never shares a session.
CONNECTION_STEPS = ("close", "reconnect", "expect_close")
_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")


class CaseError(ValueError):
    """A case file is malformed; the message names the file and line."""


@dataclass(frozen=True)
class Case:
    """One transcript. ``steps`` are the raw step objects, in order."""

    id: str
    requires: tuple[str, ...]
    doc: str
    steps: tuple[dict[str, Any], ...]
    source: str
    handshake: dict[str, Any] | None = field(default_factory=dict)
    features: tuple[str, ...] = ()
    ceilings: tuple[str, ...] = ()
    """Ceilings the host must publish in the ``chains`` metadata ``limits`` (PROTOCOL.md
    §2, §6) for the case to run; a host that does not publish one has the case skipped."""
    needs: tuple[str, ...] = ()
    transports: tuple[str, ...] = ()
    timeout: float = 10.0
    own_connection: bool = False
    """True when the case must not share a session with other cases (see module doc)."""


def _needs_own_connection(header: dict[str, Any], steps: list[dict[str, Any]]) -> str | None:
    """Why a case cannot share a session, read from its header and steps, or None."""
    if header.get("handshake", {}) is False:
        return "it handshakes itself"
    for step in steps:
        for kind in CONNECTION_STEPS:
            if kind in step:
                return f"it has a {kind!r} step"
    return None


def _header(obj: dict[str, Any], where: str) -> dict[str, Any]:
    unknown = set(obj) - _HEADER_KEYS
    if unknown:
        raise CaseError(f"{where}: unknown case keys {sorted(unknown)}")
    if not isinstance(obj["case"], str) or not _ID.match(obj["case"]):
        raise CaseError(f"{where}: case id must match {_ID.pattern}")
    requires = obj.get("requires")
    if not isinstance(requires, list) or not requires:
        raise CaseError(f"{where}: case {obj['case']!r} names no requirement")
    handshake = obj.get("handshake", {})
    if handshake is not False and not isinstance(handshake, dict):
        raise CaseError(f"{where}: handshake must be an object or false")
    for key in ("features", "ceilings", "needs", "transports"):
        value = obj.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise CaseError(f"{where}: {key} must be a list of strings")
    if not isinstance(obj.get("own_connection", False), bool):
        raise CaseError(f"{where}: own_connection must be true or false")
    return obj


def _check_step(step: Any, where: str) -> dict[str, Any]:
    if not isinstance(step, dict):
        raise CaseError(f"{where}: a step must be an object")
    kinds = [k for k in step if k in STEP_KINDS]
    if len(kinds) != 1:
        raise CaseError(f"{where}: a step needs exactly one of {STEP_KINDS}, got {sorted(step)}")
    unknown = set(step) - set(STEP_KINDS) - _STEP_OPTIONS
    if unknown:
        raise CaseError(f"{where}: unknown step keys {sorted(unknown)}")
    return step


def _parse_file(path: Path) -> Iterable[Case]:
    header: dict[str, Any] | None = None
    steps: list[dict[str, Any]] = []
    start = 0

    def finish() -> Case | None:
        if header is None:
            return None
        hs = header.get("handshake", {})
        why = _needs_own_connection(header, steps)
        if why and header.get("own_connection") is False:
            raise CaseError(f"{path.name}:{start}: case {header['case']!r} says "
                            f"own_connection false, but {why}; drop the key")
        return Case(
            id=header["case"], requires=tuple(header["requires"]),
            doc=header.get("doc", ""), steps=tuple(steps), source=f"{path.name}:{start}",
            handshake=None if hs is False else hs,
            features=tuple(header.get("features", ())),
            ceilings=tuple(header.get("ceilings", ())), needs=tuple(header.get("needs", ())),
            transports=tuple(header.get("transports", ())),
            timeout=float(header.get("timeout", 10.0)),
            own_connection=bool(why) or bool(header.get("own_connection", False)),
        )

    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        where = f"{path.name}:{number}"
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CaseError(f"{where}: not JSON: {exc}") from exc
        if isinstance(obj, dict) and "case" in obj:
            done = finish()
            if done is not None:
                yield done
            header, steps, start = _header(obj, where), [], number
        elif header is None:
            raise CaseError(f"{where}: a step before any case header")
        else:
            steps.append(_check_step(obj, where))
    done = finish()
    if done is not None:
        yield done


def load_file(path: Path) -> list[Case]:
    """Load the cases of one ``.jsonl`` file, in line order.

    Raises:
        CaseError: the file is malformed.
    """
    return list(_parse_file(path))


def load_cases(directory: Path = CASES_DIR, pattern: str | None = None) -> list[Case]:
    """Load every case from ``directory/*.jsonl``, in file then line order.

    Args:
        directory: where the ``.jsonl`` files are.
        pattern: if given, keep cases whose id or any requirement id contains it
            (case-insensitive), like ``pytest -k`` on names.

    Raises:
        CaseError: a file is malformed, or two cases share an id.
    """
    cases: list[Case] = []
    seen: dict[str, str] = {}
    for path in sorted(directory.glob("*.jsonl")):
        for case in _parse_file(path):
            if case.id in seen:
                raise CaseError(f"{case.source}: case id {case.id!r} already at {seen[case.id]}")
            seen[case.id] = case.source
            cases.append(case)
    if pattern:
        needle = pattern.lower()
        cases = [c for c in cases
                 if needle in c.id.lower() or any(needle in r.lower() for r in c.requires)]
    return cases
