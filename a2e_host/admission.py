"""Who may hold a connection, and how fast a peer may guess tokens (issue 12.11).

Layer: core (no anyio, no sockets, no clock: callers pass ``now``). The WebSocket server
asks a :class:`ConnectionLimiter` before it upgrades a connection; the runtime asks the
host's :class:`AuthThrottle` how long a failed ``auth_token`` must wait before its
``auth_failed`` is sent.

Theory of operation. An unauthenticated connection costs a file descriptor and a little
memory, and a refused token costs nothing to try again, so a hostile peer could fill the
host or guess at network speed. Three rules bound that:

- a connection that does not complete a handshake within ``handshake_timeout`` is closed
  (the runtime's job);
- at most ``max_connections`` connections, and at most ``max_connections_per_peer`` from
  one peer address, are open at once; the rest are refused before the upgrade;
- failed authentications from one peer are answered one per ``auth_failure_delay``, in
  arrival order, however many connections the peer opens.

A *peer address* (:func:`peer_key`) is the remote IPv4 address, or the /64 prefix of an
IPv6 one (one host usually holds a whole /64, so a per-address cap would not bind).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Hashable

__all__ = ["peer_key", "ConnectionLimiter", "AuthThrottle", "Refusal"]


def peer_key(address: str) -> str:
    """The key connections from ``address`` are counted under.

    Args:
        address: a remote IP address as the socket reports it (``"203.0.113.7"``,
            ``"2001:db8::1"``, ``"::ffff:203.0.113.7"``), or any other name (``"stdio"``,
            a Unix socket path) for transports without one.

    Returns:
        The IPv4 address (IPv4-mapped IPv6 included) in dotted form, ``"<prefix>/64"``
        for another IPv6 address, or ``address`` unchanged when it is not an IP address.
    """
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class Refusal:
    """Why :meth:`ConnectionLimiter.acquire` refused a connection.

    Attributes:
        ceiling: ``"max_connections"`` or ``"max_connections_per_peer"``.
        limit: the configured value.
        peer: the peer key the connection came from.
    """

    __slots__ = ("ceiling", "limit", "peer")

    def __init__(self, ceiling: str, limit: int, peer: str) -> None:
        self.ceiling = ceiling
        self.limit = limit
        self.peer = peer

    def __str__(self) -> str:
        if self.ceiling == "max_connections":
            return f"the host has {self.limit} connections open, its max_connections"
        return (f"{self.peer} has {self.limit} connections open, the host's "
                "max_connections_per_peer")

    def __repr__(self) -> str:
        return f"Refusal({self.ceiling!r}, {self.limit!r}, {self.peer!r})"


class ConnectionLimiter:
    """Counts open connections, in total and per peer key, against two ceilings.

    Each connection is a hashable *token* (e.g. the server's connection object) that is
    acquired once and released once; releasing an unknown token does nothing, so a
    connection can be released both when it ends and by :meth:`prune`.

    Args:
        max_connections: connections open at once, all peers together (> 0).
        max_per_peer: connections open at once from one peer key (> 0).

    Raises:
        ValueError: a ceiling is not positive.
    """

    def __init__(self, max_connections: int, max_per_peer: int) -> None:
        if max_connections <= 0 or max_per_peer <= 0:
            raise ValueError("connection ceilings must be > 0")
        self.max_connections = max_connections
        self.max_per_peer = max_per_peer
        self._peer_of: dict[Hashable, str] = {}
        self._per_peer: dict[str, int] = {}

    def __len__(self) -> int:
        """Connections counted now."""
        return len(self._peer_of)

    def count(self, peer: str) -> int:
        """Connections counted now for ``peer`` (a :func:`peer_key`)."""
        return self._per_peer.get(peer, 0)

    def acquire(self, token: Hashable, peer: str) -> Refusal | None:
        """Count ``token`` as open from ``peer``, unless a ceiling is reached.

        Args:
            token: the connection; acquiring the same token twice counts it once.
            peer: its :func:`peer_key`.

        Returns:
            None when counted; else the :class:`Refusal` (the per-peer ceiling is
            checked first: it names the one peer responsible).
        """
        if token in self._peer_of:
            return None
        held = self._per_peer.get(peer, 0)
        if held >= self.max_per_peer:
            return Refusal("max_connections_per_peer", self.max_per_peer, peer)
        if len(self._peer_of) >= self.max_connections:
            return Refusal("max_connections", self.max_connections, peer)
        self._peer_of[token] = peer
        self._per_peer[peer] = held + 1
        return None

    def release(self, token: Hashable) -> None:
        """Stop counting ``token`` (no effect when it is not counted)."""
        peer = self._peer_of.pop(token, None)
        if peer is None:
            return
        left = self._per_peer[peer] - 1
        if left:
            self._per_peer[peer] = left
        else:
            del self._per_peer[peer]

    def prune(self, is_gone: Callable[[Hashable], bool]) -> int:
        """Release every token for which ``is_gone(token)`` is true; return how many.

        A safety net for connections that ended without their owner releasing them
        (e.g. a WebSocket upgrade that failed after it was admitted).
        """
        gone = [token for token in self._peer_of if is_gone(token)]
        for token in gone:
            self.release(token)
        return len(gone)


class AuthThrottle:
    """Spaces out the answers to failed authentications, per peer key.

    Each failure is answered at its peer's next free slot: ``delay`` seconds after the
    later of now and that peer's previous slot. So ``n`` failures from one peer are
    answered over at least ``n * delay`` seconds, whether they come one after another
    or on ``n`` connections at once; other peers are not slowed. Only failures are
    spaced: a correct token is answered at once.

    Memory: one entry per peer with an answer still pending; entries whose slot has
    passed are dropped once more than ``prune_above`` peers are held.

    Args:
        delay: seconds between two answers to one peer (>= 0; 0: no delay).
        prune_above: entries held before expired ones are dropped.

    Raises:
        ValueError: ``delay`` is negative.
    """

    def __init__(self, delay: float, *, prune_above: int = 1024) -> None:
        if not delay >= 0:
            raise ValueError("auth_failure_delay must be >= 0")
        self.delay = delay
        self.prune_above = prune_above
        self._next: dict[str, float] = {}

    def failure(self, peer: str, now: float) -> float:
        """Record a failed authentication from ``peer`` at ``now``.

        Args:
            peer: the :func:`peer_key` it came from.
            now: the caller's monotonic clock, seconds.

        Returns:
            Seconds to wait before answering ``auth_failed`` (>= ``delay``).
        """
        if self.delay <= 0:
            return 0.0
        slot = max(now, self._next.get(peer, now)) + self.delay
        self._next[peer] = slot
        if len(self._next) > self.prune_above:
            self._next = {p: t for p, t in self._next.items() if t > now}
        return slot - now

    def pending(self, now: float) -> int:
        """Peers with an answer not yet due at ``now``."""
        return sum(1 for t in self._next.values() if t > now)
