"""Fields of a chain file that no version of this host reads (PROTOCOL.md §1, §4).

Layer: core (pure). On the wire an unknown field is ignored, so that agents written for a
newer protocol keep working; but a field that is only misspelled (``retries``, ``fallbak``,
``time_out``) then silently does nothing. Where the raw JSON is at hand (``a2e-host
validate`` reads a file), each unknown key of the request or of a node is a
``chain_warning`` with a did-you-mean: it never refuses the chain.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .hints import Suggester
from .messages import ChainNode, ChainRequest
from .problems import CHAIN_WARNING, problem

__all__ = ["unknown_field_warnings", "MAX_UNKNOWN_FIELD_WARNINGS"]

MAX_UNKNOWN_FIELD_WARNINGS = 100
"""Warnings listed at most: a file with thousands of stray keys still reads at a glance."""

_LONGEST_KEY = 64  # longer keys are named, not compared: no field name is near them
_NODE_FIELDS = frozenset(f.encode_name for f in msgspec.structs.fields(ChainNode))
_REQUEST_FIELDS = frozenset(
    {f.encode_name for f in msgspec.structs.fields(ChainRequest)} | {"type", "a2e"}
)


def unknown_field_warnings(body: dict[str, Any]) -> list[dict[str, Any]]:
    """``chain_warning`` problems for the keys of a ``chain/req`` body, and of each of its
    nodes, that are no field of :class:`~a2e_host.chains.messages.ChainRequest` or
    :class:`~a2e_host.chains.messages.ChainNode`.

    Args:
        body: the decoded JSON object of a chain file (a ``chain/req`` body).

    Returns:
        At most :data:`MAX_UNKNOWN_FIELD_WARNINGS` problems, request keys first, then each
        node's in order: ``{"code": "chain_warning", "node_id", "field", "message",
        "hint"}``; ``hint`` names the closest field when one is near.
    """
    found: list[dict[str, Any]] = []
    request_names = Suggester(sorted(_REQUEST_FIELDS))
    node_names = Suggester(sorted(_NODE_FIELDS))

    def add(node_id: str, key: str, names: Suggester, what: str) -> bool:
        near = names.best(key) if len(key) <= _LONGEST_KEY else None
        hint = f"did you mean {near!r}?" if near else f"remove it; see the {what} fields"
        found.append(problem(
            CHAIN_WARNING, node_id, key,
            f"unknown {what} field {key!r} is ignored", hint,
        ))
        return len(found) < MAX_UNKNOWN_FIELD_WARNINGS

    for key in body:
        if key not in _REQUEST_FIELDS and not add("", key, request_names, "chain/req"):
            return found
    nodes = body.get("nodes")
    for node in nodes if isinstance(nodes, list) else ():
        if not isinstance(node, dict):
            continue
        node_id = node.get("node_id")
        shown = node_id if isinstance(node_id, str) else ""
        for key in node:
            if key not in _NODE_FIELDS and not add(shown, key, node_names, "node"):
                return found
    return found
