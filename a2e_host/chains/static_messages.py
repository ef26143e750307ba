"""The messages and hints of static-check findings (PROTOCOL.md §4 static checks): one
sentence naming the field, what it takes and what it would get, and how to fix it.

Layer: core (pure).
"""

from __future__ import annotations

from .expressions import clip
from .schema_fit import Misfit
from .schema_types import ARRAY, NULL, NUMBER, STRING, SchemaType

__all__ = [
    "FIX_THE_PATH",
    "a_",
    "convert_hint",
    "did_you_mean",
    "listed",
    "mapped_message",
    "static_value_message",
]

FIX_THE_PATH = "fix the path to read a field that exists there (the message says what is there)"
"""The hint of a read that is always null."""


def static_value_message(key: str, label: str, found: Misfit) -> tuple[str, str]:
    """The message and hint of a static ``input`` value that does not fit its field."""
    where = f"{key}{found.path}"
    if found.reason == "is missing":
        return (f"input field {where!r} of {label} is missing; it must be "
                f"{a_(found.expected)}", f"add {where} to input")
    if found.reason == "is not accepted":
        return (f"input field {where!r} of {label} is not accepted: the object there has no "
                "such field", f"remove {where} from input")
    if found.reason:
        return (f"input field {where!r} of {label} {found.reason}: input gives {found.got}",
                f"change input.{where} to a value {label} accepts")
    return (f"input field {where!r} of {label} must be {a_(found.expected)}, but input gives "
            f"{found.got}", f"change input.{where} to {a_(found.expected)}")


def mapped_message(key: str, label: str, text: str, found: Misfit, null_note: str,
                   error: bool) -> str:
    """The message of an ``input_map`` expression that does not (or may not) fit its field;
    ``null_note`` says why the expression is always null, when it is."""
    text = clip(text)
    field = f"input field {key!r} of {label}"
    verb = "gives" if error else "may give"
    if found.path:
        where = f"{key}{found.path}"
        if found.reason == "is missing":
            return (f"{field} needs {where!r} ({a_(found.expected)}), but {text} {verb} "
                    "an object without it")
        if found.reason == "is not accepted":
            return f"{field} does not accept {where!r}, but {text} {verb} an object with it"
        if found.reason:
            return f"{field}: {where!r} {found.reason} in what {text} {verb}"
        return (f"{field} must hold {a_(found.expected)} at {where!r}, but {text} {verb} "
                f"{a_(found.got)} there")
    if null_note:
        return f"{field} must be {a_(found.expected)}, but {text} is always null: {null_note}"
    if error:
        return f"{field} must be {a_(found.expected)}, but {text} is {a_(found.got)}"
    return f"{field} takes {a_(found.expected)}, but {text} may be {a_(found.got)}"


def convert_hint(found: Misfit, want: SchemaType, always_null: bool = False) -> str:
    """How to fix an ``input_map`` expression that does not fit: read another field, or
    convert the value."""
    if always_null:
        return FIX_THE_PATH
    if not found.path:
        if want.kinds == STRING:
            return "read a field that holds a string, or wrap the expression in to_string(...)"
        if want.kinds & NUMBER and not want.kinds & ~(NUMBER | NULL):
            return "read a field that holds a number, or convert it with to_number(...)"
        if want.kinds == ARRAY:
            return "read a field that holds a list, or wrap the expression in to_array(...)"
    return f"read a value that is {a_(found.expected)} there"


def did_you_mean(close: str | None) -> str:
    return f"; did you mean {close!r}?" if close else ""


def listed(names: tuple[str, ...]) -> str:
    return ", ".join(names[:12]) + (", …" if len(names) > 12 else "")


def a_(noun: str) -> str:
    if noun.startswith(("one of", "any", "nothing", "null", "'")) or noun[:1].isdigit():
        return noun
    return ("an " if noun[:1] in "aeiou" else "a ") + noun
