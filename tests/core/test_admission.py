"""Who may hold a connection and how fast a peer may guess tokens, as pure objects
(issue 12.11; a2e_host.admission), and the session machine's pre-auth and gate rules
(PROTOCOL.md §2, §8)."""

from __future__ import annotations

import pytest

from a2e_host.admission import AuthThrottle, ConnectionLimiter, peer_key
from a2e_host.config import HostConfig, load_config
from a2e_host.exceptions import HandshakeRequired
from a2e_host.messages import HandshakeRequest, Ping, Shutdown
from a2e_host.session import ConnectionSession


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("::ffff:203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"),
        ("2001:db8:1:2::1", "2001:db8:1:2::/64"),
        ("fe80::1%eth0", "fe80::/64"),
        ("::1", "::/64"),
        ("stdio", "stdio"),
        ("/run/a2e.sock", "/run/a2e.sock"),
    ],
)
def test_peer_key_is_the_ipv4_address_or_the_ipv6_slash_64(address: str, key: str) -> None:
    assert peer_key(address) == key


def test_one_peer_is_capped_and_another_peer_still_gets_in() -> None:
    limiter = ConnectionLimiter(max_connections=10, max_per_peer=3)
    hog = [object() for _ in range(4)]
    assert [limiter.acquire(c, "198.51.100.9") for c in hog[:3]] == [None, None, None]
    refusal = limiter.acquire(hog[3], "198.51.100.9")
    assert refusal is not None
    assert (refusal.ceiling, refusal.limit, refusal.peer) == (
        "max_connections_per_peer", 3, "198.51.100.9")
    assert "198.51.100.9 has 3 connections open" in str(refusal)
    assert limiter.acquire(object(), "203.0.113.7") is None  # the authorised client
    assert (len(limiter), limiter.count("198.51.100.9"), limiter.count("203.0.113.7")) == (4, 3, 1)


def test_the_total_ceiling_refuses_past_max_connections_until_one_is_released() -> None:
    limiter = ConnectionLimiter(max_connections=3, max_per_peer=100)
    held = [object() for _ in range(3)]
    for n, conn in enumerate(held):
        assert limiter.acquire(conn, f"10.0.0.{n}") is None
    late = object()
    refusal = limiter.acquire(late, "10.0.0.99")
    assert refusal is not None and refusal.ceiling == "max_connections"
    assert str(refusal) == "the host has 3 connections open, its max_connections"
    limiter.release(held[1])
    limiter.release(held[1])  # a second release of the same connection changes nothing
    assert limiter.acquire(late, "10.0.0.99") is None
    assert len(limiter) == 3 and limiter.count("10.0.0.1") == 0


def test_acquiring_the_same_connection_twice_counts_it_once() -> None:
    limiter = ConnectionLimiter(max_connections=2, max_per_peer=2)
    conn = object()
    assert limiter.acquire(conn, "p") is None
    assert limiter.acquire(conn, "p") is None
    assert (len(limiter), limiter.count("p")) == (1, 1)


def test_prune_releases_connections_that_ended_without_being_released() -> None:
    limiter = ConnectionLimiter(max_connections=5, max_per_peer=5)
    alive, dead1, dead2 = object(), object(), object()
    for conn in (alive, dead1, dead2):
        limiter.acquire(conn, "p")
    assert limiter.prune(lambda c: c is not alive) == 2
    assert (len(limiter), limiter.count("p")) == (1, 1)


def test_limiter_refuses_non_positive_ceilings() -> None:
    with pytest.raises(ValueError, match="> 0"):
        ConnectionLimiter(0, 1)


def test_n_failures_from_one_peer_are_answered_over_at_least_n_delays() -> None:
    throttle = AuthThrottle(0.5)
    # eight failures at the same instant (eight connections at once): one slot each
    assert [throttle.failure("p", 100.0) for _ in range(8)] == [0.5 * k for k in range(1, 9)]
    # another peer is not slowed by the first one's queue
    assert throttle.failure("q", 100.0) == 0.5
    # one after another, each waiting its answer: still one slot per delay
    throttle = AuthThrottle(0.5)
    now = 0.0
    for _ in range(5):
        now += throttle.failure("p", now)
    assert now == pytest.approx(2.5)
    # once the queue has passed, a new failure waits one delay again
    assert throttle.failure("p", now + 60.0) == 0.5


def test_throttle_forgets_peers_whose_answers_are_all_sent() -> None:
    throttle = AuthThrottle(1.0, prune_above=4)
    for n in range(4):
        throttle.failure(f"10.0.0.{n}", 0.0)
    assert throttle.pending(0.5) == 4
    throttle.failure("10.0.0.200", 10.0)  # the others' slots are over at t=10
    assert len(throttle._next) == 1 and throttle.pending(10.0) == 1


def test_zero_delay_disables_the_throttle_and_negative_is_refused() -> None:
    assert AuthThrottle(0.0).failure("p", 5.0) == 0.0
    with pytest.raises(ValueError, match="auth_failure_delay"):
        AuthThrottle(-1.0)


# ── the session machine ────────────────────────────────────────────────────────

SERVED = {"chains": None, "video": None}
GATES = {"proc": "chains", "skill": "chains", "chains": "video"}


@pytest.mark.parametrize("message", [Ping(id="p"), Shutdown(id="s")])
def test_core_messages_before_auth_get_handshake_required_when_a_token_is_set(
    message: Ping | Shutdown,
) -> None:
    machine = ConnectionSession(HostConfig(auth_token="T"), SERVED)
    with pytest.raises(HandshakeRequired, match="auth_token"):
        machine.check_core(message)
    machine.receive_handshake(HandshakeRequest(agent_caps=["chains"], auth_token="T"))
    machine.check_core(message)  # answered once authenticated


def test_core_messages_before_the_handshake_are_answered_without_a_token() -> None:
    ConnectionSession(HostConfig(), SERVED).check_core(Ping(id="p"))


def test_gates_are_granted_only_with_their_capability_and_never_accepted_as_caps() -> None:
    machine = ConnectionSession(HostConfig(), SERVED, gates=GATES)
    out = machine.receive_handshake(
        HandshakeRequest(agent_caps=["proc", "chains", "skill", "tools"])
    )
    assert out.session is not None
    assert [c.capability for c in out.response.accepted_caps] == ["chains"]
    assert out.session.gates == {"proc", "skill"}
    assert out.session.granted == {"chains", "proc", "skill"}
    # a gate whose capability is not asked is not granted; a served capability is never
    # a gate (``chains`` stays a capability even when listed as one)
    machine = ConnectionSession(HostConfig(), SERVED, gates=GATES)
    out = machine.receive_handshake(HandshakeRequest(agent_caps=["video", "skill"]))
    assert out.session is not None and out.session.granted == {"video"}


def test_gates_alone_are_no_caps() -> None:
    machine = ConnectionSession(HostConfig(), SERVED, gates=GATES)
    out = machine.receive_handshake(HandshakeRequest(agent_caps=["proc", "skill", "tools"]))
    assert (out.session, out.response.ok, out.response.reason) == (None, False, "no_caps")


# ── configuration ─────────────────────────────────────────────────────────────


def test_connection_settings_load_from_the_environment_with_their_defaults() -> None:
    default = load_config(environ={})
    assert (default.handshake_timeout, default.max_connections,
            default.max_connections_per_peer, default.auth_failure_delay,
            default.log_level) == (10.0, 512, 64, 1.0, "auto")
    config = load_config(environ={
        "A2E_HANDSHAKE_TIMEOUT": "2.5", "A2E_MAX_CONNECTIONS": "50",
        "A2E_MAX_CONNECTIONS_PER_PEER": "5", "A2E_AUTH_FAILURE_DELAY": "0",
    })
    assert (config.handshake_timeout, config.max_connections,
            config.max_connections_per_peer, config.auth_failure_delay) == (2.5, 50, 5, 0.0)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("A2E_HANDSHAKE_TIMEOUT", "0", "handshake_timeout .* seconds > 0"),
        ("A2E_MAX_CONNECTIONS", "0", "max_connections .* positive integer"),
        ("A2E_MAX_CONNECTIONS_PER_PEER", "many", "max_connections_per_peer .* positive"),
        ("A2E_AUTH_FAILURE_DELAY", "-1", "auth_failure_delay .* seconds >= 0"),
    ],
)
def test_bad_connection_settings_are_refused_naming_the_setting(
    name: str, value: str, expected: str
) -> None:
    with pytest.raises(ValueError, match=expected):
        load_config(environ={name: value})


def test_capability_missing_for_an_unserved_capability_says_how_to_serve_it() -> None:
    from a2e_host.chains.proc_messages import ProcStatusRequest
    from a2e_host.exceptions import CapabilityMissing

    machine = ConnectionSession(HostConfig(), SERVED,
                                how_to_serve={"proc": "start the host with --allow-proc NAME"})
    machine.receive_handshake(HandshakeRequest(agent_caps=["chains", "video"]))
    with pytest.raises(CapabilityMissing) as unserved:
        machine.check_work(ProcStatusRequest(id="s"), "proc")
    assert str(unserved.value) == (
        "'proc/status/req' needs capability 'proc', which this session was not granted; "
        "this host does not serve it; to serve it, start the host with --allow-proc NAME")
    with pytest.raises(CapabilityMissing) as no_hint:
        machine.check_work(ProcStatusRequest(id="s"), "telepathy")
    assert str(no_hint.value).endswith("was not granted; this host does not serve it")
