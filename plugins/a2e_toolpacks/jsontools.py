"""The ``json`` tool pack: ``json_parse``, ``json_dump``, ``csv_parse``.

* ``json_parse``: {"text"} → {"value"}; invalid JSON fails naming the position.
* ``json_dump``: {"value", "indent"?, "sort_keys"?} → {"text"} (UTF-8, no ASCII escaping).
* ``csv_parse``: {"text", "delimiter"?} → {"rows": [one dict per data row, keyed by the
  header row], "columns": [header names]}; values stay strings; a row shorter than the
  header gets ``null`` for the missing cells, a longer one is an error naming the row.

Bounded (issue "values built before the output cap"): ``json_dump`` measures the value's
logical JSON size (:mod:`a2e_host.sizes`: a shared reference counts each time it appears)
and the whitespace its ``indent`` adds before encoding, and ``csv_parse`` counts the header
names every row repeats as it goes; over the node's ``max_output_bytes`` they refuse
(``chain_limit``) instead of building the output. ``json_parse`` of a long text,
``json_dump`` and ``csv_parse`` run in a worker thread.
"""

from __future__ import annotations

import csv
import io
import re
from typing import Annotated, Any, TypedDict

import msgspec

from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError
from a2e_host.sizes import JsonSizer
from a2e_host.tools import Tool, ToolPack, tool

from ._caps import offload, output_cap, refuse_output

__all__ = ["PACK", "make_tools"]


Delimiter = Annotated[str, msgspec.Meta(min_length=1, max_length=1)]


class ValueOut(TypedDict):
    value: Any


class TextOut(TypedDict):
    text: str


class CsvOut(TypedDict):
    rows: list[dict[str, str | None]]
    columns: list[str]


@tool
async def json_parse(text: str) -> ValueOut:
    """{"text": JSON text} → {"value": the decoded value}."""
    return {"value": await offload(len(text), _decode, text)}


def _decode(text: str) -> Any:
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise NodeError(f"json_parse: the text is not valid JSON: {exc}") from None


@tool
def json_dump(
    value: Any,
    indent: Annotated[int, msgspec.Meta(ge=0, le=16)] | None = None,
    sort_keys: bool = False,
) -> TextOut:
    """{"value", "indent"?, "sort_keys"?} → {"text": JSON text} (``json.dumps`` layout:
    ``", "`` and ``": "`` without ``indent``; with it, one element per line). Refused
    (``chain_limit``) when the text would be over ``max_output_bytes``, measured first."""
    cap = output_cap()
    sizer = JsonSizer(value, cap)
    try:
        sizer.advance(1 << 62)
    except (TypeError, ValueError, OverflowError) as exc:
        raise NodeError(f"json_dump: the value cannot be written as JSON: {exc}") from None
    if sizer.over:
        refuse_output("json_dump", sizer.size, "the text", at_least=True)
    if sizer.non_finite:
        raise NodeError(
            "json_dump: the value cannot be written as JSON: it holds NaN or Infinity"
        )
    extra = _layout_bytes(value, indent, cap - sizer.size)
    if extra is None:
        refuse_output(
            "json_dump", cap + 1, f"the text indented by {indent}", at_least=True
        )
    compact = msgspec.json.encode(value, order="sorted" if sort_keys else None)
    if indent is None:
        text = msgspec.json.format(compact, indent=0)
    elif indent == 0:  # json.dumps' indent=0: newlines, no indentation
        text = _INDENTATION.sub(b"\n", msgspec.json.format(compact, indent=1))
    else:
        text = msgspec.json.format(compact, indent=indent)
    return {"text": text.decode()}


_INDENTATION = re.compile(rb"\n +")  # JSON strings hold no raw newline: all are layout


def _layout_bytes(value: Any, indent: int | None, limit: int) -> int | None:
    """Bytes ``json_dump``'s layout adds to the compact encoding of ``value`` (spaces
    after ``,`` and ``:``, or newlines and indentation), or None once over ``limit``.

    Called after the compact size is known to be within the cap, so the containers it
    walks (each element costs a compact byte at least) are bounded by the cap too.
    """
    extra = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        n = len(v) if type(v) in _CONTAINERS else 0
        if not n:
            continue
        colons = n if type(v) is dict else 0
        if indent is None:
            extra += n - 1 + colons  # ", " and ": "
        else:  # each element on its own line, then the closing bracket on its own
            extra += n * (1 + indent * (depth + 1)) + 1 + indent * depth + colons
        if extra > limit:
            return None
        for child in v.values() if type(v) is dict else v:
            if type(child) in _CONTAINERS:
                stack.append((child, depth + 1))
    return extra


_CONTAINERS = (dict, list, tuple)


class ValueIn(TypedDict):
    value: Any


@tool(blocking=False)
def json_value(args: ValueIn) -> Any:
    """{"value": any} → that value, unchanged: ends a chain with an object built by an
    ``input_map`` expression (e.g. ``{"value": "{files: a.output, lines: b.output}"}``)."""
    return args["value"]


@tool
def csv_parse(text: str, delimiter: Delimiter = ",") -> CsvOut:
    """{"text", "delimiter"?} → {"rows": [dict per row], "columns"}; the first row is the
    header. Refused (``chain_limit``) when the rows would be over ``max_output_bytes``:
    every row repeats the header's names, so a wide header and many short rows multiply."""
    cap = output_cap()
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        columns = next(reader, [])
        # a lower bound of each row's bytes: '{', '}', and per cell '"name":' and ','
        # plus the value (at least 2 bytes: "" or null)
        per_row = 2 + sum(len(c) + 3 + 1 + 2 for c in columns)
        least = 2 * sum(len(c) + 3 for c in columns) + len('{"rows":[],"columns":[]}')
        rows: list[dict[str, str | None]] = []
        for number, record in enumerate(reader, start=2):
            if not record:
                continue
            least += per_row + sum(map(len, record))
            if least > cap:
                refuse_output(
                    "csv_parse", least, f"the rows up to row {number}", at_least=True
                )
            if len(record) > len(columns):
                raise NodeError(
                    f"csv_parse: row {number} has {len(record)} cells but the header has "
                    f"{len(columns)}; fix the row or the delimiter"
                )
            row: dict[str, str | None] = dict.fromkeys(columns)
            row.update(zip(columns, record, strict=False))
            rows.append(row)
    except csv.Error as exc:
        raise NodeError(f"csv_parse: the text is not valid CSV: {exc}") from None
    return {"rows": rows, "columns": columns}


def make_tools(config: HostConfig) -> list[Tool]:
    """The json tools (they read nothing from ``config``)."""
    return [json_parse, json_dump, json_value, csv_parse]


PACK = ToolPack(
    name="json",
    description="JSON and CSV: json_parse, json_dump, csv_parse.",
    factory=make_tools,
)
