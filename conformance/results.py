"""What running a case yields: its result, the failure a step raises, and the facts
read from a handshake.

Layer: pure (data). Shared by :mod:`conformance.runner`, :mod:`conformance.suite` and
:mod:`conformance.report`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .cases import Case

__all__ = ["RUNNER_ERROR", "CaseFailure", "CaseResult", "chains_entry"]

RUNNER_ERROR = "runner error"
"""How a result names a fault of the kit itself (never expected: the report counts them)."""


class CaseFailure(Exception):
    """The host did not do what the transcript says (one or more problems)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass
class CaseResult:
    """Outcome of one case. ``status`` is ``passed``, ``failed`` or ``skipped``."""

    case: Case
    status: str
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    diagnostics: str = ""
    notes: list[str] = field(default_factory=list)
    """What the runner did beside the verdict, e.g. replaced a shared session after it."""
    findings: list[tuple[str, str]] = field(default_factory=list)
    """(requirement id, what was seen): transport and event invariants the host broke in
    this case that the case does not name itself; they fail those requirements in the
    report, once, and not this case (one defect, one verdict)."""
    offered: bool = True
    """False when the case was skipped because the host does not offer an extension it
    needs (reported "not offered")."""
    level: str = "protocol"
    """The case's level (:func:`conformance.manifest.case_level`)."""


def chains_entry(handshake_resp: dict[str, Any]) -> dict[str, Any] | None:
    """The ``accepted_caps`` entry for ``chains`` in a handshake/resp (PROTOCOL.md §2)."""
    listed = handshake_resp.get("accepted_caps")
    for entry in listed if isinstance(listed, list) else []:
        if isinstance(entry, dict) and entry.get("capability") == "chains":
            return entry
    return None
