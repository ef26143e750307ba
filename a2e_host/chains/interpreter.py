"""A JMESPath interpreter that runs under a budget (PROTOCOL.md §3, §6).

Layer: core (no I/O, no clock, no anyio; it may run in a worker thread). It subclasses
jmespath's own ``TreeInterpreter``: the language is jmespath's, only the accounting, the
context root and ordering comparisons are ours.

Theory of operation:

* **One interpreter per evaluation.** :func:`evaluate` builds a
  :class:`BudgetedInterpreter` for one :class:`Budget`; nothing is shared between
  evaluations, so one may run on the event loop while another runs in a worker thread.
* **Steps, slices and bytes** are counted by its base, :class:`BudgetMeter`
  (:mod:`a2e_host.chains.expression_budget` explains how); this module's visits say
  what each syntax-tree node costs.
* **The root.** A node's context is a :class:`ContextView` (a Mapping over the chain's
  shared context plus the node's own keys, never copied). Field reads go through it;
  where an expression uses the root *as a value* (``@`` / ``$`` as a result, a function
  argument, part of a multi-select, an equality operand) it is materialised once into a
  plain dict, so ``keys(@)``, ``length(@)`` and ``merge(@, `{}`)`` see a JSON object
  (PROTOCOL.md §3).
* **Ordering comparisons** (``<``, ``<=``, ``>``, ``>=``) compare two numbers or two
  strings; anything else is null (the JMESPath specification; jmespath.py also orders
  strings, which we keep), never a Python ``TypeError``.

:class:`Budget`, the evaluation's exceptions and :class:`ContextView` are importable from
here too.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

from jmespath import functions as jmes_functions
from jmespath import visitor as jmes_visitor

from .context_view import ContextView
from .expression_budget import (
    CHECK_EVERY,
    Budget,
    BudgetMeter,
    EvaluationCancelled,
    EvaluationSliceExhausted,
    ExpressionBudgetExceeded,
)

__all__ = [
    "Budget",
    "BudgetedInterpreter",
    "CHECK_EVERY",
    "ContextView",
    "EvaluationCancelled",
    "EvaluationSliceExhausted",
    "ExpressionBudgetExceeded",
    "evaluate",
    "is_truthy",
]

_COMPARE_BYTES_PER_STEP = 16  # an equality walks ~4 elements in the time of one step
_FUNCTIONS = jmes_functions.Functions()
_ORDERING: dict[str, Callable[[Any, Any], bool]] = {
    "lt": operator.lt,
    "lte": operator.le,
    "gt": operator.gt,
    "gte": operator.ge,
}
# functions whose result is a new list, object or string (unless it is an argument)
_BUILDERS = frozenset(
    {"join", "keys", "map", "merge", "reverse", "sort", "sort_by", "to_array", "to_string",
     "values"}
)
# functions that pass over every element of their list / object arguments
_LINEAR = frozenset(
    {"avg", "contains", "join", "keys", "map", "max", "max_by", "merge", "min", "min_by",
     "reverse", "sort", "sort_by", "sum", "values"}
)
_SORTS = frozenset({"sort", "sort_by"})


def is_truthy(value: Any) -> bool:
    """JMESPath truthiness (PROTOCOL.md §5): ``false``, null, ``""``, ``[]`` and ``{}`` are
    false; everything else, ``0`` included, is true."""
    if value is None or value is False:
        return False
    if isinstance(value, str | list | tuple | Mapping):
        return len(value) > 0
    return True


def evaluate(parsed: dict[str, Any], root: Any, budget: Budget) -> Any:
    """Evaluate a jmespath syntax tree against ``root`` under ``budget``.

    Args:
        parsed: a jmespath syntax tree (``jmespath.compile(text).parsed``).
        root: the context: a :class:`ContextView`, a mapping or any JSON value.
        budget: what the evaluation may spend.

    Returns:
        The JSON value found (a :class:`ContextView` result comes back as a plain dict).

    Raises:
        ExpressionBudgetExceeded: a ceiling of the budget was reached.
        EvaluationSliceExhausted: the budget's ``slice_steps`` ran out first.
        EvaluationCancelled: the budget's cancel flag was set.
        jmespath.exceptions.JMESPathError, TypeError, ValueError, RecursionError: the
            expression failed on these values (e.g. a function given the wrong type).
    """
    interpreter = BudgetedInterpreter(budget)
    return interpreter.plain(interpreter.visit(parsed, root))


class BudgetedInterpreter(BudgetMeter, jmes_visitor.TreeInterpreter):  # type: ignore[misc]
    """jmespath's tree interpreter with a step count, value sizes and a cancel flag.

    Use :func:`evaluate`; one instance serves one evaluation.
    """

    def __init__(self, budget: Budget) -> None:
        # not the jmespath base's __init__: of its state only the function table is used,
        # and visits are dispatched through one table built for the class
        self._functions = _FUNCTIONS
        BudgetMeter.__init__(self, budget)

    # ── visits ──────────────────────────────────────────────────────────────

    def visit(self, node: dict[str, Any], value: Any) -> Any:
        self._left -= 1
        if self._left < 0:
            self._refill()
        return _DISPATCH[node["type"]](self, node, value)

    def _is_false(self, value: Any) -> bool:
        return not is_truthy(value)

    def visit_subexpression(self, node: dict[str, Any], value: Any) -> Any:
        for child in node["children"]:  # ``a.b.c``: fields read in place, not visited
            if child["type"] == "field":
                try:
                    value = value.get(child["value"])
                except AttributeError:
                    value = None
            else:
                value = self.visit(child, value)
        return value

    def visit_multi_select_list(self, node: dict[str, Any], value: Any) -> Any:
        if value is None:
            return None
        collected = []
        size = 1
        for child in node["children"]:
            current = self.plain(self.visit(child, value))
            collected.append(current)
            size += self.size_of(current) + 1
        return self._built(collected, size + (0 if collected else 1))

    def visit_multi_select_dict(self, node: dict[str, Any], value: Any) -> Any:
        if value is None:
            return None
        collected: dict[str, Any] = {}
        size = 1
        for child in node["children"]:
            key = child["value"]
            current = self.plain(self.visit(child, value))
            collected[key] = current
            size += len(key) + 4 + self.size_of(current)
        return self._built(collected, size + (0 if collected else 1))

    def visit_projection(self, node: dict[str, Any], value: Any) -> Any:
        base = self.visit(node["children"][0], value)
        if not isinstance(base, list):
            return None
        return self._project(base, node["children"][1], None)

    def visit_value_projection(self, node: dict[str, Any], value: Any) -> Any:
        base = self.visit(node["children"][0], value)
        try:
            elements = list(base.values())
        except AttributeError:
            return None
        self._charge(len(elements))
        return self._project(elements, node["children"][1], None)

    def visit_filter_projection(self, node: dict[str, Any], value: Any) -> Any:
        base = self.visit(node["children"][0], value)
        if not isinstance(base, list):
            return None
        return self._project(base, node["children"][1], node["children"][2])

    def _project(
        self, elements: list[Any], rhs: dict[str, Any], condition: dict[str, Any] | None
    ) -> list[Any]:
        collected = []
        size = 1
        limit = self._max_bytes
        for element in elements:
            if condition is not None and not is_truthy(self.visit(condition, element)):
                continue
            current = self.visit(rhs, element)
            if current is not None:
                collected.append(current)
                size += self.size_of(current) + 1
                if size > limit:
                    self._over(size)
        self._built(collected, size + (0 if collected else 1))
        return collected

    def visit_flatten(self, node: dict[str, Any], value: Any) -> Any:
        base = self.visit(node["children"][0], value)
        if not isinstance(base, list):
            return None
        count = 0
        for element in base:
            count += len(element) if isinstance(element, list) else 1
        self._charge(len(base) + count)  # before the merged list exists
        merged: list[Any] = []
        size = 1
        limit = self._max_bytes
        for element in base:
            if isinstance(element, list):
                if element:
                    size += self.size_of(element) - 1  # its items and a comma each
                    merged.extend(element)
            else:
                size += self.size_of(element) + 1
                merged.append(element)
            if size > limit:
                self._over(size)
        return self._built(merged, size + (0 if merged else 1))

    def visit_slice(self, node: dict[str, Any], value: Any) -> Any:
        if not isinstance(value, list):
            return None
        part = slice(*node["children"])
        self._charge(len(range(*part.indices(len(value)))))  # before the copy exists
        copy = value[part]
        return self._built(copy, self._size_of_new(copy))

    def visit_function_expression(self, node: dict[str, Any], value: Any) -> Any:
        args = [self.plain(self.visit(child, value)) for child in node["children"]]
        name = node["value"]
        count = 0
        if name in _LINEAR:
            for arg in args:
                if isinstance(arg, list | dict):
                    count += len(arg)
        if name == "contains" and len(args) == 2 and isinstance(args[0], list):
            needle = args[1]
            if isinstance(needle, list | dict) and needle:
                # each element equal in type is compared with the needle, element by element
                count += len(args[0]) * (self.size_of(needle) // _COMPARE_BYTES_PER_STEP)
        if count:
            if name in _SORTS:
                count *= max(1, count.bit_length())
            self._charge(count)  # type checks and the function's own pass
        if len(args) == 1 and name == "to_string" and type(args[0]) is not str:
            size = self.size_of(args[0])  # to_string writes exactly this many bytes
            if size > self._max_bytes:
                self._over(size)
            self._charge(size >> 6)
        elif name == "join" and len(args) == 2 and type(args[0]) is str:
            parts = args[1]
            if isinstance(parts, list) and parts:
                size = 2 + len(args[0]) * (len(parts) - 1)
                size += sum(len(part) for part in parts if type(part) is str)
                if size > self._max_bytes:
                    self._over(size)
        result = self._functions.call_function(name, args)
        if name in _BUILDERS and isinstance(result, list | dict | str):
            if any(result is arg for arg in args):
                return result
            return self._built(result, self._size_of_new(result))
        return result

    # ── comparisons ─────────────────────────────────────────────────────────

    def _charge_comparison(self, left: Any, right: Any) -> None:
        """Charge ``left == right`` for the elements Python will walk, before it does.

        Equality of two lists or two objects is one C call that walks both values, holding
        the GIL: two 4 MiB values built separately cost ~20 ms per comparison, and a
        thousand of them in one expression were a thousand steps. The walk stops at the
        first difference, so the smaller value bounds it: charged one step per
        :data:`_COMPARE_BYTES_PER_STEP` bytes of it.
        """
        kind = type(left)
        if kind is not type(right) or (kind is not list and kind is not dict):
            return
        if left is right or not left or not right:
            return  # identical or empty: answered at once
        size = min(self.size_of(left), self.size_of(right))
        self._charge(size // _COMPARE_BYTES_PER_STEP)

    def visit_comparator(self, node: dict[str, Any], value: Any) -> Any:
        op = node["value"]
        left = self.visit(node["children"][0], value)
        right = self.visit(node["children"][1], value)
        if op == "eq" or op == "ne":
            left, right = self.plain(left), self.plain(right)
            self._charge_comparison(left, right)
            equal = self.COMPARATOR_FUNC["eq"](left, right)
            return equal if op == "eq" else not equal
        lkind, rkind = type(left), type(right)
        if (lkind is int or lkind is float) and (rkind is int or rkind is float):
            return _ORDERING[op](left, right)
        if lkind is str and rkind is str:
            return _ORDERING[op](left, right)
        return None


_DISPATCH: dict[str, Callable[[BudgetedInterpreter, dict[str, Any], Any], Any]] = {
    name[len("visit_") :]: getattr(BudgetedInterpreter, name)
    for name in dir(BudgetedInterpreter)
    if name.startswith("visit_")
}
