"""What one tool or skill declares, as the static checks read it: its schemas' types and
what the host enforces of them.

Layer: core (pure). Read once per validation per tool by
:class:`~a2e_host.chains.typecheck.TypeChecks` (and, for a node's ``fallback``, by
:class:`~a2e_host.chains.fallback_checks.Fallbacks`). Source: PROTOCOL.md §4 static checks.
"""

from __future__ import annotations

from collections.abc import KeysView
from dataclasses import dataclass

from .catalog import Signature
from .schema_types import OBJECT, SchemaType, schema_type

__all__ = ["ToolFacts", "facts_of_signature"]


@dataclass(frozen=True, slots=True)
class ToolFacts:
    """What one tool or skill declares, read once per validation.

    Attributes:
        label: how problems name it (``"tool 'read_file'"``, ``"fallback tool 'stat'"``).
        input / output: the types of its input and output schemas.
        types_enforced: a field that does not fit its type fails the call.
        required_enforced: a missing ``required`` field fails the call.
        names: the declared input property names, sorted.
        checks_fields: the input schema declares fields (properties, required ones, or a
            type for any field): there is something to hold the node's input to.
        fields: the declared property names (a set view, for a quick subset test).
        props: the declared input properties' types.
    """

    label: str
    input: SchemaType
    output: SchemaType
    types_enforced: bool
    required_enforced: bool
    names: tuple[str, ...]
    checks_fields: bool
    fields: KeysView[str]
    props: dict[str, SchemaType]


def facts_of_signature(label: str, sig: Signature) -> ToolFacts:
    """The :class:`ToolFacts` of a :class:`~a2e_host.chains.catalog.Signature`; schema types
    come from :func:`~a2e_host.chains.schema_types.schema_type`'s cache."""
    want = schema_type(sig.input_schema)
    props = dict(want.props or {})
    return ToolFacts(
        label=label, input=want,
        output=schema_type(sig.output_schema, closed=sig.output_enforced),
        types_enforced=sig.input_enforced,
        required_enforced=sig.required_enforced or sig.input_enforced,
        names=tuple(sorted(props)),
        checks_fields=bool(want.kinds & OBJECT) and (
            want.props is not None or want.extra is not None or bool(want.required)),
        fields=props.keys(), props=props,
    )
