"""The requirement manifest, ``conformance/requirements.json``.

Layer: pure (reads one file).

Shape::

    {"requirements": [
        {"id": "CHAIN-EVT-SEQ",                 # [A-Z0-9-]+, unique
         "source": "PROTOCOL.md §5 Events",     # where the rule is written
         "statement": "seq starts at 1 ...",    # the rule, one line
         "level": "protocol",                   # spec | protocol | decision | extension
         "binding": "MUST",                     # spec only: MUST or SHOULD
         "spec_lines": [61],                    # spec only: lines of docs/chains-spec.txt
         "feature": "chain/cancel",             # extension only: what the host advertises
         "exempt": "why no case can check it"}  # optional: not checkable on the wire
    ]}

Levels (:data:`LEVELS`), from most to least binding on any A2E host:

* ``spec`` -- the chains spec (``docs/chains-spec.txt``) demands it; ``binding`` says
  MUST or SHOULD and ``spec_lines`` where. A host that differs from this host only on
  the other levels is still spec-conformant.
* ``protocol`` -- PROTOCOL.md's settlement of something the spec leaves open (or the
  A2E core messages it adopts).
* ``decision`` -- a DECISIONS.md choice of this host.
* ``extension`` -- an extension the host must advertise; ``feature`` names what gates
  it: a ``features`` entry of the ``chains`` metadata (``chain/cancel``), ``cap:NAME``
  (the host serves capability NAME) or ``limits:NAME`` (it publishes ceiling NAME).
  A host that does not offer it gets the cases reported "not offered", never failed.

A case's level is the least binding level among the requirements it names
(:func:`case_level`): a case that also checks a PROTOCOL.md settlement is a protocol
case, so it never judges a spec requirement (a spec requirement needs cases of its own).

Every requirement that is not ``exempt`` must be named by at least one case of its own
level, and every id a case names must be in the manifest (:func:`coverage_problems`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from .cases import Case

__all__ = ["MANIFEST", "README", "SPEC", "LEVELS", "Requirement", "load_requirements",
           "coverage_problems", "render_markdown", "readme_with_table", "case_level",
           "gating_features"]

MANIFEST = Path(__file__).parent / "requirements.json"
README = Path(__file__).parent / "README.md"
SPEC_LINE_COUNT = 157
"""Lines of ``docs/chains-spec.txt`` (kept verbatim): a cited line must exist."""
SPEC = "docs/chains-spec.txt"
LEVELS = ("spec", "protocol", "decision", "extension")
"""Requirement levels, most binding first."""
BINDINGS = ("MUST", "SHOULD")
BEGIN, END = "<!-- requirements:begin -->", "<!-- requirements:end -->"
_ID = re.compile(r"^[A-Z][A-Z0-9]*(-[A-Z0-9]+)+$")


@dataclass(frozen=True)
class Requirement:
    """One normative rule (see module docstring)."""

    id: str
    source: str
    statement: str
    level: str = "protocol"
    binding: str = ""
    """``MUST`` or ``SHOULD``, for a ``spec`` requirement."""
    spec_lines: tuple[int, ...] = ()
    """Lines of ``docs/chains-spec.txt`` the requirement rests on (``spec`` level)."""
    feature: str = ""
    """What a host advertises to offer an ``extension`` requirement (see module doc)."""
    exempt: str = ""

    @property
    def cited(self) -> str:
        """Where the rule is written, with its binding: ``spec l.61 MUST``, or the source."""
        if self.level == "spec":
            lines = ", ".join(f"l.{n}" for n in self.spec_lines)
            return f"{SPEC} {lines} ({self.binding})"
        if self.level == "extension":
            return f"{self.source} [extension {self.feature}]"
        return self.source


def load_requirements(path: Path = MANIFEST) -> list[Requirement]:
    """Read the manifest, in file order.

    Raises:
        ValueError: a malformed entry, a bad id, or a duplicate id.
    """
    data = json.loads(path.read_text(encoding="utf-8"))
    requirements: list[Requirement] = []
    seen: set[str] = set()
    for entry in data["requirements"]:
        entry = dict(entry)
        entry["spec_lines"] = tuple(entry.get("spec_lines", ()))
        requirement = Requirement(**entry)
        _check_level(requirement)
        if not _ID.match(requirement.id):
            raise ValueError(f"requirement id {requirement.id!r} must match {_ID.pattern}")
        if requirement.id in seen:
            raise ValueError(f"duplicate requirement id {requirement.id!r}")
        if not requirement.source or not requirement.statement:
            raise ValueError(f"requirement {requirement.id!r} needs a source and a statement")
        seen.add(requirement.id)
        requirements.append(requirement)
    return requirements


def _check_level(r: Requirement) -> None:
    if r.level not in LEVELS:
        raise ValueError(f"requirement {r.id!r}: level must be one of {LEVELS}")
    if r.level == "spec":
        if r.binding not in BINDINGS or not r.spec_lines:
            raise ValueError(f"requirement {r.id!r}: a spec requirement needs binding "
                             f"MUST or SHOULD and the spec_lines it rests on")
        if not all(isinstance(n, int) and 1 <= n <= SPEC_LINE_COUNT for n in r.spec_lines):
            raise ValueError(f"requirement {r.id!r}: spec_lines must be lines 1.."
                             f"{SPEC_LINE_COUNT} of {SPEC}")
    elif r.binding or r.spec_lines:
        raise ValueError(f"requirement {r.id!r}: only a spec requirement has binding and "
                         f"spec_lines")
    if (r.level == "extension") != bool(r.feature):
        raise ValueError(f"requirement {r.id!r}: an extension (and only an extension) "
                         f"names the feature that offers it")


def case_level(case: Case, by_id: dict[str, Requirement]) -> str:
    """The least binding level among the requirements ``case`` names (see module doc)."""
    ranks = [LEVELS.index(by_id[rid].level) for rid in case.requires if rid in by_id]
    return LEVELS[max(ranks)] if ranks else "protocol"


def gating_features(case: Case, by_id: dict[str, Requirement]) -> tuple[str, ...]:
    """What a host must offer for ``case`` to run: its own ``features`` and ``ceilings``
    (as ``limits:NAME``), the ``feature`` of every extension it names, and
    ``handshake/limits`` when its handshake lowers ceilings (PROTOCOL.md §2, §6)."""
    wanted = [*case.features, *(f"limits:{c}" for c in case.ceilings)]
    wanted += [by_id[rid].feature for rid in case.requires
               if rid in by_id and by_id[rid].feature]
    if isinstance(case.handshake, dict) and "limits" in case.handshake:
        wanted.append("handshake/limits")
    wanted += [f"limits:{name}" for name in _published_reads(case)]
    return tuple(dict.fromkeys(wanted))


def _published_reads(case: Case) -> list[str]:
    """Ceilings a case reads from the probe (``probe_limits.NAME``): it needs them
    published, or its templates have nothing to work on."""
    text = json.dumps([case.handshake, case.steps])
    return re.findall(r'"probe_limits\.([a-z_]+)', text)


def coverage_problems(requirements: list[Requirement], cases: list[Case]) -> list[str]:
    """Requirements with no case, and cases naming no or unknown requirements."""
    known = {r.id for r in requirements}
    by_id = {r.id: r for r in requirements}
    named = {rid for case in cases for rid in case.requires}
    judged = {rid for case in cases for rid in case.requires
              if rid in by_id and by_id[rid].level == case_level(case, by_id)}
    problems = [f"requirement {r.id} has no case" for r in requirements
                if r.id not in named and not r.exempt]
    problems += [f"requirement {r.id} ({r.level}) has no case of its own level: every case "
                 f"naming it also names a less binding requirement" for r in requirements
                 if r.id in named and r.id not in judged and not r.exempt]
    problems += [f"requirement {r.id} is exempt but case(s) name it" for r in requirements
                 if r.id in named and r.exempt]
    for case in cases:
        if not case.requires:
            problems.append(f"case {case.id} names no requirement")
        problems += [f"case {case.id} names unknown requirement {rid}"
                     for rid in case.requires if rid not in known]
    return problems


def render_markdown(requirements: list[Requirement], cases: list[Case]) -> str:
    """The manifest as a Markdown table: id, level (with the spec's binding or the
    extension's feature), source, statement, cases checking it."""
    by_requirement: dict[str, list[str]] = {}
    for case in cases:
        for rid in case.requires:
            by_requirement.setdefault(rid, []).append(case.id)
    lines = ["| id | level | source | requirement | cases |", "| --- | --- | --- | --- | --- |"]
    for r in requirements:
        names = by_requirement.get(r.id, [])
        cell = f"{len(names)}" if names else f"— (exempt: {r.exempt})"
        statement = r.statement.replace("|", "\\|")
        level = {"spec": f"spec {r.binding}", "extension": f"extension `{r.feature}`"}.get(
            r.level, r.level)
        lines.append(f"| `{r.id}` | {level} | {r.source} | {statement} | {cell} |")
    return "\n".join(lines) + "\n"


def readme_with_table(readme_text: str, table: str) -> str:
    """``readme_text`` with the text between the requirement markers replaced by ``table``.

    Raises:
        ValueError: the README lacks the ``<!-- requirements:begin/end -->`` markers.
    """
    head, sep, rest = readme_text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"README needs the markers {BEGIN} and {END}")
    return f"{head}{BEGIN}\n{table}{END}{tail}"
