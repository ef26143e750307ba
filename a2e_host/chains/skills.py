"""Skills: what ``skill`` nodes run (PROTOCOL.md §5, kind ``skill``).

Layer: runtime edge (loads files and entry points; runs nothing itself but tools).

Two kinds share one registry:

* **Python skills**: :class:`~a2e_host.tools.Tool` objects published through the
  entry-point group ``a2e_host.skills`` (a :class:`~a2e_host.tools.ToolPack`, or a single
  ``Tool``). Every installed skill pack is enabled; sessions still need ``skill`` granted.
* **Declarative skills**: a chain in a JSON (``.json``) or YAML (``.yaml``/``.yml``) file,
  one per file, in each directory of ``HostConfig.skills_dirs``::

      name: summarize_file
      description: Read a file and count its words.
      input_schema: {type: object, required: [path]}
      entry_node: read
      nodes:
        - {node_id: read, kind: tool, name: read_file, input_map: {path: input.path},
           next_node: count}
        - {node_id: count, kind: tool, name: word_count, input_map: {text: read.output.text}}

  A file may also carry ``version`` (PEP 440, default ``"1"``), ``status`` (its
  lifecycle: ``draft``, ``active`` — the default —, ``deprecated`` or ``retired``; see
  :mod:`~a2e_host.chains.skill_versions`), ``output_schema``, ``tags``, ``category`` and
  ``when_to_use`` (what ``skill/discover/req`` lists). Several files may declare one name
  with different versions; a ``skill`` node names ``name`` (the newest active version)
  or ``name@version``.

  Each file is decoded (nodes into :class:`~a2e_host.messages.ChainNode`) and validated as
  a chain (:func:`a2e_host.chains.validation.validate_chain`) when loaded; a broken file stops
  loading with :class:`SkillLoadError` naming the file and every problem. At run time the
  skill's input becomes the sub-chain's ``initial_input`` and its ``final_output`` the
  node's output. ``input_schema`` is descriptive, except that its ``required`` names are
  checked before the sub-chain starts.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import msgspec

from ..config import HostConfig
from ..exceptions import ChainInvalid, NodeError
from ..limits import SessionLimits
from ..tools import Tool, ToolPack
from . import kinds
from .catalog import Catalog, Signature
from .messages import ChainNode, ChainRequest
from .nodes import NodeContext
from .signatures import tool_signature
from .skill_versions import ACTIVE, Resolution, VersionTable

__all__ = [
    "SKILLS_GROUP",
    "DeclaredSkill",
    "DeclaredView",
    "PythonSkill",
    "Skill",
    "SkillVersion",
    "SkillFile",
    "SkillLoadError",
    "SkillRegistry",
    "load_skills",
    "read_skill_file",
]

SKILLS_GROUP = "a2e_host.skills"
"""The entry-point group Python skills register in."""

SKILL_SUFFIXES = (".json", ".yaml", ".yml")


class SkillLoadError(ValueError):
    """One or more skill files could not be loaded; the message names each file and problem.

    Attributes:
        problems: ``(path, problem)`` pairs.
    """

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        lines = "; ".join(f"{path}: {problem}" for path, problem in problems)
        noun = "skill file" if len(problems) == 1 else "skill files"
        super().__init__(f"{len(problems)} {noun} could not be loaded: {lines}")


class SkillFile(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The content of a declarative skill file."""

    name: str
    nodes: list[ChainNode]
    entry_node: str
    description: str = ""
    input_schema: dict[str, Any] = {}
    output_schema: dict[str, Any] = {}
    version: str = "1"
    status: str = ACTIVE
    tags: list[str] = []
    category: str = ""
    when_to_use: str = ""


@dataclass(frozen=True, slots=True)
class DeclaredSkill:
    """A declarative skill: a chain run as a sub-chain.

    Attributes:
        name / description / input_schema / output_schema: from the file.
        nodes / entry_node: the sub-chain.
        source: the file it was loaded from.
        required: the ``required`` names of ``input_schema``.
        version / status: its PEP 440 version and lifecycle (``draft``, ``active``,
            ``deprecated``, ``retired``; :mod:`~a2e_host.chains.skill_versions`).
        tags / category / when_to_use: for ``skill/discover/req``.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    nodes: list[ChainNode]
    entry_node: str
    source: Path | None = None
    required: tuple[str, ...] = field(default=())
    version: str = "1"
    status: str = ACTIVE
    output_schema: dict[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    category: str = ""
    when_to_use: str = ""


@dataclass(frozen=True, slots=True)
class PythonSkill:
    """A Python skill with its lifecycle: what an ``a2e_host.skills`` entry point (or a
    pack's factory) may publish instead of a bare :class:`~a2e_host.tools.Tool`, whose
    lifecycle is ``active``. Its version is the tool's ``version`` (default ``"1"``).

    Attributes:
        tool: the callable skill.
        status: ``draft``, ``active``, ``deprecated`` or ``retired``.
        tags / category / when_to_use: for ``skill/discover/req``.
    """

    tool: Tool
    status: str = ACTIVE
    tags: tuple[str, ...] = ()
    category: str = ""
    when_to_use: str = ""


def read_skill_file(path: Path) -> DeclaredSkill:
    """Decode one skill file (no chain validation).

    Raises:
        SkillLoadError: unreadable, not JSON/YAML, or a field of the wrong shape (its
            path is named, e.g. ``$.nodes[1].kind``).
    """
    try:
        data = path.read_bytes()
        if path.suffix == ".json":
            spec = msgspec.json.decode(data, type=SkillFile)
        else:
            spec = msgspec.yaml.decode(data, type=SkillFile)
    except OSError as exc:
        raise SkillLoadError([(str(path), f"cannot be read: {exc.strerror or exc}")]) from None
    except msgspec.ValidationError as exc:
        raise SkillLoadError([(str(path), f"invalid skill: {exc}")]) from None
    except msgspec.DecodeError as exc:
        raise SkillLoadError([(str(path), f"not valid {path.suffix[1:].upper()}: {exc}")]) from None
    required = spec.input_schema.get("required", [])
    return DeclaredSkill(
        name=spec.name,
        description=spec.description,
        input_schema=spec.input_schema,
        nodes=spec.nodes,
        entry_node=spec.entry_node,
        source=path,
        required=tuple(r for r in required if isinstance(r, str))
        if isinstance(required, list)
        else (),
        version=spec.version,
        status=spec.status,
        output_schema=spec.output_schema,
        tags=tuple(spec.tags),
        category=spec.category,
        when_to_use=spec.when_to_use,
    )


Skill = Tool | DeclaredSkill
"""What runs for a skill version: a Python skill's tool, or a declared sub-chain."""


@dataclass(frozen=True, slots=True)
class SkillVersion:
    """One registered version of a skill, as discovery lists it.

    Attributes:
        name / version / lifecycle: its identity and lifecycle.
        skill: what runs.
        tags / category / when_to_use: a Python skill's from its :class:`PythonSkill`,
            a declared one's from its file.
    """

    name: str
    version: str
    lifecycle: str
    skill: Skill
    tags: tuple[str, ...] = ()
    category: str = ""
    when_to_use: str = ""


class SkillRegistry:
    """The skills one host serves, by ``(name, version)``, each with its lifecycle
    (:mod:`~a2e_host.chains.skill_versions`). A *reference* is ``name`` or
    ``name@version``; the lookups take references and resolve them."""

    def __init__(self) -> None:
        self.table: VersionTable[SkillVersion] = VersionTable()
        self.declared = DeclaredView(self.table)
        """Declared skills by reference (a Mapping; what sub-chain planning reads)."""

    def register_python(self, skill: Tool | PythonSkill) -> None:
        """Add a Python skill. Raises ValueError on a duplicate ``name@version``, a
        version that is not PEP 440, or an unknown lifecycle."""
        spec = skill if isinstance(skill, PythonSkill) else PythonSkill(skill)
        tool = spec.tool
        self.table.add(tool.name, tool.version, spec.status, SkillVersion(
            tool.name, tool.version, spec.status, tool, spec.tags, spec.category,
            spec.when_to_use))

    def register_declared(self, skill: DeclaredSkill) -> None:
        """Add a declarative skill. Raises ValueError as :meth:`register_python`."""
        self.table.add(skill.name, skill.version, skill.status, SkillVersion(
            skill.name, skill.version, skill.status, skill, skill.tags, skill.category,
            skill.when_to_use))

    def names(self) -> list[str]:
        """Every skill name, sorted (each once, whatever its versions)."""
        return self.table.names()

    def versions(self) -> list[SkillVersion]:
        """Every registered version, by name then version (PEP 440 order)."""
        return [entry for _, _, _, entry in self.table]

    def resolve(self, ref: str) -> Resolution[SkillVersion]:
        """What ``ref`` (``name`` or ``name@version``) resolves to, or why nothing may
        run (:meth:`~a2e_host.chains.skill_versions.VersionTable.resolve`)."""
        return self.table.resolve(ref)

    def get(self, ref: str) -> Skill | None:
        """What ``ref`` runs, None when it names nothing that may run."""
        entry = self.table.resolve(ref).entry
        return entry.skill if entry is not None else None

    def signature_of(self, ref: str) -> Signature | None:
        """The schemas of the skill ``ref`` resolves to, for validation's static checks;
        None if it resolves to nothing."""
        skill = self.get(ref)
        if skill is None:
            return None
        if isinstance(skill, Tool):
            return tool_signature(skill)
        # its input_schema describes the input; only its required names are checked before
        # the sub-chain starts; its output (the sub-chain's final_output) is not declared
        return Signature(skill.input_schema or True, True, input_enforced=False,
                         required_enforced=True, output_enforced=False)

    def suggest(self, name: str) -> list[str]:
        """Up to three skill names close to ``name``."""
        import difflib

        return difflib.get_close_matches(name, self.names(), n=3, cutoff=0.6)

    def __contains__(self, ref: object) -> bool:
        return ref in self.table

    def __len__(self) -> int:
        return len(self.table)

    async def run_skill(self, node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        """The ``skill`` executor (:class:`~a2e_host.chains.nodes.Executor`).

        ``node.name`` is resolved as validation resolved it (the registry does not change
        while the host runs). A Python skill is invoked like a tool; a declarative one
        runs as a sub-chain through ``ctx.run_subchain`` with ``args`` as its
        ``initial_input``.

        Raises:
            NodeError: unknown or retired skill, a missing required input field, no
                sub-chain runner, or the skill failed. The sub-chain runner's
                ``ChainError`` s pass unchanged.
        """
        found = self.table.resolve(node.name)
        if found.entry is None:
            raise NodeError(f"{found.message} in node {ctx.node_id!r}; {found.hint}")
        skill = found.entry.skill
        if isinstance(skill, Tool):
            return await skill.invoke(args)
        for key in skill.required:
            if key not in args:
                raise NodeError(f"skill {skill.name!r}: input field {key!r} is required")
        if ctx.run_subchain is None:
            raise NodeError(
                f"skill {skill.name!r} in node {ctx.node_id!r} is a sub-chain, but this "
                f"host runs no sub-chains here"
            )
        return await ctx.run_subchain(node.name, skill.nodes, skill.entry_node, args)


class DeclaredView(Mapping[str, DeclaredSkill]):
    """Declared skills by reference: ``view[ref]`` is the declared skill ``ref``
    resolves to (KeyError when it resolves to nothing that may run, or to a Python
    skill); iterating gives ``name@version`` of every declared version."""

    def __init__(self, table: VersionTable[SkillVersion]) -> None:
        self._table = table

    def __getitem__(self, ref: str) -> DeclaredSkill:
        entry = self._table.resolve(ref).entry
        if entry is None or not isinstance(entry.skill, DeclaredSkill):
            raise KeyError(ref)
        return entry.skill

    def __iter__(self) -> Iterator[str]:
        for name, version, _, entry in self._table:
            if isinstance(entry.skill, DeclaredSkill):
                yield f"{name}@{version}"

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def values_all(self) -> list[DeclaredSkill]:
        """Every declared version, retired and draft ones too."""
        return [e.skill for _, _, _, e in self._table if isinstance(e.skill, DeclaredSkill)]


def load_skills(
    config: HostConfig,
    catalog: Catalog | None = None,
    *,
    python_skills: list[Tool | PythonSkill] | None = None,
) -> SkillRegistry:
    """Load the Python skills and every declarative skill of ``config.skills_dirs``.

    Args:
        config: ``skills_dirs`` and the host ``limits`` the skill chains are checked against.
        catalog: tool names and proc policy to validate the skill chains with (the skills'
            own names are added); None skips the tool and proc checks.
        python_skills: instead of the ``a2e_host.skills`` entry points (tests).

    Raises:
        SkillLoadError: a missing directory, an unreadable or invalid file, a duplicate
            name, or a skill chain that does not validate; every problem is listed.
    """
    registry = SkillRegistry()
    skills = _installed_skills(config) if python_skills is None else python_skills
    problems: list[tuple[str, str]] = []
    for skill in skills:
        try:
            registry.register_python(skill)
        except ValueError as exc:
            tool = skill.tool if isinstance(skill, PythonSkill) else skill
            problems.append((f"python skill {tool.name!r}", str(exc)))
    for directory in config.skills_dirs:
        base = Path(directory)
        if not base.is_dir():
            problems.append((directory, "is not a directory of skill files"))
            continue
        for path in sorted(p for p in base.iterdir() if p.suffix in SKILL_SUFFIXES):
            try:
                skill_def = read_skill_file(path)
                registry.register_declared(skill_def)
            except SkillLoadError as exc:
                problems.extend(exc.problems)
            except ValueError as exc:
                problems.append((str(path), str(exc)))
    if not problems:
        problems = _validate_all(registry, config, catalog)
    if problems:
        raise SkillLoadError(problems)
    return registry


def _installed_skills(config: HostConfig) -> list[Tool | PythonSkill]:
    """Every Python skill installed in :data:`SKILLS_GROUP`.

    Raises:
        SkillLoadError: an entry point cannot be imported, does not name a Tool or
            ToolPack, or its factory fails: every installed skill is served, so a broken
            one is a configuration the host cannot use (one line, exit 2 at start).
    """
    found: list[Tool | PythonSkill] = []
    problems: list[tuple[str, str]] = []
    for ep in entry_points(group=SKILLS_GROUP):
        where = f"installed skill {ep.name!r} ({ep.value})"
        try:
            obj = ep.load()
            if isinstance(obj, Tool | PythonSkill):
                found.append(obj)
            elif isinstance(obj, ToolPack):
                found.extend(obj.factory(config))
            else:
                problems.append((where, f"must name a Tool, PythonSkill or ToolPack, got "
                                        f"{type(obj).__name__}"))
        except Exception as exc:  # noqa: BLE001 — any import or factory failure, named
            problems.append((where, f"cannot be loaded: {type(exc).__name__}: {exc}"))
    if problems:
        raise SkillLoadError(problems)
    return found


class _SkillCatalog:
    """The host catalog with every skill name known (skills may call skills)."""

    def __init__(self, registry: SkillRegistry, inner: Catalog | None) -> None:
        self.registry = registry
        self.inner = inner

    def tool_names(self) -> Collection[str]:
        return self.inner.tool_names() if self.inner is not None else _Everything()

    def skill_names(self) -> Collection[str]:
        return self.registry.names()

    @property
    def secrets(self) -> Any:  # the host's secrets, which skills may name (§5 Secrets)
        return getattr(self.inner, "secrets", None)

    def resolve_skill(self, ref: str) -> Resolution[SkillVersion]:
        return self.registry.resolve(ref)

    def check_proc(self, node: ChainNode) -> str | None:
        return self.inner.check_proc(node) if self.inner is not None else None

    def signature_of(self, registry: str, name: str) -> Signature | None:
        if registry == "skill":
            return self.registry.signature_of(name)
        lookup = getattr(self.inner, "signature_of", None)
        return lookup(registry, name) if lookup is not None else None


class _Everything(Collection[str]):
    """A collection containing every name (no catalog: tool names go unchecked)."""

    def __contains__(self, item: object) -> bool:
        return True

    def __iter__(self) -> Any:
        return iter(())

    def __len__(self) -> int:
        return 0


def _validate_all(
    registry: SkillRegistry, config: HostConfig, catalog: Catalog | None
) -> list[tuple[str, str]]:
    from .validation import validate_chain

    checker = _SkillCatalog(registry, catalog)
    limits = SessionLimits(config.limits)
    problems: list[tuple[str, str]] = []
    for skill in registry.declared.values_all():
        request = ChainRequest(nodes=skill.nodes, entry_node=skill.entry_node, chain_id="skill")
        try:
            # every gate granted: a skill file is checked for what it is, not for a session
            validate_chain(request, checker, limits,
                           granted=frozenset(kinds.NODE_KINDS.gates))
        except ChainInvalid as exc:
            where = str(skill.source) if skill.source else skill.name
            errors = exc.details.get("errors") or []
            if errors:
                text = "; ".join(
                    f"node {e.get('node_id', '')!r} field {e.get('field', '')!r}: "
                    f"{e.get('message', '')}"
                    for e in errors
                )
            else:
                text = exc.message
            ref = f"{skill.name}@{skill.version}"
            problems.append((where, f"skill {ref!r} is not a valid chain: {text}"))
    return problems
