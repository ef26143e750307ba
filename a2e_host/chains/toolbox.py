"""The toolbox: everything executable a host configuration exposes, in one object.

Layer: runtime edge. The chain plugin holds one :class:`Toolbox`; validation reads it as
its :class:`~a2e_host.chains.validation.Catalog` (tool and skill names, proc policy) and the
scheduler calls its :attr:`Toolbox.executors` for ``tool``, ``skill`` and ``proc`` nodes
(:class:`~a2e_host.chains.nodes.Executor`). Source: PROTOCOL.md §4 (catalog checks), §5 (running).
"""

from __future__ import annotations

from typing import Any

import anyio

from ..config import HostConfig
from ..exceptions import NodeError
from ..tools import ToolRegistry, load_tools
from ..tools.registry import tools_of_packs_not_enabled
from .catalog import Signature
from .messages import ChainNode
from .nodes import Executor, NodeContext, current_node
from .proc import ProcPolicy, run_proc
from .secret_refs import HostSecrets
from .signatures import tool_signature
from .skill_versions import Resolution
from .skills import SkillRegistry, SkillVersion, load_skills

__all__ = ["Toolbox"]


class Toolbox:
    """Tools, skills and the proc policy of one configuration.

    Args:
        tools: the enabled tools.
        skills: the loaded skills.
        proc: the proc policy.

    Attributes:
        executors: ``{"tool": …, "skill": …, "proc": …}``, each an
            :class:`~a2e_host.chains.nodes.Executor`.
    """

    def __init__(
        self,
        tools: ToolRegistry | None = None,
        skills: SkillRegistry | None = None,
        proc: ProcPolicy | None = None,
    ) -> None:
        self.tools = tools if tools is not None else ToolRegistry()
        self.skills = skills if skills is not None else SkillRegistry()
        self.proc = proc if proc is not None else ProcPolicy()
        self.config: HostConfig | None = None  # from_config's: for pack_providing
        self.secrets = HostSecrets(pack_of=self.tools.pack_of)
        """The configured secrets and the request-secret policy (PROTOCOL.md §5 Secrets)."""
        self._other_packs: dict[str, str] | None = None
        self.executors: dict[str, Executor] = {
            "tool": self.run_tool,
            "skill": self.skills.run_skill,
            "proc": self.run_proc,
        }

    @classmethod
    def from_config(cls, config: HostConfig) -> Toolbox:
        """Build the toolbox of ``config``: tool packs, proc policy, then skills (validated
        against the tools and policy).

        Raises:
            ValueError: the root is missing or not a directory, an unknown tool pack, an
                enabled pack that cannot be imported or built (``ToolPackError``), or an
                ``allow_proc`` entry not found.
            SkillLoadError: (a ValueError) a broken skill file, naming it.
        """
        root = config.root_path
        if not root.is_dir():
            what = "does not exist" if not root.exists() else "is not a directory"
            raise ValueError(
                f"root {str(root)!r} {what}; pass an existing directory with --root "
                f"(file tools and proc cwd are confined to it)"
            )
        box = cls(load_tools(config), None, ProcPolicy.from_config(config))
        box.config = config
        box.secrets = HostSecrets(config.secrets, config.request_secrets,  # skills name them
                                  pack_of=box.tools.pack_of)
        box.skills = load_skills(config, box)
        box.executors["skill"] = box.skills.run_skill
        return box

    # ── the validation Catalog ──

    def tool_names(self) -> list[str]:
        """Names of the enabled tools, sorted."""
        return self.tools.names()

    def pack_of(self, tool_name: str) -> str:
        """The tool pack tool ``tool_name`` was enabled from, ``""`` when none: what a
        tool grant's ``<pack>.<name>`` pattern matches (:mod:`a2e_host.tool_patterns`)."""
        return self.tools.pack_of(tool_name)

    def skill_names(self) -> list[str]:
        """Names of the loaded skills, sorted."""
        return self.skills.names()

    def resolve_skill(self, ref: str) -> Resolution[SkillVersion]:
        """What the skill reference ``ref`` (``name`` or ``name@version``) resolves to,
        or why nothing may run (PROTOCOL.md §9 Versions and lifecycle)."""
        return self.skills.resolve(ref)

    def check_proc(self, node: ChainNode) -> str | None:
        """A static refusal for a proc node (see :meth:`ProcPolicy.static_check`), or None."""
        return self.proc.static_check(node)

    def signature_of(self, registry: str, name: str) -> Signature | None:
        """The schemas of ``name`` in ``registry`` (a kind's ``registry`` in the kind table:
        ``"tool"`` or ``"skill"``), None when it is not registered; for validation's static
        checks (PROTOCOL.md §4)."""
        if registry == "tool":
            tool = self.tools.get(name)
            return tool_signature(tool) if tool is not None else None
        return self.skills.signature_of(name) if registry == "skill" else None

    def pack_providing(self, tool_name: str) -> str | None:
        """The installed pack, not enabled, that provides ``tool_name``, or None (always
        None for a toolbox not built by :meth:`from_config`).

        The first call imports and builds every installed pack that is not enabled
        (:func:`~a2e_host.tools.registry.tools_of_packs_not_enabled`), once per toolbox:
        it is asked only for a tool validation found unknown, so starting a host never
        imports a pack it does not enable.
        """
        if self.config is None:
            return None
        if self._other_packs is None:
            self._other_packs = tools_of_packs_not_enabled(self.config)
        return self._other_packs.get(tool_name)

    def suggest_tool(self, name: str) -> list[str]:
        """Tool names close to ``name``."""
        return self.tools.suggest(name)

    def suggest_skill(self, name: str) -> list[str]:
        """Skill names close to ``name``."""
        return self.skills.suggest(name)

    # ── executors ──

    async def run_tool(self, node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        """The ``tool`` executor: ``tools.get(node.name).invoke(args)``, with a copy of
        ``ctx`` of its own (:meth:`~a2e_host.chains.nodes.NodeContext.for_invocation`)
        as :data:`~a2e_host.chains.nodes.current_node` while it runs, marked cancelled
        when this invocation is.

        Raises:
            NodeError: the tool is not registered (validation should have refused it), or
                the tool failed (see :meth:`~a2e_host.tools.Tool.invoke`).
        """
        tool = self.tools.get(node.name)
        if tool is None:
            raise NodeError(f"unknown tool {node.name!r} in node {ctx.node_id!r}")
        own = ctx.for_invocation()
        token = current_node.set(own)
        try:
            return await tool.invoke(args)
        except anyio.get_cancelled_exc_class():
            own.mark_cancelled()  # an async tool's own task saw it; a thread tool's too
            raise
        finally:
            current_node.reset(token)

    async def run_proc(self, node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        """The ``proc`` executor (see :func:`a2e_host.chains.proc.run_proc`)."""
        return await run_proc(args, self.proc, node_id=ctx.node_id)
