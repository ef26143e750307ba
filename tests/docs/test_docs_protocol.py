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
