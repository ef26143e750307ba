"""A stdio "host" that answers everything with garbage, for proving the conformance kit
never crashes on what a host sends (issue 21: "a runner must never crash on a host's
answer").

``python -m tests.support.garbage_host`` reads NDJSON on stdin and answers each line at
once: a handshake/req with a handshake/resp whose ``accepted_caps``, metadata, features
and limits have the wrong shapes; a chain/req with events whose fields have the wrong
types, a line that is not JSON, bytes that are not UTF-8, a JSON array, and a
chain/resp whose fields are all of the wrong type; anything else with an ``error``
whose fields are wrong and a message reusing an id. Standard library only, so it
starts in milliseconds.
"""

from __future__ import annotations

import json
import sys
from typing import Any

_COUNTER = iter(range(1, 10**9))


def _frame(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def answer(message: Any) -> list[bytes]:
    """What the garbage host writes for one decoded incoming message."""
    if not isinstance(message, dict):
        return [b"[1, 2, 3]\n", _frame({"type": "error", "id": f"g{next(_COUNTER)}",
                                        "version": "1.0", "ts": 1.0, "req_id": None,
                                        "code": ["parse_error"]})]
    mid = message.get("id")
    kind = message.get("type")
    if kind == "handshake/req":
        return [_frame({"type": "handshake/resp", "id": f"g{next(_COUNTER)}", "version": "1.0",
                        "ts": 1.0, "req_id": mid, "ok": True, "session_id": 7,
                        "accepted_caps": [{"capability": "chains",
                                           "metadata": {"features": 5, "limits": [1, 2]}},
                                          "tools", {"capability": "proc",
                                                    "metadata": ["executables"]}]})]
    if kind == "chain/req":
        return [
            _frame({"type": "chain/event", "id": "dup", "version": 2, "ts": "now",
                    "req_id": mid, "seq": "one", "node_id": {"a": 1}, "phase": 3}),
            _frame({"type": "chain/event", "id": "dup", "version": "1.0", "ts": 1.0,
                    "req_id": mid, "seq": None, "node_id": "a", "phase": "done"}),
            b"line: not protocol\n",
            b"\xff\xfe not utf-8\n",
            b"[\"an\", \"array\"]\n",
            _frame({"type": "chain/resp", "id": [1], "version": "1.0", "ts": 1.0,
                    "req_id": mid, "success": "yes", "outputs": [1], "nodes_run": "n",
                    "duration_ms": -5, "error": "bad", "chain_id": 9}),
        ]
    return [_frame({"type": "error", "id": f"g{next(_COUNTER)}", "version": "1.0", "ts": 1.0,
                    "req_id": mid if isinstance(mid, str) else "", "code": 404,
                    "message": None, "detail": "x"}),
            _frame({"type": "pong", "id": "dup", "version": "1.0", "ts": 1.0,
                    "req_id": mid, "uptime_seconds": "long"})]


def main() -> None:
    out = sys.stdout.buffer
    for raw in sys.stdin.buffer:
        try:
            message = json.loads(raw)
        except ValueError:
            message = None
        for chunk in answer(message):
            out.write(chunk)
        out.flush()


if __name__ == "__main__":
    main()
