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
  about 0.25 µs instead of 4–6 µs per evaluation. It cannot loop or build anything, so
  it runs without a budget.
* Every other expression is evaluated by :mod:`a2e_host.chains.interpreter` under a
  :class:`~a2e_host.chains.interpreter.Budget` (steps, bytes of the values it builds, a cancel
  flag; PROTOCOL.md §6).
* **Bounds at compile time.** An expression is at most :data:`MAX_EXPRESSION_CHARS`
  characters and nests at most :data:`MAX_EXPRESSION_NESTING` levels. Nesting is bounded
  twice: before parsing, by a linear scan that counts what makes jmespath's recursive
  parser recurse (brackets, parentheses, braces, function calls, ``!``, ``&``,
  projections, and the JSON inside backtick literals), so that no input can exhaust the
  parser's stack; after parsing, by the depth of the syntax tree (left-nested chains such
  as ``a || b || …`` or ``a[?x][?y]…`` parse without recursion but evaluate with it). A
  chain of pipes ``a | b | c`` is one pipe node with many children, not a nesting.
  :class:`ExpressionTooComplex` names the bound; ``RecursionError`` is still caught as a
  last resort.
* The cache keeps at most :data:`_CACHE_SIZE` expressions and :data:`_CACHE_CHARS`
  characters of expression text (syntax trees take ~70 bytes per character), so
  requests full of distinct long expressions cannot grow it without bound.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from jmespath import exceptions as jmes_exceptions
from jmespath import parser as jmes_parser
from jmespath.functions import Functions

from ..sizes import clip
from .interpreter import Budget, evaluate, is_truthy

__all__ = [
    "Expression",
    "ExpressionError",
    "ExpressionTooComplex",
    "MAX_EXPRESSION_CHARS",
    "MAX_EXPRESSION_NESTING",
    "clip",
    "compile_expression",
    "is_truthy",
]

MAX_EXPRESSION_CHARS = 65_536
"""Characters one expression may have (a join of 4,000 node outputs fits)."""

MAX_EXPRESSION_NESTING = 64
"""Levels one expression may nest: brackets, parentheses, braces, function calls, ``!``,
``&``, projections, operators, and the JSON inside backtick literals."""

_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_FUNCTIONS = frozenset(
    name[len("_func_") :] for name in dir(Functions) if name.startswith("_func_")
)
_DEFAULT_BUDGET = Budget()
_CACHE_SIZE = 8192
_CACHE_CHARS = 1 << 20
_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = frozenset(")]}")

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


class ExpressionTooComplex(ExpressionError):
    """An expression is longer than :data:`MAX_EXPRESSION_CHARS` or nests deeper than
    :data:`MAX_EXPRESSION_NESTING`; the message names the bound and what was found."""


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

    def search(self, context: Mapping[str, Any], budget: Budget | None = None) -> Any:
        """Evaluate against ``context`` (PROTOCOL.md §3).

        Args:
            context: the node's context, usually an
                :class:`~a2e_host.chains.interpreter.ContextView`.
            budget: what the evaluation may spend; None for the default ceilings. A plain
                dotted path needs no budget and ignores it.

        Returns:
            The JSON value found; None (null) where a field is missing.

        Raises:
            ExpressionBudgetExceeded, EvaluationSliceExhausted, EvaluationCancelled: see
                :func:`a2e_host.chains.interpreter.evaluate`.
            jmespath.exceptions.JMESPathError: e.g. a function called with a wrong type.
            TypeError, ValueError, RecursionError: from a function applied to odd values.
                The caller turns any of them into the node's error.
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
        return evaluate(self.parsed, context, budget or _DEFAULT_BUDGET)

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
        ExpressionTooComplex: longer than :data:`MAX_EXPRESSION_CHARS` or nested deeper
            than :data:`MAX_EXPRESSION_NESTING`.
        ExpressionError: a syntax error or an unknown function, with the 1-based column.
    """
    with _CACHE_LOCK:
        found = _CACHE.get(text)
        if found is not None:
            _CACHE.move_to_end(text)
            return found
    expr = _compile(text)
    _remember(text, expr)
    return expr


_CACHE: OrderedDict[str, Expression] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_cache_chars = 0


def _remember(text: str, expr: Expression) -> None:
    global _cache_chars
    if len(text) > _CACHE_CHARS // 4:
        return
    with _CACHE_LOCK:
        if text in _CACHE:
            return
        _CACHE[text] = expr
        _cache_chars += len(text)
        while len(_CACHE) > _CACHE_SIZE or _cache_chars > _CACHE_CHARS:
            old, _ = _CACHE.popitem(last=False)
            _cache_chars -= len(old)


def _compile(text: str) -> Expression:
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
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionTooComplex(
            f"is {len(text):,} characters long; at most {MAX_EXPRESSION_CHARS:,} are allowed",
            None,
        )
    stripped_body = body.strip()
    if _DOTTED.fullmatch(stripped_body):
        # the common case (``n12.output``): build jmespath's own tree without its parser,
        # which costs ~20 µs; a chain of 10,000 nodes has 10,000 distinct such paths
        path = tuple(stripped_body.split("."))
        return Expression(text, _dotted_tree(path), path)
    depth, at = _scan_nesting(body)
    if depth > MAX_EXPRESSION_NESTING:
        raise ExpressionTooComplex(_too_deep(depth), at + offset + 1)
    try:
        # a parser of our own, not jmespath.compile: its class-wide cache would keep up to
        # 512 syntax trees of any size alive
        parsed: dict[str, Any] = jmes_parser.Parser()._do_parse(body).parsed
    except jmes_exceptions.LexerError as exc:
        col = (exc.lexer_position or 0) + offset + 1
        raise ExpressionError(_lexer_message(exc, body), col) from None
    except jmes_exceptions.ParseError as exc:
        col = (exc.lex_position or 0) + offset + 1
        raise ExpressionError(_parse_message(exc), col) from None
    except jmes_exceptions.JMESPathError as exc:  # pragma: no cover - defensive
        raise ExpressionError(str(exc).splitlines()[0], None) from None
    except RecursionError:  # pragma: no cover - the scan above keeps the parser shallow
        raise ExpressionTooComplex(_too_deep(depth), None) from None
    depth = _flatten_pipes(parsed)
    if depth > MAX_EXPRESSION_NESTING:
        raise ExpressionTooComplex(_too_deep(depth), None)
    _check_functions(parsed, body, offset)
    return Expression(text, parsed, None)


def _too_deep(depth: int) -> str:
    return (
        f"nests {depth} levels deep; at most {MAX_EXPRESSION_NESTING} are allowed (brackets, "
        "parentheses, braces, function calls, !, &, projections and operators each add one)"
    )


def _scan_nesting(body: str) -> tuple[int, int]:
    """An upper bound of how deep jmespath's parser will recurse on ``body``, and the
    0-based position where that depth is reached; one linear pass, no recursion.

    Open brackets count one level each. ``!`` and projections (``*``, ``[*]``, ``[]``,
    ``[?…]``) count one until an operator that ends them (``|``, ``||``, ``&&``, a
    comparison, ``,``, ``:``) or their bracket closes; ``&`` counts one until ``,``, ``:``
    or its bracket closes. The JSON inside a backtick literal counts its own depth.
    """
    frames: list[list[int]] = [[0, 0, 0]]  # per bracket: [soft ops, & ops, projection?]
    level = 0  # open brackets + every frame's counters
    deepest, at = 0, 0
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c in _OPENERS:
            j = i + 1
            while j < n and body[j] in " \t\r\n":
                j += 1
            opens_projection = c == "[" and j < n and body[j] in "*]?"
            frames.append([0, 0, 1 if opens_projection else 0])
            level += 1
        elif c in _CLOSERS:
            if len(frames) > 1:
                soft, sticky, projection = frames.pop()
                level -= 1 + soft + sticky
                if projection:  # the projection goes on after its bracket
                    frames[-1][0] += 1
                    level += 1
        elif c == "!" and body[i + 1 : i + 2] != "=":
            frames[-1][0] += 1
            level += 1
        elif c == "*":
            frames[-1][0] += 1
            level += 1
        elif c == "&":
            if body[i + 1 : i + 2] == "&":
                level -= frames[-1][0]
                frames[-1][0] = 0
                i += 1
            else:
                frames[-1][1] += 1
                level += 1
        elif c in "|<>=!":
            level -= frames[-1][0]
            frames[-1][0] = 0
        elif c in ",:":
            level -= frames[-1][0] + frames[-1][1]
            frames[-1][0] = frames[-1][1] = 0
        elif c == "'" or c == '"':
            i = _skip_quoted(body, i, c)
        elif c == "`":
            i, inner = _literal_depth(body, i)
            if level + inner > deepest:
                deepest, at = level + inner, i
        if level > deepest:
            deepest, at = level, i
        i += 1
    return deepest, at


def _skip_quoted(body: str, start: int, quote: str) -> int:
    """Index of the quote closing the string opened at ``start`` (or the last index)."""
    i, n = start + 1, len(body)
    while i < n:
        c = body[i]
        if c == "\\":
            i += 2
            continue
        if c == quote:
            return i
        i += 1
    return n - 1


def _literal_depth(body: str, start: int) -> tuple[int, int]:
    """The closing backtick of the literal opened at ``start`` and the nesting depth of
    the JSON inside it."""
    depth = deepest = 0
    i, n = start + 1, len(body)
    while i < n:
        c = body[i]
        if c == "\\":
            i += 2
            continue
        if c == "`":
            break
        if c == '"':
            # a JSON string inside the literal; an escaped backtick may end it early
            i += 1
            while i < n and body[i] != '"' and body[i] != "`":
                i += 2 if body[i] == "\\" else 1
            if i < n and body[i] == "`":
                break
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
        i += 1
    return min(i, n - 1), deepest


def _flatten_pipes(parsed: dict[str, Any]) -> int:
    """Turn left-nested pipes ``((a | b) | c)`` into one pipe node ``a | b | c`` (jmespath
    evaluates a pipe's children in order) and return the tree's nesting; iterative.

    The nesting counts the nodes that hold other nodes, except pipes, ``key: value``
    pairs and the flatten inside ``[]`` (parts of one construct, not a level of their own).
    """
    deepest = 0
    stack: list[tuple[dict[str, Any], int]] = [(parsed, 0)]
    while stack:
        node, depth = stack.pop()
        kind = node.get("type")
        if kind == "pipe":
            tail: list[Any] = []
            head = node
            while head.get("type") == "pipe" and head["children"]:
                tail.extend(reversed(head["children"][1:]))
                first = head["children"][0]
                if not isinstance(first, dict) or first.get("type") != "pipe":
                    tail.append(first)
                    break
                head = first
            node["children"] = tail[::-1]
        children = [child for child in node.get("children", ()) if isinstance(child, dict)]
        if children:
            if kind not in _TREE_FREE:
                depth += 1
            deepest = max(deepest, depth)
            stack.extend((child, depth) for child in children)
    return deepest


_TREE_FREE = frozenset({"pipe", "key_val_pair", "flatten"})


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
