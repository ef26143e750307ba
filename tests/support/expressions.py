"""Expressions built to be hostile, shared by the compiler's and validation's tests."""

from __future__ import annotations

from collections.abc import Callable

#: Each way to nest a JMESPath expression ``n`` levels deep: form name -> builder of the
#: expression text.
NESTINGS: dict[str, Callable[[int], str]] = {
    "parentheses": lambda n: "(" * n + "input" + ")" * n,
    "brackets": lambda n: "[" * n + "input" + "]" * n,
    "braces": lambda n: "{a: " * n + "input" + "}" * n,
    "not": lambda n: "!" * n + "input",
    "function calls": lambda n: "to_array(" * n + "input" + ")" * n,
    "backtick literal": lambda n: "`" + "[" * n + "]" * n + "`",
    "object literal": lambda n: "`" + '{"a": ' * n + "1" + "}" * n + "`",
    "projections": lambda n: "input" + "[*].a" * n,
    "value projections": lambda n: ".".join(["*"] * n),
    "filters": lambda n: "input" + "[?a].b" * n,
    "flattens": lambda n: "input" + "[]" * n,
    "or chain": lambda n: " || ".join(["input"] * n),
    "exprefs": lambda n: "map(&" * (n // 2) + "@" + ", [@])" * (n // 2),
}
