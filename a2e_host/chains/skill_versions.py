"""Versioned skills and their lifecycle: which registered version a skill reference names.

Layer: core (pure: no I/O, no anyio). Source: PROTOCOL.md §5 (kind ``skill``) and §9
(the ``skill`` capability, "Versions and lifecycle").

A skill is registered by ``(name, version)``; ``version`` is a PEP 440 version (``"1"``,
``"2.1"``, ``"3.0rc1"``), ordered as PEP 440 orders them. Each version has a lifecycle:

============  =====================================================================
lifecycle     what a reference to it does
============  =====================================================================
draft         runs only when named exactly (``name@version``); a bare name never picks it
active        runs; a bare ``name`` picks the newest active version
deprecated    runs with a warning (the event ``data.warning``); a bare name picks the
              newest deprecated version only when the skill has no active one
retired       refused before anything runs, with a hint naming the active version
============  =====================================================================

A reference is ``name`` or ``name@version`` (a skill name never holds ``@``).
:meth:`VersionTable.resolve` answers a :class:`Resolution`: the entry to run (and a
warning for a deprecated one), or a refusal (message and hint) naming what is wrong and
what to name instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from packaging.version import Version

from .expressions import clip as _clip

__all__ = [
    "ACTIVE",
    "DEPRECATED",
    "DRAFT",
    "LIFECYCLES",
    "RETIRED",
    "WIRE_STATUS",
    "Resolution",
    "VersionTable",
    "check_version",
    "parse_ref",
]

DRAFT, ACTIVE, DEPRECATED, RETIRED = "draft", "active", "deprecated", "retired"
LIFECYCLES = (DRAFT, ACTIVE, DEPRECATED, RETIRED)
"""The lifecycle values a skill version may have, in lifecycle order."""

WIRE_STATUS = {DRAFT: "Created", ACTIVE: "Published", DEPRECATED: "Published",
               RETIRED: "Archived"}
"""Lifecycle → the A2E SDK's ``SkillStatus`` (``SkillDefinition.status`` on the wire)."""

T = TypeVar("T")


def parse_ref(ref: str) -> tuple[str, str | None]:
    """``"shout@2"`` → ``("shout", "2")``; ``"shout"`` → ``("shout", None)``."""
    name, sep, version = ref.partition("@")
    return name, (version if sep else None)


def check_version(version: str) -> str | None:
    """Why ``version`` cannot be a skill version (not PEP 440), or None when it can."""
    try:
        Version(version)
    except ValueError:  # InvalidVersion, or a number past int()'s 4300 digits
        return (f"version {_clip(version)} is not a PEP 440 version; write it as '1', '2.1' "
                "or '3.0rc1'")
    return None


def _key(version: str) -> Version:
    return Version(version)


@dataclass(frozen=True, slots=True)
class Resolution(Generic[T]):
    """What a skill reference resolves to.

    Attributes:
        entry: the registered version to run, None when refused.
        name / version: the skill name, and the version chosen ("" when refused).
        lifecycle: the chosen version's lifecycle ("" when refused).
        warning: a sentence when the chosen version is deprecated, else "".
        message / hint: the refusal and how to fix it, when ``entry`` is None.
        known: whether any version of the name is registered (an unknown name may get a
            "did you mean").
    """

    entry: T | None
    name: str
    version: str = ""
    lifecycle: str = ""
    warning: str = ""
    message: str = ""
    hint: str = ""
    known: bool = True

    @property
    def ref(self) -> str:
        """``name@version`` of the chosen version ("" when refused)."""
        return f"{self.name}@{self.version}" if self.entry is not None else ""


class VersionTable(Generic[T]):
    """Skill versions by name, each with its lifecycle. Not thread-safe to change; built
    once when the host starts and only read afterwards."""

    def __init__(self) -> None:
        self._by_name: dict[str, dict[str, tuple[str, T]]] = {}

    def add(self, name: str, version: str, lifecycle: str, entry: T) -> None:
        """Register ``entry`` as ``name@version``.

        Raises:
            ValueError: the name holds ``@``, the version is not PEP 440, the lifecycle is
                not one of :data:`LIFECYCLES`, or ``name@version`` is registered already.
        """
        if "@" in name or not name:
            raise ValueError(f"skill name {name!r} must be non-empty and hold no '@'")
        bad = check_version(version)
        if bad:
            raise ValueError(f"skill {name!r}: {bad}")
        if lifecycle not in LIFECYCLES:
            raise ValueError(f"skill '{name}@{version}': status {lifecycle!r} is not one of "
                             f"{', '.join(LIFECYCLES)}")
        versions = self._by_name.setdefault(name, {})
        if any(_key(v) == _key(version) for v in versions):
            raise ValueError(f"skill '{name}@{version}' is defined twice")
        versions[version] = (lifecycle, entry)

    def names(self) -> list[str]:
        """Every skill name with at least one version, sorted."""
        return sorted(self._by_name)

    def versions(self, name: str) -> list[tuple[str, str, T]]:
        """``(version, lifecycle, entry)`` of ``name``, oldest first (PEP 440 order)."""
        found = self._by_name.get(name, {})
        return [(v, found[v][0], found[v][1]) for v in sorted(found, key=_key)]

    def __iter__(self) -> Iterator[tuple[str, str, str, T]]:
        """``(name, version, lifecycle, entry)`` of every version, by name then version."""
        for name in self.names():
            for version, lifecycle, entry in self.versions(name):
                yield name, version, lifecycle, entry

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_name.values())

    def __contains__(self, ref: object) -> bool:
        """Whether ``ref`` resolves to a version that may run."""
        return isinstance(ref, str) and self.resolve(ref).entry is not None

    def newest(self, name: str, lifecycle: str) -> str | None:
        """The newest version of ``name`` with ``lifecycle``, None when there is none."""
        picked = [v for v, life, _ in self.versions(name) if life == lifecycle]
        return picked[-1] if picked else None

    def resolve(self, ref: str) -> Resolution[T]:
        """The version ``ref`` names (module docstring's table), or why none may run."""
        name, version = parse_ref(ref)
        if not name or (version is not None and "@" in version):
            return Resolution(
                None, name, known=False,
                message=f"skill reference {_clip(ref)} is not 'name' or 'name@version'",
                hint="name a skill, with at most one '@' before its version "
                     "(skill/discover/req lists them)")
        versions = self.versions(name)
        if not versions:
            return Resolution(None, name, message=f"unknown skill {_clip(name)}",
                              hint="use a registered skill (skill/discover/req lists them)",
                              known=False)
        if version is None:
            for life in (ACTIVE, DEPRECATED):
                chosen = self.newest(name, life)
                if chosen is not None:
                    return self._chosen(name, chosen)
            return Resolution(
                None, name,
                message=f"skill {name!r} has no active version ({_listing(versions)})",
                hint=_exact_hint(name, versions))
        match = next((v for v, _, _ in versions if _same(v, version)), None)
        if match is None:
            return Resolution(
                None, name,
                message=f"skill {name!r} has no version {_clip(version)} "
                        f"({_listing(versions)})",
                hint=f"name one of its versions, or {name!r} alone for the newest active one")
        lifecycle = self._by_name[name][match][0]
        if lifecycle == RETIRED:
            active = self.newest(name, ACTIVE)
            if active is not None:
                hint = f"use '{name}@{active}', its active version (or {name!r} alone)"
            else:
                hint = _exact_hint(name, versions)
            return Resolution(None, name, message=f"skill '{name}@{match}' is retired",
                              hint=hint)
        return self._chosen(name, match)

    def _chosen(self, name: str, version: str) -> Resolution[T]:
        lifecycle, entry = self._by_name[name][version]
        warning = ""
        if lifecycle == DEPRECATED:
            active = self.newest(name, ACTIVE)
            instead = (f"use '{name}@{active}'" if active is not None
                       else "it has no active version yet")
            warning = f"skill '{name}@{version}' is deprecated; {instead}"
        return Resolution(entry, name, version, lifecycle, warning)


def _same(a: str, b: str) -> bool:
    try:
        return _key(a) == _key(b)
    except ValueError:  # InvalidVersion, or a number past int()'s 4300 digits
        return False


def _listing(versions: list[tuple[str, str, Any]]) -> str:
    shown = ", ".join(f"{v} {life}" for v, life, _ in versions[-8:])
    more = len(versions) - 8
    return f"versions: {shown}" + (f" and {more} older" if more > 0 else "")


def _exact_hint(name: str, versions: list[tuple[str, str, Any]]) -> str:
    runnable = [v for v, life, _ in versions if life in (DRAFT, ACTIVE, DEPRECATED)]
    if runnable:
        return f"name a version exactly, e.g. '{name}@{runnable[-1]}'"
    return f"every version of {name!r} is retired; use another skill"
