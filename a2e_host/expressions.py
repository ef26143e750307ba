"""JMESPath expressions of a chain: compiled once, with the root fields they read.

Layer: core (no I/O, no clock, no anyio). Every ``input_map`` value, ``condition`` and
``items_path`` is compiled here at validation (PROTOCOL.md §3), and evaluated at run time
against a node's context (``{"input": …, "<node_id>": {"output", "status"}, "output": …,
"item": …, "index": …, "error": …}``).

Theory of operation:

* A leading ``$.`` means the root: ``$.input.x`` is ``input.x``; a bare ``$`` is ``@``.
* :func:`compile_expression` caches by text (bounded LRU, larger than jmespath's own 128).
* :attr:`Expression.roots` are the fields read from the **root** of the context, found by
  walking the syntax tree: ``read.output`` → ``{"read"}``; fields inside a filter, an
  ``&expref`` or the right side of a projection / pipe / sub-expression are read from
  some inner value, not the root, and are not listed (PROTOCOL.md §4).
* A plain dotted path (``n12.output``, ``input.files``, ``item``) is resolved without the
  jmespath interpreter, with the same semantics (a field of a mapping, else null):
  about 0.25 µs instead of 4–6 µs per evaluation.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import jmespath
from jmespath import exceptions as jmes_exceptions
from jmespath import visitor as jmes_visitor
from jmespath.functions import Functions

__all__ = ["Expression", "ExpressionError", "compile_expression", "is_truthy"]

_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_INTERPRETER = jmes_visitor.TreeInterpreter()
_FUNCTIONS = frozenset(
    name[len("_func_") :] for name in dir(Functions) if name.startswith("_func_")
)
_CACHE_SIZE = 8192

# Node types whose children all read from the same value as the node itself.
_SAME_VALUE = frozenset(
    {
        "comparator",
        "or_expression",
        "and_expression",
        "not_expression",
        "multi_select_list",
        "multi_select_dict",
        "key_val_pair",
        "function_expression",
        "flatten",
    }
)
# Node types ``[left, right, …]`` whose left side reads the node's value and whose other
# children read a value derived from it (a projection's elements, a pipe's result …).
_LEFT_ONLY = frozenset(
    {"subexpression", "index_expression", "projection", "value_projection",
     "filter_projection", "pipe"}
)


class ExpressionError(ValueError):
    """A JMESPath expression does not compile.

    Attributes:
        message: what is wrong, one sentence (without node or field: the caller adds them).
        column: 1-based column in the expression **as written** (a leading ``$.`` counts),
            or None when no position applies (an empty expression).
    """

    def __init__(self, message: str, column: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.column = column


class Expression:
    """One compiled expression.

    Attributes:
        text: the expression as written (may start with ``$.``).
        roots: root field names it reads (the candidates for data edges, PROTOCOL.md §4).
        parsed: the jmespath syntax tree (a dict with ``type``, ``children``, ``value``).
        path: the field names of a plain dotted path (``("n1", "output")``), else None.
    """

    __slots__ = ("text", "roots", "parsed", "path", "_single")

    def __init__(self, text: str, parsed: dict[str, Any], path: tuple[str, ...] | None) -> None:
        self.text = text
        self.parsed = parsed
        self.path = path
        self.roots: frozenset[str] = (
            frozenset(path[:1]) if path is not None else frozenset(_root_fields(parsed))
        )
        self._single = path[0] if path is not None and len(path) == 1 else None

    @property
    def is_literal(self) -> bool:
        """Whether the expression is a single literal (e.g. ``\\`[1, 2, 3]\\```)."""
        return bool(self.parsed["type"] == "literal")

    @property
    def literal(self) -> Any:
        """The literal's value when :attr:`is_literal`, else None."""
        return self.parsed["value"] if self.is_literal else None

    def search(self, context: Mapping[str, Any]) -> Any:
        """Evaluate against ``context`` (PROTOCOL.md §3).

        Returns:
            The JSON value found; None (null) where a field is missing.

        Raises:
            jmespath.exceptions.JMESPathError: e.g. a function called with a wrong type.
            TypeError, ValueError: from a function applied to odd values. The caller
                turns any of them into the node's error.
        """
        if self._single is not None:
            try:
                return context.get(self._single)
            except AttributeError:
                return None
        if self.path is not None:
            value: Any = context
            for key in self.path:
                try:
                    value = value.get(key)
                except AttributeError:
                    return None
            return value
        return _INTERPRETER.visit(self.parsed, context)

    def __repr__(self) -> str:
        return f"Expression({self.text!r})"


def compile_expression(text: str) -> Expression:
    """Compile ``text`` (cached by text).

    Args:
        text: a JMESPath expression; a leading ``$.`` (after blanks) means the root, a bare
            ``$`` is the root itself.

    Returns:
        The shared :class:`Expression` for this text.

    Raises:
        ExpressionError: a syntax error or an unknown function, with the 1-based column.
    """
    return _compile_cached(text)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _compile_cached(text: str) -> Expression:
    stripped = text.lstrip()
    offset = len(text) - len(stripped)
    if stripped.rstrip() == "$":
        body, offset = "@", 0
    elif stripped.startswith("$."):
        body, offset = stripped[2:], offset + 2
    else:
        body = text
    if not body.strip():
        raise ExpressionError("the expression is empty", None)
    stripped_body = body.strip()
    if _DOTTED.fullmatch(stripped_body):
        # the common case (``n12.output``): build jmespath's own tree without its parser,
        # which costs ~20 µs; a chain of 10,000 nodes has 10,000 distinct such paths
        path = tuple(stripped_body.split("."))
        return Expression(text, _dotted_tree(path), path)
    try:
        parsed: dict[str, Any] = jmespath.compile(body).parsed
    except jmes_exceptions.LexerError as exc:
        col = (exc.lexer_position or 0) + offset + 1
        raise ExpressionError(_lexer_message(exc, body), col) from None
    except jmes_exceptions.ParseError as exc:
        col = (exc.lex_position or 0) + offset + 1
        raise ExpressionError(_parse_message(exc), col) from None
    except jmes_exceptions.JMESPathError as exc:  # pragma: no cover - defensive
        raise ExpressionError(str(exc).splitlines()[0], None) from None
    _check_functions(parsed, body, offset)
    return Expression(text, parsed, None)


def _dotted_tree(path: tuple[str, ...]) -> dict[str, Any]:
    """The syntax tree jmespath's parser gives ``a.b.c``: one subexpression of fields."""
    fields = [{"type": "field", "children": [], "value": name} for name in path]
    if len(fields) == 1:
        return fields[0]
    return {"type": "subexpression", "children": fields}


def _lexer_message(exc: jmes_exceptions.LexerError, body: str) -> str:
    if exc.lexer_value == "$":
        return "'$' is only accepted as the leading '$.' of an expression (it means the root)"
    return f"{exc.message}"


def _parse_message(exc: jmes_exceptions.ParseError) -> str:
    if isinstance(exc, jmes_exceptions.IncompleteExpressionError):
        return "the expression ends too early"
    if str(exc.token_type).lower() == "number":
        return (
            f"unexpected number {exc.token_value!r}; JMESPath literals go in backticks, "
            f"e.g. `{exc.token_value}`"
        )
    if str(exc.token_type).lower() == "eof":
        return "the expression ends too early"
    detail = "" if exc.msg == "invalid token" else f" ({exc.msg})"
    return f"unexpected {exc.token_value!r}{detail}"


def _check_functions(parsed: dict[str, Any], body: str, offset: int) -> None:
    stack = [parsed]
    while stack:
        node = stack.pop()
        if node["type"] == "function_expression" and node["value"] not in _FUNCTIONS:
            name = node["value"]
            found = re.search(re.escape(name) + r"\s*\(", body)
            col = (found.start() if found else 0) + offset + 1
            raise ExpressionError(f"unknown function {name}()", col)
        stack.extend(child for child in node["children"] if isinstance(child, dict))


def _root_fields(parsed: dict[str, Any]) -> set[str]:
    """Field names read from the root value; iterative, so deep trees cannot overflow."""
    found: set[str] = set()
    stack: list[dict[str, Any]] = [parsed]  # nodes evaluated against the root
    while stack:
        node = stack.pop()
        kind = node["type"]
        children = [child for child in node["children"] if isinstance(child, dict)]
        if kind == "field":
            found.add(node["value"])
        elif kind in _SAME_VALUE:
            stack.extend(children)
        elif kind in _LEFT_ONLY and children:
            stack.append(children[0])
            if kind in ("subexpression", "pipe"):
                # ``@.a.b`` and ``@ | a`` read ``a`` from the root too (``a.b.c`` is one
                # subexpression node with three children, each read from the one before).
                for before, child in zip(children, children[1:], strict=False):
                    if before["type"] != "current":
                        break
                    stack.append(child)
        # literal, current, identity, index, slice, expref: nothing read from the root
    return found


def is_truthy(value: Any) -> bool:
    """JMESPath truthiness (PROTOCOL.md §5): ``false``, null, ``""``, ``[]`` and ``{}`` are
    false; everything else, ``0`` included, is true."""
    if value is None or value is False:
        return False
    if isinstance(value, str | list | tuple | Mapping):
        return len(value) > 0
    return True
