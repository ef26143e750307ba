"""Declarative skills read the node-kind table too (issue 14, item 5): a skill file is
validated with every gate the table knows, so a gated kind added to the table alone may
be used in a skill. Today ``a2e_host/chains/skills.py`` grants its own list
(``_ALL_CAPS = {"chains", "tools", "skill", "proc"}``), a second copy of the table's gates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from a2e_host.chains import kinds
from a2e_host.chains.kinds import NODE_KINDS, KindSpec
from a2e_host.chains.skills import load_skills
from a2e_host.config import HostConfig
from tests.support.chains import FakeCatalog

WAIT_KIND = KindSpec("wait", gate="timers", shape="rounded")


def skill_dir(tmp_path: Path, kind: str) -> Path:
    folder = tmp_path / "skills"
    folder.mkdir()
    (folder / "pause.json").write_text(json.dumps({
        "name": "pause",
        "entry_node": "p",
        "nodes": [{"node_id": "p", "kind": kind, "input": {"seconds": 1}}],
    }))
    return folder


def test_a_skill_may_use_a_gated_kind_of_the_table(tmp_path: Path) -> None:
    config = HostConfig(skills_dirs=(str(skill_dir(tmp_path, "proc")),))
    assert load_skills(config, FakeCatalog(), python_skills=[]).names() == ["pause"]


def test_a_skill_may_use_a_gated_kind_added_to_the_table_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kinds, "NODE_KINDS", NODE_KINDS.with_kind(WAIT_KIND))
    config = HostConfig(skills_dirs=(str(skill_dir(tmp_path, "wait")),))
    assert load_skills(config, FakeCatalog(), python_skills=[]).names() == ["pause"]
