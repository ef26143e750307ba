"""Redaction: known secret values replaced by ``«secret:NAME»`` in text, JSON frames and
JSON values (README "Secrets"; PROTOCOL.md §5 Secrets).

Layer: core (plain code: no anyio, no I/O). A :class:`Redactor` is immutable and built
once per set of secrets: one matcher of every form a value may take once
written — itself, JSON-escaped (as msgspec writes it, and as ``json.dumps`` writes it
with ASCII escapes), as Python's ``repr`` writes it inside quotes, and JSON-escaped twice
(a frame logged as a JSON string) — longest first, so a value that contains another is
replaced whole. When forms overlap (``abcdef`` and ``defghi`` in ``abcdefghi``), the
leftmost match wins and the rest of the other one stays: never a whole value.

Matching costs one pass of a compiled pattern of each form's first 8 characters over the
text, each hit checked against the whole forms that start so (:class:`_Matcher`):
compiling whole forms cost ~0.5 s per 16 values of 4 KiB; a run without secrets never
builds a redactor at all. The checks of one text are bounded, past which the rest is
searched form by form. :class:`PendingText` redacts text written in pieces.
"""

from __future__ import annotations

import heapq
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

import msgspec

__all__ = ["PLACEHOLDER", "PendingText", "Redactor", "placeholder"]

PLACEHOLDER = "«secret:{}»"
"""What a secret value is replaced by, ``{}`` its name."""

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode
_LS, _PS = "\u2028".encode(), "\u2029".encode()


_S = TypeVar("_S", str, bytes)

_ANCHOR = 8
"""Characters (bytes) of a form's start the search pattern holds: a value has at least
``MIN_SECRET_CHARS`` (8), so every form has this many."""

_WORK_PER_CHAR = 8
"""Characters of forms one text's checks may compare per character of the text."""

_WORK_FLOOR = 1 << 20
"""Characters of forms one text's checks may always compare."""



class _Matcher(Generic[_S]):
    """Finds the forms of ``replacements`` (form → what replaces it) in a text, leftmost
    first and, where several start at one place, the longest.

    The compiled pattern holds only each form's first :data:`_ANCHOR` characters (one
    alternative per distinct start), and a match of it is checked against the whole
    forms that start so: compiling every whole form (16 request secrets of 4 KiB, a
    dozen forms each, is ~800 KB of pattern) cost ~0.5 s of the event loop per
    registration, and every live registration compiled again.

    Checking the forms at each hit costs up to their summed length, so a text that
    repeats the beginning many long forms share (an agent chooses both) would cost
    hits × forms × length. The checks of one text are bounded (:data:`_WORK_PER_CHAR`
    times its length, at least :data:`_WORK_FLOOR`); past that, the rest of the text is
    searched form by form (``str.find``: linear in the text per form).
    """

    __slots__ = ("_pattern", "_forms", "_names", "_width", "_heads", "_cost", "_all")

    def __init__(self, replacements: Mapping[_S, _S]) -> None:
        width = min([_ANCHOR, *(len(form) for form in replacements)])
        forms: dict[_S, list[_S]] = {}
        for form in sorted(replacements, key=len, reverse=True):
            forms.setdefault(form[:width], []).append(form)
        self._width = width
        self._heads: set[_S] = {
            form[:size] for form in replacements for size in range(1, width)}
        self._forms: dict[_S, list[_S]] = forms
        self._cost: dict[_S, int] = {
            anchor: sum(map(len, group)) for anchor, group in forms.items()}
        self._all: list[_S] = sorted(replacements, key=len, reverse=True)
        self._names: Mapping[_S, _S] = replacements
        anchors: list[Any] = [re.escape(anchor) for anchor in forms]
        bar: Any = b"|" if anchors and isinstance(anchors[0], bytes) else "|"
        self._pattern: re.Pattern[Any] | None = (
            re.compile(bar.join(anchors)) if anchors else None)

    def _matches(self, text: _S) -> Iterator[tuple[int, _S]]:
        """Each form found in ``text`` (start, form), left to right, none overlapping."""
        pattern, forms, cost, width = self._pattern, self._forms, self._cost, self._width
        if pattern is None:
            return
        budget = max(_WORK_FLOOR, _WORK_PER_CHAR * len(text))
        found = pattern.search(text)
        while found is not None:
            start = found.start()
            anchor = text[start:start + width]
            budget -= cost[anchor]
            if budget < 0:
                yield from self._found_one_by_one(text, start)
                return
            for form in forms[anchor]:
                if text.startswith(form, start):
                    yield start, form
                    found = pattern.search(text, start + len(form))
                    break
            else:
                found = pattern.search(text, start + 1)

    def _found_one_by_one(self, text: _S, position: int) -> Iterator[tuple[int, _S]]:
        """:meth:`_matches` from ``position`` on, each form's next place kept in a heap
        and searched again (``str.find``) only once the text before it is done."""
        heap: list[tuple[int, int, int, _S]] = []
        for rank, form in enumerate(self._all):  # longest first: first at a tie
            at = text.find(form, position)
            if at >= 0:
                heap.append((at, rank, len(form), form))
        heapq.heapify(heap)
        while heap:
            at, rank, size, form = heap[0]
            if at >= position:
                yield at, form
                position = at + size
            again = text.find(form, max(position, at + 1))
            if again >= 0:
                heapq.heapreplace(heap, (again, rank, size, form))
            else:
                heapq.heappop(heap)

    def search(self, text: _S) -> bool:
        """Whether ``text`` holds a form."""
        if self._pattern is None or self._pattern.search(text) is None:
            return False  # the common case, without a generator
        return next(self._matches(text), None) is not None

    def cut(self, text: _S, at: int) -> int:
        """``at``, or the end of the form (as :meth:`subn` finds it) that starts before
        ``at`` and ends after it: where ``text`` may be cut without splitting a value."""
        for start, form in self._matches(text):
            if start >= at:
                break
            if start + len(form) > at:
                return start + len(form)
        return at

    def pending(self, text: _S, longest: int) -> int:
        """Where the longest tail of ``text`` starts that is the beginning (and not the
        whole) of a form: what must wait for the next text; ``len(text)`` when none is.
        Looks at the last ``longest - 1`` characters only; past the work bound (see the
        class) the first tail that starts like a form waits, whatever follows."""
        size = len(text)
        pattern, width = self._pattern, self._width
        if pattern is None:
            return size
        first = max(0, size - longest + 1)
        budget = max(_WORK_FLOOR, _WORK_PER_CHAR * (size - first))
        found = pattern.search(text, first)
        while found is not None:  # tails holding a whole anchor
            start = found.start()
            anchor = text[start:start + width]
            budget -= self._cost[anchor]
            if budget < 0:
                return start
            tail = text[start:]
            for form in self._forms[anchor]:
                if len(form) > len(tail) and form.startswith(tail):
                    return start
            found = pattern.search(text, start + 1)
        for start in range(max(first, size - width + 1), size):  # shorter tails
            if text[start:] in self._heads:
                return start
        return size

    def subn(self, text: _S) -> tuple[_S, int]:
        """``text`` with every form replaced, and how many were."""
        if self._pattern is None or self._pattern.search(text) is None:
            return text, 0  # the common case, without a generator
        names = self._names
        parts: list[_S] = []
        done = 0
        for start, form in self._matches(text):
            parts.append(text[done:start])
            parts.append(names[form])
            done = start + len(form)
        if not parts:
            return text, 0
        parts.append(text[done:])
        return text[:0].join(parts), len(parts) // 2


def placeholder(name: str) -> str:
    """``«secret:NAME»``: what the value of the secret ``name`` is replaced by."""
    return PLACEHOLDER.format(name)


def _text_forms(value: str) -> set[str]:
    """Every form ``value`` may take once written: as is, JSON-escaped (msgspec's and
    ``json.dumps``' ASCII escapes), inside a Python ``repr``, and each of those
    JSON-escaped once more (a line logged as a JSON string)."""
    once = {value, _encode(value).decode("utf-8")[1:-1], json.dumps(value)[1:-1],
            repr(value)[1:-1]}
    forms = set(once)
    for form in once - {value}:
        forms.add(json.dumps(form)[1:-1])
        forms.add(json.dumps(form, ensure_ascii=False)[1:-1])
    return {form for form in forms if form}


def _frame_forms(value: str) -> set[bytes]:
    """The forms of ``value`` inside an encoded frame (codec.encode_message's bytes): each
    text form, as msgspec writes it inside a JSON string."""
    forms: set[bytes] = set()
    for text in _text_forms(value):
        once = _encode(text)[1:-1]
        forms.add(once)
        forms.add(once.replace(_LS, b"\\u2028").replace(_PS, b"\\u2029"))
    return {form for form in forms if form}


class Redactor:
    """Replaces known secret values by ``«secret:NAME»``.

    Args:
        secrets: secret name → value, or (name, value) pairs (a name may come twice,
            with two values); every value non-empty. Two names with one value: the
            first name is shown.

    Attributes:
        names: the secret names, sorted.
        longest: UTF-8 bytes of the longest text form of a value.
    """

    __slots__ = ("names", "longest", "_text", "_text_names", "_frame", "_frame_names")

    def __init__(self, secrets: Mapping[str, str] | Iterable[tuple[str, str]]) -> None:
        pairs = list(secrets.items() if isinstance(secrets, Mapping) else secrets)
        self.names = tuple(sorted({name for name, _ in pairs}))
        text: dict[str, str] = {}
        frame: dict[bytes, bytes] = {}
        for name, value in pairs:
            shown = placeholder(name)
            for form in _text_forms(value):
                text.setdefault(form, shown)
            for raw in _frame_forms(value):
                frame.setdefault(raw, shown.encode("utf-8"))
        self._text_names = text
        self._frame_names = frame
        self.longest = max((len(form.encode("utf-8")) for form in text), default=0)
        self._text: _Matcher[str] = _Matcher(text)
        self._frame: _Matcher[bytes] = _Matcher(frame)

    def __repr__(self) -> str:
        return f"Redactor(names={list(self.names)!r})"

    def redact(self, text: str) -> str:
        """``text`` with every known value (in any of its written forms) replaced.

        Returns:
            ``text`` itself when it holds none.
        """
        out, count = self._text.subn(text)
        return out if count else text

    def cut(self, text: str, at: int) -> int:
        """Where ``text`` may be cut at or after character ``at`` without splitting a
        known value: ``at``, or the end of the value that straddles it.

        ``redact(text[:cut(text, at)])`` is ``redact(text)``'s beginning: no part of a
        value is left for a cut there to show (README "Secrets").
        """
        return self._text.cut(text, at)

    def pending(self, text: str) -> int:
        """Where the tail of ``text`` starts that could be the beginning of a known value
        (at most ``longest - 1`` characters), ``len(text)`` when none could: text written
        in pieces is redacted whole when that tail waits for the next piece."""
        return self._text.pending(text, self.longest)

    def redact_frame(self, data: bytes) -> bytes:
        """An encoded JSON frame with every known value replaced inside its strings.

        The result is always valid JSON: when a replacement fell outside a string (a
        number that equals a secret, say), the frame is decoded, its strings redacted one
        by one, and encoded again.

        Returns:
            ``data`` itself when it holds none.
        """
        out, count = self._frame.subn(data)
        if not count:
            return data
        try:
            _decode(out)
        except msgspec.DecodeError:
            again = _encode(self._scrub_decoded(_decode(data)))
            return again.replace(_LS, b"\\u2028").replace(_PS, b"\\u2029")
        return out

    def scrub(self, value: Any) -> Any:
        """A JSON-like value (a node's output) with every string holding a known value
        redacted; ``value`` itself when none does (the common case costs one encode and
        one search). A value that is not JSON-encodable is returned as it is.
        """
        try:
            data = _encode(value)
        except (TypeError, ValueError, OverflowError):
            return value
        if not self._frame.search(data):
            return value
        return self._scrub_decoded(_decode(data))

    def _scrub_decoded(self, value: Any) -> Any:
        """Redact every string (keys too) of freshly decoded JSON, iteratively (no
        recursion limit: the depth is the decoder's)."""
        if isinstance(value, str):
            return self.redact(value)
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, list):
                for i, element in enumerate(item):
                    if isinstance(element, str):
                        item[i] = self.redact(element)
                    elif isinstance(element, list | dict):
                        stack.append(element)
            elif isinstance(item, dict):
                for key in list(item):
                    element = item[key]
                    if isinstance(element, str):
                        element = item[key] = self.redact(element)
                    elif isinstance(element, list | dict):
                        stack.append(element)
                    shown = self.redact(key)
                    if shown is not key:
                        del item[key]
                        item[shown] = element
        return value


PENDING_LIMIT = 65536
"""Characters of text without a newline :class:`PendingText` keeps before it lets them go
(redacted): a stream that never ends a line is not kept whole in memory."""


class PendingText:
    """Text written in pieces (a stream's ``write`` calls), let go in whole lines and
    redacted so that a value split over pieces or lines (a PEM key) is replaced whole.

    Not thread-safe: the stream holding it locks around each call. ``redactor`` is asked
    for the current :class:`Redactor` (None: no secret) at every call.

    Args:
        redactor: returns the redactor to use now.
        limit: characters kept without a newline before they are let go anyway.
    """

    __slots__ = ("_redactor", "_limit", "_text")

    def __init__(self, redactor: Callable[[], Redactor | None], *,
                 limit: int = PENDING_LIMIT) -> None:
        self._redactor = redactor
        self._limit = limit
        self._text = ""

    def write(self, text: str) -> str:
        """Take ``text``; return what may be written now, redacted: the complete lines,
        less any tail that could be the start of a value (kept for the next call)."""
        text = self._text + text
        end = text.rfind("\n") + 1
        if len(text) - end > self._limit:
            end = len(text)
        current = self._redactor()
        if current is not None and end:
            end = current.cut(text, min(end, current.pending(text)))
        self._text = text[end:]
        if not end:
            return ""
        head = text[:end]
        return head if current is None else current.redact(head)

    def flush(self) -> str:
        """Everything kept, redacted (the stream is flushed or closed)."""
        text, self._text = self._text, ""
        current = self._redactor()
        return text if current is None or not text else current.redact(text)
