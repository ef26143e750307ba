"""Send-side templates: how a case builds the message it sends.

Layer: pure. Imports only the standard library and :mod:`conformance.matchers`.

A value to send is plain JSON in which these operator objects are replaced:

==============================  ==================================================
template                        becomes
==============================  ==================================================
``{"$ref": "expr"}``            a case variable (JMESPath over the variables, e.g.
                                ``session_id``, ``limits.max_timeout``, ``r1.id``)
``{"$repeat": ["x", 2000]}``    the string repeated (``"xx…x"``, 2000 characters)
``{"$add": [m, n]}``            the sum of two (possibly templated) numbers
``{"$literal": v}``             ``v`` untouched
==============================  ==================================================

Then :func:`fill_envelope` adds what a client library would add (``id``, ``version``,
``ts``, and ``session_id`` on ``chain/*``), unless the step says ``"exact": true``.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from .matchers import MatcherError, resolve_ref

__all__ = ["expand", "fill_envelope"]

_TEMPLATE_OPS = ("$ref", "$repeat", "$add", "$literal")


def expand(value: Any, variables: dict[str, Any]) -> Any:
    """Return ``value`` with every template operator object replaced (see module doc).

    Raises:
        MatcherError: a template is malformed or a ``$ref`` does not compile.
    """
    if isinstance(value, list):
        return [expand(item, variables) for item in value]
    if not isinstance(value, dict):
        return value
    ops = [k for k in value if k in _TEMPLATE_OPS]
    if not ops:
        return {k: expand(v, variables) for k, v in value.items()}
    if len(value) != 1:
        raise MatcherError(f"template {value!r} must have exactly one key")
    op, arg = ops[0], value[ops[0]]
    if op == "$literal":
        return arg
    if op == "$ref":
        return resolve_ref(arg, variables)
    if op == "$repeat":
        text, times = expand(arg, variables)
        if not isinstance(times, int) or isinstance(times, bool):
            raise MatcherError(f"$repeat needs an integer count, got {times!r}")
        return str(text) * times
    left, right = expand(arg, variables)
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool)
                  for v in (left, right))
    if not numbers:  # e.g. a ceiling the host did not publish: never a TypeError
        raise MatcherError(f"$add needs two numbers, got {left!r} and {right!r} "
                           f"(from {arg!r})")
    return left + right


_counter = itertools.count(1)


def fill_envelope(message: Any, variables: dict[str, Any]) -> Any:
    """Add the envelope fields a client library fills in, where they are missing.

    Args:
        message: the expanded message; anything but an object with ``type`` is
            returned unchanged.
        variables: case variables; ``nonce`` prefixes ids, ``session_id`` is used
            for ``chain/*`` messages.

    Returns:
        The message with ``id`` (``"<nonce>-<n>"``), ``version`` (``"1.0"``, unless the
        ``a2e`` alias is present), ``ts`` (now, epoch seconds) and, for ``chain/*``
        types, ``session_id``.  Source: PROTOCOL.md §1 envelope, seed chain/req table.
    """
    if not isinstance(message, dict) or "type" not in message:
        return message
    filled = dict(message)
    filled.setdefault("id", f"{variables.get('nonce', 'c')}-{next(_counter)}")
    if "a2e" not in filled:
        filled.setdefault("version", "1.0")
    filled.setdefault("ts", time.time())
    if str(filled["type"]).startswith("chain/") and "session_id" in variables:
        filled.setdefault("session_id", variables["session_id"])
    return filled
