"""The test suite is shaped like the package (STYLE.md "Tests and habits"): test modules
live in folders named for the part of the host they test, and share helpers through
``tests/support`` and fixtures through ``conftest.py``, never by importing each other."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import REPO

TESTS = REPO / "tests"


def imported_modules(path: Path) -> set[str]:
    """The absolute module names ``path`` imports (``import a.b``, ``from a.b import c``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_no_module_of_the_suite_imports_a_test_module() -> None:
    offenders = {
        str(path.relative_to(REPO)): sorted(
            name for name in imported_modules(path)
            if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_")
        )
        for path in sorted(TESTS.rglob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}, (
        "move what a test module shares into tests/support (helpers) or a conftest.py "
        "(fixtures), and import it from there"
    )


def test_test_modules_live_in_a_folder_that_is_a_package() -> None:
    flat = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert flat == [], (
        f"{flat}: move each into the folder of the part of the host it tests "
        "(tests/core, tests/chains, tests/runtime, tests/transports, ...)"
    )
    folders = {p.parent for p in TESTS.rglob("test_*.py")}
    assert folders, "no test modules found under tests/"
    # a package: two folders may then hold test modules of the same name
    assert sorted(str(f.relative_to(REPO)) for f in folders
                  if not (f / "__init__.py").is_file()) == []
