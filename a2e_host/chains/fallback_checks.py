"""A ``tool`` node's ``fallback`` in the static checks: its input, and what it outputs.

Layer: core (pure: no I/O, no clock, no anyio). Used by
:class:`~a2e_host.chains.typecheck.TypeChecks`. Source: PROTOCOL.md §4 (static checks),
§5 Recovery (``fallback``).

Theory of operation. The fallback runs with the node's resolved input, held to its own
input schema (PROTOCOL.md §5), so the type checks hold that input to the fallback's
schema too, with the fallback's :class:`~a2e_host.chains.tool_facts.ToolFacts` labelled
``fallback tool '<name>'``; each finding is reported at field ``fallback``. A fallback
sure to refuse the input is an error, as a fallback that is not a registered tool is: the
node's recovery cannot work.

Downstream, the node's output is the primary's or the fallback's, so its type is their
:func:`~a2e_host.chains.schema_types.join` (unknown when either is): a read only one of
them can satisfy may give null, a warning, and one neither can is an error as before.
:meth:`Fallbacks.one_sided` words such a warning after the tool that lacks the value.

Bounded and cached: the joined output type once per (tool, fallback) pair per validation,
the fallback's facts once per name, each side's fit on the shared fuel. A node without a
fallback costs one attribute read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from .expressions import clip
from .schema_fit import fit
from .schema_types import ANY, NULL_TYPE, Fuel, OutOfFuel, SchemaType, join
from .schema_words import describe
from .static_messages import a_
from .tool_facts import ToolFacts
from .type_inference import read_fields

__all__ = ["FALLBACK", "Fallbacks", "fallback_hint"]

FALLBACK = "fallback"
"""The field of every problem found in a fallback's input."""

_FIT_STEPS = 5_000  # per side's fit of a one-sided read


def fallback_hint(hint: str) -> str:
    """The hint of a problem in a fallback's input: the input suits the primary, so
    another fallback is the likely fix."""
    return f"name a fallback tool that takes this node's input, or {hint}"


class Fallbacks:
    """The fallback side of one validation's static checks.

    Args:
        facts_of: the validation's cached ``(registry, name) -> ToolFacts | None``.
        fuel: the validation's fuel (joins and fits spend it; :class:`OutOfFuel` ends
            the checks, leaving the rest to run time).
    """

    __slots__ = ("facts_of", "fuel", "_labelled", "_outputs")

    def __init__(self, facts_of: Callable[[str, str], ToolFacts | None], fuel: Fuel) -> None:
        self.facts_of = facts_of
        self.fuel = fuel
        self._labelled: dict[str, ToolFacts | None] = {}
        self._outputs: dict[tuple[str, str], SchemaType] = {}

    def facts(self, name: str) -> ToolFacts | None:
        """The fallback tool ``name``'s facts, labelled as the fallback; None when it
        declares no schema (or is not a tool)."""
        if name in self._labelled:
            return self._labelled[name]
        facts = self.facts_of("tool", name)
        found = replace(facts, label=f"fallback tool {name!r}") if facts is not None else None
        self._labelled[name] = found
        return found

    def output(self, primary: SchemaType, tool: str, fallback: str) -> SchemaType:
        """The type of the output of a node calling ``tool`` (output type ``primary``) with
        ``fallback``: either tool's output; unknown when either's is."""
        key = (tool, fallback)
        found = self._outputs.get(key)
        if found is None:
            other = self.facts_of("tool", fallback)
            found = ANY if other is None else join(primary, other.output, self.fuel)
            self._outputs[key] = found
        return found

    def one_sided(self, key: str, label: str, text: str, reader: str, tool: str,
                  fallback: str, rest: Sequence[str], want: SchemaType) -> tuple[str, str] | None:
        """The message and hint of ``input_map.<key>`` (``text``, a plain path
        ``<reader>.output.<rest>``) when what it reads fits ``want`` from one of ``tool``
        and its ``fallback`` but not from the other; None otherwise.

        Raises:
            OutOfFuel: the validation's fuel ran out.
        """
        primary = self.facts_of("tool", tool)
        other = self.facts_of("tool", fallback)
        if primary is None or other is None:
            return None
        mine = read_fields(primary.output, rest)
        theirs = read_fields(other.output, rest)
        mine_fits, theirs_fits = self._fits(mine.type, want), self._fits(theirs.type, want)
        if mine_fits is None or theirs_fits is None or mine_fits == theirs_fits:
            return None
        lacking = theirs if mine_fits else mine
        # the other tool's field is the one meant: no "did you mean" another one here
        why = lacking.note.partition("; did you mean")[0] \
            if lacking.note and lacking.type is NULL_TYPE \
            else f"it gives {a_(describe(lacking.type))}"
        field = f"input field {key!r} of {label} takes {a_(describe(want))}"
        if mine_fits:
            return (f"{field}; {clip(text)} gives one from tool {tool!r}, but not when node "
                    f"{reader!r} falls back to tool {fallback!r} ({why})",
                    f"read a value both {tool!r} and {fallback!r} give, or name a fallback "
                    "whose output has it")
        return (f"{field}; {clip(text)} gives one only when node {reader!r} falls back to "
                f"tool {fallback!r}, not from tool {tool!r} ({why})",
                f"read a value {tool!r} gives, or make the fallback the node's tool")

    def _fits(self, t: SchemaType, want: SchemaType) -> bool | None:
        """Whether every value of ``t`` fits ``want``; None when that takes too long."""
        steps = min(_FIT_STEPS, self.fuel.left)
        fuel = Fuel(steps)
        try:
            return fit(t, want, fuel) is None
        except OutOfFuel:
            return None
        finally:
            self.fuel.spend(steps - max(fuel.left, 0) + 1)
