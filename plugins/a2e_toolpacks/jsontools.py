"""The ``json`` tool pack: ``json_parse``, ``json_dump``, ``csv_parse``.

* ``json_parse``: {"text"} → {"value"}; invalid JSON fails naming the position.
* ``json_dump``: {"value", "indent"?, "sort_keys"?} → {"text"} (UTF-8, no ASCII escaping).
* ``csv_parse``: {"text", "delimiter"?} → {"rows": [one dict per data row, keyed by the
  header row], "columns": [header names]}; values stay strings; a row shorter than the
  header gets ``null`` for the missing cells, a longer one is an error naming the row.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Annotated, Any, TypedDict

import msgspec

from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError
from a2e_host.tools import Tool, ToolPack, tool

__all__ = ["PACK", "make_tools"]


Delimiter = Annotated[str, msgspec.Meta(min_length=1, max_length=1)]


class ValueOut(TypedDict):
    value: Any


class TextOut(TypedDict):
    text: str


class CsvOut(TypedDict):
    rows: list[dict[str, str | None]]
    columns: list[str]


@tool(blocking=False)
def json_parse(text: str) -> ValueOut:
    """{"text": JSON text} → {"value": the decoded value}."""
    try:
        return {"value": msgspec.json.decode(text)}
    except msgspec.DecodeError as exc:
        raise NodeError(f"json_parse: the text is not valid JSON: {exc}") from None


@tool(blocking=False)
def json_dump(
    value: Any,
    indent: Annotated[int, msgspec.Meta(ge=0, le=16)] | None = None,
    sort_keys: bool = False,
) -> TextOut:
    """{"value", "indent"?, "sort_keys"?} → {"text": JSON text}."""
    try:
        text = json.dumps(
            value, indent=indent, sort_keys=sort_keys, ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as exc:
        raise NodeError(f"json_dump: the value cannot be written as JSON: {exc}") from None
    return {"text": text}


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
    header."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        columns = next(reader, [])
        rows: list[dict[str, str | None]] = []
        for number, record in enumerate(reader, start=2):
            if not record:
                continue
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
