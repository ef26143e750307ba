"""What one JMESPath evaluation may spend, and the accounting that enforces it
(PROTOCOL.md §6: ``max_expression_steps``, ``max_expression_bytes``).

Layer: core (no I/O, no clock, no anyio; it may run in a worker thread). The
interpreter (:mod:`a2e_host.chains.interpreter`) visits; :class:`BudgetMeter`, its base,
counts.

Theory of operation:

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
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import msgspec

from .context_view import ContextView

__all__ = [
    "Budget",
    "BudgetMeter",
    "CHECK_EVERY",
    "EvaluationCancelled",
    "EvaluationSliceExhausted",
    "ExpressionBudgetExceeded",
]

CHECK_EVERY = 1024
"""Steps between two checks of the step count and the cancel flag."""

_MEMO_MIN = 64  # bytes: smaller values are measured again rather than remembered
_ENCODER = msgspec.json.Encoder()
_SMALL_INT = 10**15


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


class BudgetMeter:
    """Counts one evaluation's steps and the sizes of the values it builds against a
    :class:`Budget`; the base of the interpreter, one instance per evaluation.

    Subclasses charge ``self._left`` per visit and call :meth:`_refill` when it goes below
    zero; :meth:`_charge` charges a number of steps, :meth:`_built` records (or refuses) a
    value the evaluation created, :meth:`size_of` measures any value.

    Raises (from its methods):
        ExpressionBudgetExceeded: a ceiling of the budget was reached.
        EvaluationSliceExhausted: the budget's ``slice_steps`` ran out first.
        EvaluationCancelled: the budget's cancel flag was set.
    """

    def __init__(self, budget: Budget) -> None:
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
