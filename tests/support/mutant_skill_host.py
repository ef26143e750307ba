"""Broken variants of the host's ``skill`` capability, for proving the conformance kit's
skill cases have teeth (``tests/conformance/test_conformance_skills.py``).

``python -m tests.support.mutant_skill_host MUTANT serve --port 0 --tools conformance
--skills DIR`` starts the real CLI with one defect patched in.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from a2e_host.chains import skill_versions


def retired_runs() -> None:
    """A retired version resolves like any other: the lifecycle is ignored."""
    original = skill_versions.VersionTable.resolve

    def resolve(self: skill_versions.VersionTable, ref: str):  # type: ignore[no-untyped-def, type-arg]
        name, version = skill_versions.parse_ref(ref)
        if version is not None:
            for v, _, entry in self.versions(name):
                if v == version:
                    return skill_versions.Resolution(entry, name, v, "active")
        return original(self, ref)

    skill_versions.VersionTable.resolve = resolve  # type: ignore[method-assign]


def bare_name_picks_newest() -> None:
    """A bare name picks the newest version whatever its lifecycle (a draft included)."""
    original = skill_versions.VersionTable.resolve

    def resolve(self: skill_versions.VersionTable, ref: str):  # type: ignore[no-untyped-def, type-arg]
        name, version = skill_versions.parse_ref(ref)
        versions = self.versions(name)
        if version is None and versions:
            return original(self, f"{name}@{versions[-1][0]}")
        return original(self, ref)

    skill_versions.VersionTable.resolve = resolve  # type: ignore[method-assign]


MUTANTS: dict[str, tuple[Callable[[], None], str, tuple[str, ...]]] = {
    "retired_runs": (retired_runs, "SKILL-LIFECYCLE", ("skill-call-retired-version-refused",
                                                       "skill-node-retired-version-invalid")),
    "bare_name_picks_newest": (bare_name_picks_newest, "SKILL-VERSIONS",
                               ("skill-call-bare-name-runs-newest-active",)),
}
"""mutant name → (patch, the requirement the kit must report failed, the cases to run)."""


def main(argv: list[str]) -> None:
    patch, _, _ = MUTANTS[argv[0]]
    patch()
    from a2e_host.cli import main as cli_main

    sys.argv = ["a2e-host", *argv[1:]]
    cli_main()


if __name__ == "__main__":
    main(sys.argv[1:])
