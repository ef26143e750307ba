"""The requirement manifest, ``conformance/requirements.json``.

Layer: pure (reads one file).

Shape::

    {"requirements": [
        {"id": "CHAIN-EVT-SEQ",                 # [A-Z0-9-]+, unique
         "source": "PROTOCOL.md §5 Events",     # where the rule is written
         "statement": "seq starts at 1 ...",    # the rule, one line
         "exempt": "why no case can check it"}  # optional: not checkable on the wire
    ]}

Every requirement that is not ``exempt`` must be named by at least one case, and
every id a case names must be in the manifest (:func:`coverage_problems`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from .cases import Case

__all__ = ["MANIFEST", "README", "Requirement", "load_requirements", "coverage_problems",
           "render_markdown", "readme_with_table"]

MANIFEST = Path(__file__).parent / "requirements.json"
README = Path(__file__).parent / "README.md"
BEGIN, END = "<!-- requirements:begin -->", "<!-- requirements:end -->"
_ID = re.compile(r"^[A-Z][A-Z0-9]*(-[A-Z0-9]+)+$")


@dataclass(frozen=True)
class Requirement:
    """One normative rule (see module docstring)."""

    id: str
    source: str
    statement: str
    exempt: str = ""


def load_requirements(path: Path = MANIFEST) -> list[Requirement]:
    """Read the manifest, in file order.

    Raises:
        ValueError: a malformed entry, a bad id, or a duplicate id.
    """
    data = json.loads(path.read_text(encoding="utf-8"))
    requirements: list[Requirement] = []
    seen: set[str] = set()
    for entry in data["requirements"]:
        requirement = Requirement(**entry)
        if not _ID.match(requirement.id):
            raise ValueError(f"requirement id {requirement.id!r} must match {_ID.pattern}")
        if requirement.id in seen:
            raise ValueError(f"duplicate requirement id {requirement.id!r}")
        if not requirement.source or not requirement.statement:
            raise ValueError(f"requirement {requirement.id!r} needs a source and a statement")
        seen.add(requirement.id)
        requirements.append(requirement)
    return requirements


def coverage_problems(requirements: list[Requirement], cases: list[Case]) -> list[str]:
    """Requirements with no case, and cases naming no or unknown requirements."""
    known = {r.id for r in requirements}
    named = {rid for case in cases for rid in case.requires}
    problems = [f"requirement {r.id} has no case" for r in requirements
                if r.id not in named and not r.exempt]
    problems += [f"requirement {r.id} is exempt but case(s) name it" for r in requirements
                 if r.id in named and r.exempt]
    for case in cases:
        if not case.requires:
            problems.append(f"case {case.id} names no requirement")
        problems += [f"case {case.id} names unknown requirement {rid}"
                     for rid in case.requires if rid not in known]
    return problems


def render_markdown(requirements: list[Requirement], cases: list[Case]) -> str:
    """The manifest as a Markdown table: id, source, statement, cases checking it."""
    by_requirement: dict[str, list[str]] = {}
    for case in cases:
        for rid in case.requires:
            by_requirement.setdefault(rid, []).append(case.id)
    lines = ["| id | source | requirement | cases |", "| --- | --- | --- | --- |"]
    for r in requirements:
        names = by_requirement.get(r.id, [])
        cell = f"{len(names)}" if names else f"— (exempt: {r.exempt})"
        statement = r.statement.replace("|", "\\|")
        lines.append(f"| `{r.id}` | {r.source} | {statement} | {cell} |")
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
