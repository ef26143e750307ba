"""How the PostgreSQL run store names and connects to its database.

Layer: store backend (psycopg). Every connection the store opens (the writer's, the
listener's, the heartbeat's, the read pool's) uses :data:`CONNECT_OPTIONS`: a bounded
connect and TCP keepalives, so a database that vanished without closing its sockets
is noticed in seconds, not at the kernel's two-hour default.
"""

from __future__ import annotations

import os
import socket
from typing import Any

__all__ = ["CONNECT_OPTIONS", "default_replica_id", "where"]

CONNECT_OPTIONS: dict[str, Any] = {
    "connect_timeout": 10,  # seconds to reach the database
    "keepalives": 1,
    "keepalives_idle": 10,  # seconds idle before the first probe
    "keepalives_interval": 5,  # seconds between probes
    "keepalives_count": 3,  # unanswered probes before the connection is dead
}
"""libpq connection parameters of every connection the store opens."""


def default_replica_id() -> str:
    """``hostname-pid``: a replica's id when ``--replica-id`` is not given."""
    return f"{socket.gethostname()}-{os.getpid()}"


def where(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        info = conninfo_to_dict(url)
    except Exception:  # noqa: BLE001 — an unparsable URL is named by its scheme only
        return "postgresql://…"
    return f"postgresql://{info.get('host', '')}:{info.get('port', '')}/{info.get('dbname', '')}"
