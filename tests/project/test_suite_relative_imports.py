"""No test module imports another through a relative import either (issue 14, item 7):
``test_suite_layout`` reads absolute imports (``tests.x.test_y``); ``from .test_y import
z`` and ``from . import test_y`` are the same coupling."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import REPO

TESTS = REPO / "tests"


def relative_test_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            names = [node.module or ""] + [a.name for a in node.names]
            found += [n for n in names if n.rsplit(".", 1)[-1].startswith("test_")]
    return found


def test_no_module_of_the_suite_imports_a_test_module_relatively() -> None:
    offenders = {str(p.relative_to(REPO)): relative_test_imports(p)
                 for p in sorted(TESTS.rglob("*.py"))}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_check_sees_a_relative_import_of_a_test_module(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text("from .test_other import helper\nfrom . import test_third, support\n")
    assert relative_test_imports(sample) == ["test_other", "test_third"]
