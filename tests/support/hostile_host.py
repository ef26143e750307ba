"""A stdio "host" that handshakes properly, then misbehaves in one chosen way, for proving
the conformance kit gives each case a clear verdict in bounded time and never crashes
(issue 21: "a runner must never crash on a host's answer").

``python -m tests.support.hostile_host MODE``; MODE is one of :data:`MODES`. Standard
library only, so it starts in milliseconds.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

HUGE_BYTES = 65 * 2**20
"""The size of the line the ``huge`` host answers with: above the kit's frame bound."""

MODES = {
    "huge": "answers a chain/req with one line of HUGE_BYTES",
    "silent": "never answers a chain/req",
    "hangup": "sends a start event for a chain/req, then exits",
    "stray": "sends events and an answer for req_ids nobody sent, then answers properly",
    "double": "answers every chain/req twice",
    "liar": "advertises every feature and ceiling, implements none of them",
}
_COUNTER = iter(range(1, 10**9))
_REQUIREMENTS = Path(__file__).resolve().parents[2] / "conformance" / "requirements.json"
_EXTENSIONS = {r["feature"] for r in json.loads(_REQUIREMENTS.read_text(encoding="utf-8"))
               ["requirements"] if r.get("feature")} if "liar" in sys.argv else set()


def _envelope(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "id": f"h{next(_COUNTER)}", "version": "1.0", "ts": time.time(),
            **fields}


def _response(req_id: str) -> dict[str, Any]:
    return _envelope("chain/resp", req_id=req_id, chain_id="c", success=True, outputs={},
                     final_output=None, duration_ms=1, nodes_run=0, error=None)


def answer(mode: str, message: dict[str, Any]) -> list[dict[str, Any] | bytes] | None:
    """What to write for one message; None = exit."""
    kind, mid = message.get("type"), message.get("id")
    if kind == "handshake/req":
        metadata: dict[str, Any] = {}
        if mode == "liar":
            metadata = {"features": sorted(f for f in _EXTENSIONS if ":" not in f),
                        "limits": dict.fromkeys((f.removeprefix("limits:") for f in _EXTENSIONS
                                                 if f.startswith("limits:")), 1)
                        | {"max_nodes": 10, "max_timeout": 5}}
        return [_envelope("handshake/resp", req_id=mid, ok=True, session_id="s",
                          accepted_caps=[{"capability": "chains", "enabled": True,
                                          "metadata": metadata}])]
    if kind == "ping":
        return [_envelope("pong", req_id=mid)]
    if kind != "chain/req" or not isinstance(mid, str):
        return [_envelope("error", req_id=mid if isinstance(mid, str) else "",
                          code="unknown_type", message="not served")]
    if mode == "huge":
        return [b'{"type": "chain/event", "pad": "' + b"x" * HUGE_BYTES + b'"}', _response(mid)]
    if mode == "silent":
        return []
    if mode == "hangup":
        print(json.dumps(_envelope("chain/event", req_id=mid, seq=1, node_id="a",
                                   phase="start")), flush=True)
        return None
    if mode == "stray":
        return [_envelope("chain/event", req_id=f"other-{mid}", seq=1, node_id="a",
                          phase="start"), _response(f"other-{mid}"), _response(mid)]
    return [_response(mid), _response(mid)]  # double, liar


def main() -> None:
    mode = sys.argv[1]
    if mode not in MODES:
        sys.exit(f"unknown mode {mode!r}: one of {', '.join(MODES)}")
    out = sys.stdout.buffer
    for raw in sys.stdin.buffer:
        try:
            message = json.loads(raw)
        except ValueError:
            message = {}
        frames = answer(mode, message if isinstance(message, dict) else {})
        if frames is None:
            return
        for frame in frames:
            out.write(frame if isinstance(frame, bytes) else json.dumps(frame).encode())
            out.write(b"\n")
        out.flush()


if __name__ == "__main__":
    main()
