"""A JMESPath interpreter that runs under a budget (PROTOCOL.md §3, §6).

Layer: core (no I/O, no clock, no anyio; it may run in a worker thread). It subclasses
jmespath's own ``TreeInterpreter``: the language is jmespath's, only the accounting, the
context root and ordering comparisons are ours.

Theory of operation:

* **One interpreter per evaluation.** :func:`evaluate` builds a
  :class:`BudgetedInterpreter` for one :class:`Budget`; nothing is shared between
  evaluations, so one may run on the event loop while another runs in a worker thread.
* **Steps** (``max_expression_steps``). Every syntax-tree node visited is one step; work a
  visit does per element without visiting anything (flattening, slicing, a function
  reading its arguments, sorting) is charged as steps *before* it is done. The count is
  checked every :data:`CHECK_EVERY` steps, and so is the cancel flag of the budget: an
  abandoned evaluation stops within about a millisecond.
* **Slices.** A budget may carry ``slice_steps`` below ``max_steps``: running out of the
  slice raises :class:`EvaluationSliceExhausted` (not a failure) so that the caller can run
  the evaluation again elsewhere under the full budget. JMESPath has no side effects, so
  running it again is safe.
* **Bytes** (``max_expression_bytes``). Every value the evaluation *builds* — a list,
  object or string it creates (multi-select, projection, filter, flatten, slice,
  ``sort``, ``merge``, ``to_string``, ``join`` …) — gets its logical JSON size as it is
  built: the sum of its parts, a part that appears twice counted twice, as encoding it
  would be. ``[@,@]|[@,@]|…`` shares references, so it costs little memory, but its
  logical size doubles at each step; the first value over the ceiling stops the
  evaluation before anything encodes, flattens or stringifies it. Sizes of values the
  evaluation built are remembered by identity (O(1) per part); values read from the
  context are measured once per evaluation (their msgspec encoding, bounded by the
  ceilings on inputs and outputs). Strings count ``len + 2`` (escapes are not counted).
* **The root.** A node's context is a :class:`ContextView` (a Mapping over the chain's
  shared context plus the node's own keys, never copied). Field reads go through it;
  where an expression uses the root *as a value* (``@`` / ``$`` as a result, a function
  argument, part of a multi-select, an equality operand) it is materialised once into a
  plain dict, so ``keys(@)``, ``length(@)`` and ``merge(@, `{}`)`` see a JSON object
  (PROTOCOL.md §3).
* **Ordering comparisons** (``<``, ``<=``, ``>``, ``>=``) compare two numbers or two
  strings; anything else is null (the JMESPath specification; jmespath.py also orders
  strings, which we keep), never a Python ``TypeError``.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from jmespath import functions as jmes_functions
from jmespath import visitor as jmes_visitor

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

CHECK_EVERY = 1024
"""Steps between two checks of the step count and the cancel flag."""

_COMPARE_BYTES_PER_STEP = 16  # an equality walks ~4 elements in the time of one step
_MEMO_MIN = 64  # bytes: smaller values are measured again rather than remembered
_ENCODER = msgspec.json.Encoder()
_FUNCTIONS = jmes_functions.Functions()
_SMALL_INT = 10**15
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


class ExpressionBudgetExceeded(Exception):
    """An evaluation went over one of its ceilings (PROTOCOL.md §6).

    Attributes:
        ceiling: ``"max_expression_steps"`` or ``"max_expression_bytes"``.
        limit: the budget's value for that ceiling.
        requested: steps taken / logical bytes of the value being built when it stopped
            (a lower bound: the evaluation stopped as soon as it was over).
    """

    def __init__(self, ceiling: str, limit: int, requested: int) -> None:
        unit = "steps" if ceiling == "max_expression_steps" else "bytes"
        what = "took more than" if unit == "steps" else "built a value of at least"
        super().__init__(f"{what} {limit if unit == 'steps' else requested} {unit}")
        self.ceiling = ceiling
        self.limit = limit
        self.requested = requested


class EvaluationSliceExhausted(Exception):
    """The budget's ``slice_steps`` ran out first; evaluate again under the full budget."""


class EvaluationCancelled(Exception):
    """The budget's cancel flag was set (the node's chain ended); the result is unwanted."""


@dataclass(frozen=True, slots=True)
class Budget:
    """What one evaluation may spend.

    Attributes:
        max_steps: interpreter steps (``max_expression_steps``).
        max_bytes: logical JSON bytes of any one value built (``max_expression_bytes``).
        slice_steps: when below ``max_steps``, the evaluation stops with
            :class:`EvaluationSliceExhausted` after this many steps; None for no slice.
        cancelled: checked every :data:`CHECK_EVERY` steps; when set the evaluation
            stops with :class:`EvaluationCancelled`. None when nothing cancels it.
    """

    max_steps: int = 1_000_000
    max_bytes: int = 8 * 1024 * 1024
    slice_steps: int | None = None
    cancelled: threading.Event | None = None


def is_truthy(value: Any) -> bool:
    """JMESPath truthiness (PROTOCOL.md §5): ``false``, null, ``""``, ``[]`` and ``{}`` are
    false; everything else, ``0`` included, is true."""
    if value is None or value is False:
        return False
    if isinstance(value, str | list | tuple | Mapping):
        return len(value) > 0
    return True


class ContextView(Mapping[str, Any]):
    """A node's expression context: its own keys over the chain's shared context.

    The shared context (``input`` and one ``{"output", "status"}`` per finished node) grows
    as nodes finish; each node sees it plus its own ``output`` / ``item`` / ``index`` /
    ``error`` without copying it (PROTOCOL.md §3). Own keys win over shared ones.

    Args:
        base: the chain's shared context (read, never written).
        own: this node's keys.
    """

    __slots__ = ("_base", "_own")

    def __init__(self, base: Mapping[str, Any], own: dict[str, Any]) -> None:
        self._base = base
        self._own = own

    def get(self, key: Any, default: Any = None) -> Any:
        own = self._own
        if key in own:
            return own[key]
        return self._base.get(key, default)

    def __getitem__(self, key: str) -> Any:
        own = self._own
        if key in own:
            return own[key]
        return self._base[key]

    def __contains__(self, key: object) -> bool:
        return key in self._own or key in self._base

    def __iter__(self) -> Iterator[str]:
        own = self._own
        for key in list(self._base):
            if key not in own:
                yield key
        yield from own

    def __len__(self) -> int:
        base = self._base
        return len(base) + sum(1 for key in self._own if key not in base)

    def as_dict(self) -> dict[str, Any]:
        """The whole context as one plain dict (shallow: the values are shared)."""
        merged = dict(self._base)
        merged.update(self._own)
        return merged

    def snapshot(self) -> ContextView:
        """A view over shallow copies of both layers, safe to read from another thread
        while the chain keeps adding finished nodes to the shared context."""
        return ContextView(dict(self._base), dict(self._own))

    def __repr__(self) -> str:
        return f"ContextView({self.as_dict()!r})"


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


class BudgetedInterpreter(jmes_visitor.TreeInterpreter):  # type: ignore[misc]
    """jmespath's tree interpreter with a step count, value sizes and a cancel flag.

    Use :func:`evaluate`; one instance serves one evaluation.
    """

    def __init__(self, budget: Budget) -> None:
        # not the base's __init__: of its state only the function table is used, and
        # visits are dispatched through one table built for the class
        self._functions = _FUNCTIONS
        allowance = budget.max_steps
        self._sliced = budget.slice_steps is not None and budget.slice_steps < allowance
        if self._sliced:
            assert budget.slice_steps is not None
            allowance = budget.slice_steps
        self._max_steps = budget.max_steps
        self._max_bytes = budget.max_bytes
        self._cancelled = budget.cancelled
        self._allowance = allowance
        grant = min(CHECK_EVERY, allowance)
        self._left = grant  # steps left before the next check (negative: overdrawn)
        self._reserve = allowance - grant  # steps not yet handed out
        self._sizes: dict[int, tuple[int, Any]] = {}  # id → (logical size, value kept alive)
        self._root: ContextView | None = None
        self._root_dict: dict[str, Any] | None = None

    # ── accounting ──────────────────────────────────────────────────────────

    def visit(self, node: dict[str, Any], value: Any) -> Any:
        self._left -= 1
        if self._left < 0:
            self._refill()
        return _DISPATCH[node["type"]](self, node, value)

    def _charge(self, steps: int) -> None:
        self._left -= steps
        if self._left < 0:
            self._refill()

    def _refill(self) -> None:
        if self._cancelled is not None and self._cancelled.is_set():
            raise EvaluationCancelled("the evaluation was cancelled")
        need = -self._left
        if need > self._reserve:
            if self._sliced:
                raise EvaluationSliceExhausted
            taken = self._allowance - self._reserve + need
            raise ExpressionBudgetExceeded("max_expression_steps", self._max_steps, taken)
        self._reserve -= need
        grant = min(CHECK_EVERY, self._reserve)
        self._reserve -= grant
        self._left = grant

    def _over(self, size: int) -> None:
        raise ExpressionBudgetExceeded("max_expression_bytes", self._max_bytes, size)

    def _built(self, value: Any, size: int) -> Any:
        """Record a value this evaluation created, refusing it when too large."""
        if size > self._max_bytes:
            self._over(size)
        if size >= _MEMO_MIN:
            self._sizes[id(value)] = (size, value)
        return value

    def size_of(self, value: Any) -> int:
        """Logical JSON size of ``value`` in bytes (strings: ``len + 2``)."""
        kind = type(value)
        if kind is str:
            return len(value) + 2
        if value is None or value is True:
            return 4
        if value is False:
            return 5
        if kind is int:
            return len(str(value)) if -_SMALL_INT < value < _SMALL_INT else 24
        if kind is float:
            return len(repr(value))
        known = self._sizes.get(id(value))
        if known is not None:
            return known[0]
        size = self._measure(value)
        if size >= _MEMO_MIN:
            self._sizes[id(value)] = (size, value)
        return size

    def _measure(self, value: Any) -> int:
        """Size of a value the evaluation did not build (read from the context)."""
        if isinstance(value, ContextView):
            value = self.plain(value)
        root = self._root_dict
        if root is not None and value is root:
            # the whole context: entry by entry, stopping as soon as it is too large
            size = 1
            for key, entry in root.items():
                size += len(key) + 4 + self.size_of(entry)
                if size > self._max_bytes:
                    self._over(size)
            return size + (0 if root else 1)
        try:
            size = len(_ENCODER.encode(value))
        except (TypeError, ValueError, msgspec.EncodeError) as exc:
            raise TypeError(f"a value is not JSON: {exc}") from None
        self._charge(size >> 6)
        return size

    def _size_of_new(self, value: Any) -> int:
        """Size of a new list / object / string a function returned."""
        if type(value) is str:
            return len(value) + 2
        if isinstance(value, list):
            size = 1
            for element in value:
                size += self.size_of(element) + 1
                if size > self._max_bytes:
                    self._over(size)
            return size + (0 if value else 1)
        if isinstance(value, dict):
            size = 1
            for key, element in value.items():
                size += len(str(key)) + 4 + self.size_of(element)
                if size > self._max_bytes:
                    self._over(size)
            return size + (0 if value else 1)
        return self.size_of(value)

    def plain(self, value: Any) -> Any:
        """``value``, with the context root materialised into a plain dict."""
        if type(value) is not ContextView:
            return value
        if value is self._root and self._root_dict is not None:
            return self._root_dict
        self._charge(len(value))
        self._root = value
        self._root_dict = value.as_dict()
        return self._root_dict

    def _is_false(self, value: Any) -> bool:
        return not is_truthy(value)

    # ── visits ──────────────────────────────────────────────────────────────

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
