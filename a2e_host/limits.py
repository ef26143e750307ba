"""Ceilings at three scopes, the smallest wins (PROTOCOL.md §6, after seed 003's budget model).

Layer: core (no I/O). The host's configuration sets :class:`Limits`; a session may only
lower them (``handshake/req.limits``); a request may lower what it can (its ``timeout``).
A refusal names the ceiling, the scope whose number refused, that limit and the asked
value; on a tie the broader scope is named, since raising the narrower one alone would
not move the ceiling.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .exceptions import ChainLimitExceeded
from .telemetry import metrics

__all__ = ["Limits", "SessionLimits", "CEILINGS", "limits_from_mapping"]


class Limits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One set of ceilings. Sizes are int bytes, times int seconds, the rest counts.

    Defaults are the host defaults of PROTOCOL.md §6.
    """

    max_nodes: int = 10_000
    max_map_items: int = 100_000
    max_map_concurrency: int = 64
    max_concurrency: int = 64
    max_timeout: int = 3_600
    max_depth: int = 8
    max_parallel: int = 4
    max_message_bytes: int = 16 * 1024 * 1024
    max_output_bytes: int = 8 * 1024 * 1024
    max_expression_steps: int = 1_000_000
    max_expression_bytes: int = 8 * 1024 * 1024
    max_chain_output_bytes: int = 16 * 1024 * 1024
    max_total_nodes: int = 250_000
    max_chain_expression_chars: int = 1_048_576
    max_attempts: int = 10
    """Attempts one node's ``retry`` may ask for, the first included (PROTOCOL.md §5
    Recovery): refused before anything runs when a node asks for more."""
    proc_limit: int = 8
    """Processes one session may have alive at once through the ``proc`` capability
    (PROTOCOL.md §10): ``proc/spawn/req`` past it is refused with error ``proc_limit``."""
    max_retention: int = 7 * 86_400
    """Seconds a durable run's record and events may be kept after it ends
    (``chain/req.retention``, PROTOCOL.md §5 Durable runs); a request asking for more is
    refused before it runs."""
    max_durable_runs: int = 64
    """Durable runs one principal may have in flight on the host at once, those no
    connection streams (detached, or left by a closed connection) and resumed ones
    included (PROTOCOL.md §5 Durable runs); a durable ``chain/req`` past it is refused
    before it runs. ``max_parallel`` bounds a session, this what its principal leaves
    behind."""
    max_request_secrets: int = 16
    """Secrets one ``chain/req`` may carry in its ``secrets`` (PROTOCOL.md §5 Secrets);
    a request with more is refused before it runs."""
    max_secret_bytes: int = 4096
    """UTF-8 bytes of one value in a ``chain/req``'s ``secrets``; a longer one is refused
    before it runs (every value is matched in every frame the run sends)."""

    def to_dict(self) -> dict[str, int]:
        """The ceilings as a plain dict, e.g. for the handshake's ``chains`` metadata."""
        return {name: getattr(self, name) for name in CEILINGS}

    def lowered(self, asked: dict[str, Any]) -> Limits:
        """A copy with each asked ceiling lowered to ``min(current, asked)``.

        Raises:
            ValueError: an unknown ceiling name, or a value that is not a positive int;
                the message names it.
        """
        changes: dict[str, int] = {}
        for name, value in asked.items():
            if name not in CEILINGS:
                raise ValueError(
                    f"unknown ceiling {name!r} in limits; known: {', '.join(CEILINGS)}"
                )
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"ceiling {name!r} must be a positive integer, got {value!r}")
            changes[name] = min(getattr(self, name), value)
        return msgspec.structs.replace(self, **changes)


CEILINGS: tuple[str, ...] = tuple(Limits.__struct_fields__)
"""The ceiling names, in PROTOCOL.md §6 order."""


class SessionLimits:
    """The effective ceilings of one session: the host's, lowered by the handshake.

    Args:
        host: the host's configured :class:`Limits`.
        asked: ``handshake/req.limits`` (may be empty).

    Raises:
        ValueError: see :meth:`Limits.lowered`.
    """

    __slots__ = ("host", "session", "effective")

    def __init__(self, host: Limits, asked: dict[str, Any] | None = None) -> None:
        self.host = host
        self.session = host.lowered(asked or {})
        self.effective = self.session

    def refusal(
        self, ceiling: str, requested: int, *, node_id: str = ""
    ) -> ChainLimitExceeded | None:
        """The ``chain_limit`` error if ``requested`` exceeds ``ceiling``, else None.

        The request scope never refuses: what a request asks (its ``timeout``, its nodes)
        is the ``requested`` value, and its own lowering simply applies (a ``timeout``
        below ``max_timeout`` is the effective deadline).

        Args:
            ceiling: a name in :data:`CEILINGS`.
            requested: the asked amount (nodes declared, map items, seconds, depth…).
            node_id: the node concerned, ``""`` for the chain.
        """
        scopes: list[tuple[str, int]] = [
            ("host", getattr(self.host, ceiling)),
            ("session", getattr(self.session, ceiling)),
        ]
        limit = min(value for _, value in scopes)
        if requested <= limit:
            return None
        scope = next(name for name, value in scopes if value == limit)  # broadest on a tie
        metrics.refused(ceiling, scope)
        where = f" in node {node_id!r}" if node_id else ""
        return ChainLimitExceeded(
            f"{ceiling} is {limit} at {scope} scope, but {requested} was asked{where}",
            node_id=node_id,
            details={"ceiling": ceiling, "scope": scope, "limit": limit, "requested": requested},
        )


def limits_from_mapping(values: dict[str, Any]) -> Limits:
    """Build host :class:`Limits` from configuration values, e.g. ``{"max_nodes": 100}``.

    Unlike a session, the host's configuration may raise a default as well as lower it.

    Raises:
        ValueError: an unknown name or a non-positive / non-integer value, named.
    """
    for name, value in values.items():
        if name not in CEILINGS:
            raise ValueError(f"unknown ceiling {name!r}; known: {', '.join(CEILINGS)}")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"ceiling {name!r} must be a positive integer, got {value!r}")
    return msgspec.structs.replace(Limits(), **values)
