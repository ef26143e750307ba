"""A distribution "installed" the way an installer leaves it, minus the copying: a
``NAME-VERSION.dist-info`` directory (``METADATA``, ``entry_points.txt``) in a site
directory, found by ``importlib.metadata`` once that directory is on ``sys.path`` or
``PYTHONPATH``. Nothing is installed into the environment the tests run in."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path


def install_dist(
    site: Path,
    name: str,
    version: str,
    entry_points: Mapping[str, Mapping[str, str]],
    *,
    files: Mapping[str, str] | None = None,
) -> Path:
    """Write distribution ``name`` ``version`` into ``site`` (created if missing): its
    dist-info with ``entry_points`` (group -> entry name -> ``module:attr``), and ``files``
    (a path relative to ``site`` -> its text), e.g. the module the entry points name.
    Returns ``site``."""
    dist = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    )
    lines = []
    for group, entries in entry_points.items():
        lines.append(f"[{group}]")
        lines += [f"{entry} = {target}" for entry, target in entries.items()]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")
    for relative, text in (files or {}).items():
        path = site / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return site


def install_project(site: Path, project: Path) -> Path:
    """:func:`install_dist` of the project in directory ``project``, with the name, version
    and entry points of its ``pyproject.toml`` (its sources stay where they are: put
    ``project`` on the path too). Returns ``site``."""
    table = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    return install_dist(site, table["name"], table["version"], table["entry-points"])
