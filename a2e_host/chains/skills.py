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

  Each file is decoded (nodes into :class:`~a2e_host.messages.ChainNode`) and validated as
  a chain (:func:`a2e_host.chains.validation.validate_chain`) when loaded; a broken file stops
  loading with :class:`SkillLoadError` naming the file and every problem. At run time the
  skill's input becomes the sub-chain's ``initial_input`` and its ``final_output`` the
  node's output. ``input_schema`` is descriptive, except that its ``required`` names are
  checked before the sub-chain starts.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import msgspec

from ..config import HostConfig
from ..exceptions import ChainInvalid, NodeError
from ..limits import SessionLimits
from ..tools import Tool, ToolPack, ToolRegistry
from . import kinds
from .catalog import Catalog, Signature
from .messages import ChainNode, ChainRequest
from .nodes import NodeContext
from .signatures import tool_signature

__all__ = [
    "SKILLS_GROUP",
    "DeclaredSkill",
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


@dataclass(frozen=True, slots=True)
class DeclaredSkill:
    """A declarative skill: a chain run as a sub-chain.

    Attributes:
        name / description / input_schema: from the file.
        nodes / entry_node: the sub-chain.
        source: the file it was loaded from.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    nodes: list[ChainNode]
    entry_node: str
    source: Path | None = None
    required: tuple[str, ...] = field(default=())


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
    )


class SkillRegistry:
    """The skills one host serves: Python skills and declarative ones, by name."""

    def __init__(self) -> None:
        self.python = ToolRegistry()
        self.declared: dict[str, DeclaredSkill] = {}

    def register_python(self, skill: Tool) -> None:
        """Add a Python skill. Raises ValueError on a duplicate name."""
        if skill.name in self.declared:
            raise ValueError(f"skill {skill.name!r} is defined twice")
        self.python.register(skill)

    def register_declared(self, skill: DeclaredSkill) -> None:
        """Add a declarative skill. Raises ValueError on a duplicate name."""
        if skill.name in self.declared or skill.name in self.python:
            raise ValueError(f"skill {skill.name!r} is defined twice")
        self.declared[skill.name] = skill

    def names(self) -> list[str]:
        """Every skill name, sorted."""
        return sorted([*self.python.names(), *self.declared])

    def get(self, name: str) -> Tool | DeclaredSkill | None:
        """The skill called ``name``, or None."""
        return self.python.get(name) or self.declared.get(name)

    def signature_of(self, name: str) -> Signature | None:
        """The schemas of skill ``name`` for validation's static checks, None if unknown."""
        skill = self.get(name)
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

    def __contains__(self, name: object) -> bool:
        return name in self.python or name in self.declared

    def __len__(self) -> int:
        return len(self.python) + len(self.declared)

    async def run_skill(self, node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        """The ``skill`` executor (:class:`~a2e_host.chains.nodes.Executor`).

        A Python skill is invoked like a tool; a declarative one runs as a sub-chain through
        ``ctx.run_subchain`` with ``args`` as its ``initial_input``.

        Raises:
            NodeError: unknown skill, a missing required input field, no sub-chain runner,
                or the skill failed. The sub-chain runner's ``ChainError`` s pass unchanged.
        """
        skill = self.get(node.name)
        if skill is None:
            raise NodeError(f"unknown skill {node.name!r} in node {ctx.node_id!r}")
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
        return await ctx.run_subchain(skill.name, skill.nodes, skill.entry_node, args)


def load_skills(
    config: HostConfig,
    catalog: Catalog | None = None,
    *,
    python_skills: list[Tool] | None = None,
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
    for skill in skills:
        registry.register_python(skill)
    problems: list[tuple[str, str]] = []
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


def _installed_skills(config: HostConfig) -> list[Tool]:
    """Every Python skill installed in :data:`SKILLS_GROUP`.

    Raises:
        SkillLoadError: an entry point cannot be imported, does not name a Tool or
            ToolPack, or its factory fails: every installed skill is served, so a broken
            one is a configuration the host cannot use (one line, exit 2 at start).
    """
    found: list[Tool] = []
    problems: list[tuple[str, str]] = []
    for ep in entry_points(group=SKILLS_GROUP):
        where = f"installed skill {ep.name!r} ({ep.value})"
        try:
            obj = ep.load()
            if isinstance(obj, Tool):
                found.append(obj)
            elif isinstance(obj, ToolPack):
                found.extend(obj.factory(config))
            else:
                problems.append((where, f"must name a Tool or ToolPack, got "
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
    for skill in registry.declared.values():
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
            problems.append((where, f"skill {skill.name!r} is not a valid chain: {text}"))
    return problems
