"""The :class:`~a2e_host.chains.catalog.Signature` of a tool (or Python skill): its
schemas, and what the host holds it to (a declared skill's is in :mod:`~a2e_host.chains.skills`).

Layer: runtime edge (reads :class:`~a2e_host.tools.Tool` objects and skill files; runs
nothing). Used by the toolbox and the skill loader's catalog to answer validation's
``signature_of`` (PROTOCOL.md §4 static checks).
"""

from __future__ import annotations

from ..tools import Tool
from .catalog import Signature

__all__ = ["tool_signature"]


def tool_signature(tool: Tool) -> Signature:
    """A tool's (or Python skill's) signature: its input is converted to its input type
    before the call when it has one (else its schema is only a description), and its output
    to its output type after (:meth:`~a2e_host.tools.Tool.invoke`)."""
    converted = tool.input_type is not None
    return Signature(tool.input_schema, tool.output_schema, input_enforced=converted,
                     required_enforced=converted, output_enforced=tool.output_type is not None)
