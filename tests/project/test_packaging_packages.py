"""Every package folder ships in the wheel: ``[tool.setuptools] packages`` lists packages
one by one, so a new sub-package missing from it would install as nothing."""

from __future__ import annotations

import tomllib

from tests.support import REPO

SETUPTOOLS = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]


def test_every_package_folder_is_listed_for_the_wheel() -> None:
    found = set()
    for name, folder in SETUPTOOLS["package-dir"].items():
        for init in (REPO / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(REPO / folder).parts
            found.add(".".join((name, *parts)))
    for init in (REPO / "conformance").rglob("__init__.py"):
        found.add(".".join(init.parent.relative_to(REPO).parts))
    assert {"a2e_host", "a2e_host.client", "a2e_chains", "conformance"} <= found
    assert found - set(SETUPTOOLS["packages"]) == set()
