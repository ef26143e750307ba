"""Wire messages as the plain dicts an agent sends (PROTOCOL.md §2-§5)."""

from __future__ import annotations

from typing import Any

#: A handshake asking for the ``chains`` capability only.
HANDSHAKE: dict[str, Any] = {"type": "handshake/req", "id": "h", "agent_caps": ["chains"]}


def chain(
    req_id: str, nodes: list[dict[str, Any]], entry: str | None = None, **fields: Any
) -> dict[str, Any]:
    """A ``chain/req`` with id ``req_id``; its entry is ``entry`` or the first node."""
    return {
        "type": "chain/req", "id": req_id, "session_id": "", "nodes": nodes,
        "entry_node": entry if entry is not None else nodes[0]["node_id"], **fields,
    }


def tool(node_id: str, name: str, **fields: Any) -> dict[str, Any]:
    """A ``tool`` node calling ``name``."""
    return {"node_id": node_id, "kind": "tool", "name": name, **fields}


def mapping(items_path: str, template: dict[str, Any]) -> list[dict[str, Any]]:
    """A map node ``m`` over ``items_path``, then its ``template`` node."""
    return [
        {"node_id": "m", "kind": "map", "items_path": items_path, "map_node": template["node_id"]},
        template,
    ]


def sleeper(req_id: str, seconds: float = 30) -> dict[str, Any]:
    """A chain of one ``sleep`` node (the conformance pack's), ``s``."""
    return chain(req_id, [tool("s", "sleep", input={"seconds": seconds})])


def error_of(resp: dict[str, Any]) -> dict[str, Any]:
    """The ``error`` of a failed ``chain/resp`` (asserting that it is one)."""
    assert resp["type"] == "chain/resp" and resp["success"] is False, resp
    error: dict[str, Any] = resp["error"]
    return error
