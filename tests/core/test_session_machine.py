"""The pure session state machine (PROTOCOL.md §2): handshake outcomes and work checks."""

from __future__ import annotations

from typing import Any

import pytest

from a2e_host.chains.messages import ChainRequest
from a2e_host.config import HostConfig
from a2e_host.exceptions import (
    CapabilityMissing,
    HandshakeRequired,
    InvalidMessage,
    SchemaViolation,
    UnknownSession,
)
from a2e_host.limits import Limits
from a2e_host.messages import HandshakeRequest, Ping
from a2e_host.session import ConnectionSession, Session, SessionState

SERVED: dict[str, Any] = {
    "chains": lambda session: {"limits": session.limits.effective.to_dict()},
    "tools": None,
}


def machine(config: HostConfig | None = None, **kwargs: Any) -> ConnectionSession:
    return ConnectionSession(config or HostConfig(), SERVED, **kwargs)


def test_handshake_opens_a_session_with_asked_and_served_caps_in_asked_order() -> None:
    m = machine()
    out = m.receive_handshake(
        HandshakeRequest(id="h", agent_id="a1", agent_caps=["tools", "video", "chains", "tools"])
    )
    assert out.session is not None and not out.close
    assert m.state is SessionState.OPEN and m.session is out.session
    assert [c.capability for c in out.response.accepted_caps] == ["tools", "chains"]
    assert out.response.accepted_caps[0].metadata == {}
    assert out.response.req_id == "h" and out.response.session_id == out.session.session_id
    assert out.session.agent_id == "a1" and out.session.granted == {"tools", "chains"}


def test_session_ids_are_fresh_per_session() -> None:
    ids = {
        machine().receive_handshake(HandshakeRequest(agent_caps=["chains"])).response.session_id
        for _ in range(50)
    }
    assert len(ids) == 50 and all(len(i) == 32 for i in ids)


def test_handshake_limits_lower_the_host_ceilings_and_set_max_parallel() -> None:
    m = machine(HostConfig(limits=Limits(max_parallel=6, max_nodes=50)))
    out = m.receive_handshake(
        HandshakeRequest(agent_caps=["chains"], limits={"max_parallel": 2, "max_nodes": 999})
    )
    assert out.response.max_parallel == 2
    assert out.response.accepted_caps[0].metadata["limits"]["max_nodes"] == 50
    assert out.session is not None and out.session.limits.effective.max_parallel == 2


@pytest.mark.parametrize(
    ("limits", "path"),
    [({"max_nodez": 3}, "$.limits.max_nodez"), ({"max_nodes": 0}, "$.limits.max_nodes")],
)
def test_bad_handshake_limits_raise_schema_violation_and_leave_no_session(
    limits: dict[str, int], path: str
) -> None:
    m = machine()
    with pytest.raises(SchemaViolation) as info:
        m.receive_handshake(HandshakeRequest(agent_caps=["chains"], limits=limits))
    assert info.value.detail["path"] == path
    assert m.session is None and m.state is SessionState.AWAITING_HANDSHAKE


def test_nothing_served_is_no_caps_and_a_retry_is_allowed() -> None:
    m = machine()
    out = m.receive_handshake(HandshakeRequest(agent_caps=["video"]))
    assert (out.response.ok, out.response.reason, out.session, out.close) == (
        False,
        "no_caps",
        None,
        False,
    )
    assert m.receive_handshake(HandshakeRequest(agent_caps=["chains"])).response.ok


@pytest.mark.parametrize(
    ("token", "bearer", "ok"),
    [
        ("t0k", "", True),
        ("", "t0k", True),
        ("bad", "", False),
        ("", "", False),
        ("bad", "t0k", True),
        ("t0k-longer", "", False),
    ],
)
def test_configured_token_is_checked_from_handshake_or_bearer(
    token: str, bearer: str, ok: bool
) -> None:
    m = machine(HostConfig(auth_token="t0k"), bearer_token=bearer)
    out = m.receive_handshake(HandshakeRequest(agent_caps=["chains"], auth_token=token))
    assert out.response.ok is ok
    assert out.close is (not ok)
    if not ok:
        assert (out.response.reason, out.response.session_id) == ("auth_failed", "")


def test_second_handshake_after_success_is_invalid_message() -> None:
    m = machine()
    first = m.receive_handshake(HandshakeRequest(agent_caps=["chains"])).session
    with pytest.raises(InvalidMessage, match="already handshaken"):
        m.receive_handshake(HandshakeRequest(agent_caps=["chains"]))
    assert m.session is first


def test_work_before_handshake_is_handshake_required() -> None:
    with pytest.raises(HandshakeRequired, match="handshake/req"):
        machine().check_work(ChainRequest(), "chains")


def test_work_checks_session_id_and_capability() -> None:
    m = machine()
    session = m.receive_handshake(HandshakeRequest(agent_caps=["tools"])).session
    assert isinstance(session, Session)
    assert m.check_work(ChainRequest(session_id=""), "tools") is session
    assert m.check_work(ChainRequest(session_id=session.session_id), "tools") is session
    assert m.check_work(Ping(), "tools") is session  # no session_id field at all
    with pytest.raises(UnknownSession):
        m.check_work(ChainRequest(session_id="someone-else"), "tools")
    with pytest.raises(CapabilityMissing) as info:
        m.check_work(ChainRequest(session_id=session.session_id), "chains")
    assert info.value.capability_name == "chains"


def test_stop_then_close_moves_through_closing_to_closed() -> None:
    m = machine()
    m.receive_handshake(HandshakeRequest(agent_caps=["chains"]))
    m.stop()
    assert m.state is SessionState.CLOSING and m.closing
    with pytest.raises(InvalidMessage):
        m.receive_handshake(HandshakeRequest(agent_caps=["chains"]))
    m.close()
    m.stop()
    assert m.state is SessionState.CLOSED
