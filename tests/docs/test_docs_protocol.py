"""docs/PROTOCOL.md is readable as shipped: its sections come in order and every file it
cites is in the repository (issue 13 item 15)."""

from __future__ import annotations

import re

from tests.support import REPO

DOCS = REPO / "docs"
PROTOCOL = DOCS / "PROTOCOL.md"


def test_protocol_sections_are_numbered_in_order() -> None:
    numbers = [int(n) for n in re.findall(r"^## (\d+)\. ", PROTOCOL.read_text("utf-8"), re.M)]
    assert numbers == list(range(1, len(numbers) + 1))
    assert len(numbers) >= 8  # the sections the code and the kit cite by number


def test_every_file_protocol_cites_exists() -> None:
    text = PROTOCOL.read_text("utf-8")
    links = [t for t in re.findall(r"\]\(([^)#\s]+)", text) if "://" not in t]
    named = re.findall(r"`([\w./-]+\.(?:txt|md|json|jsonl|toml|py))`", text)
    # ``a2e/caps/...`` names a module of the public A2E SDK, whose shapes the capabilities
    # follow (its commit: tests/support/sdk_schemas/README.md), not a file of ours
    named = [t for t in named if not t.startswith("a2e/")]
    assert links, "the seed contract is linked"
    missing = [t for t in [*links, *named] if not (DOCS / t).exists()
               and not (DOCS.parent / t).exists()]
    assert missing == []


def _sections() -> dict[int, str]:
    text = PROTOCOL.read_text("utf-8")
    parts = re.split(r"^## (\d+)\. ", text, flags=re.M)
    return {int(n): body for n, body in zip(parts[1::2], parts[2::2], strict=True)}


def test_each_capability_cited_by_section_is_the_section_about_it() -> None:
    sections = _sections()
    about = {"skill": 9, "proc": 10, "tools": 11}
    for capability, number in about.items():
        heading = sections[number].splitlines()[0]
        assert f"`{capability}` capability" in heading or f"{capability} capability" in heading
    readme = " ".join((REPO / "README.md").read_text("utf-8").split())
    # each README sentence that introduces a capability's messages cites its own section
    for capability, sample in (("tools", "a host that enables no tool does not grant it"),
                               ("skill", "the validation, ceilings and timeouts of a `skill` node"),
                               ("proc", "can also run a **long-lived process** directly")):
        cited = re.search(r"PROTOCOL\.md §(\d+)", readme[readme.index(sample):])
        assert cited is not None and int(cited.group(1)) == about[capability], capability


def test_section_2_names_every_capability_the_host_serves_today() -> None:
    core = " ".join(_sections()[2].split())
    assert "later" not in core and "Until `proc/*`" not in core
    assert ("this host serves `chains`, `runs` (§5 Durable runs), `skill` (§9), `proc` (§10; "
            "when an executable is allowed) and `tools` (§11; when a tool is enabled)") in core


def test_every_titled_section_reference_names_a_part_of_that_section() -> None:
    sections = {n: body.lower() for n, body in _sections().items()}
    files = [REPO / "README.md", *DOCS.glob("*.md"), *(REPO / "a2e_host").rglob("*.py"),
             *(REPO / "plugins").rglob("*.py")]
    wrong = []
    for path in files:
        text = " ".join(path.read_text("utf-8").split())
        for number, title in re.findall(
                r"PROTOCOL\.md §(\d+),? \"?([A-Z][a-z]+(?: [a-z]+)*)", text):
            if title.lower() not in sections.get(int(number), ""):
                wrong.append(f"{path.name}: §{number} {title}")
    assert wrong == []
