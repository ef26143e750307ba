"""Principals (PROTOCOL.md §5 Durable runs): named tokens in the configuration, and the
principal a handshake gets from the token it presents."""

from __future__ import annotations

from pathlib import Path

import pytest

from a2e_host.config import ANONYMOUS_PRINCIPAL, TOKEN_PRINCIPAL, HostConfig, load_config
from a2e_host.messages import HandshakeRequest
from a2e_host.session import ConnectionSession


def _handshake(config: HostConfig, token: str = "", bearer: str = "") -> str | None:
    machine = ConnectionSession(config, {"chains": None}, bearer_token=bearer)
    outcome = machine.receive_handshake(
        HandshakeRequest(agent_caps=["chains"], auth_token=token)
    )
    return outcome.session.principal if outcome.session is not None else None


def test_named_tokens_load_from_an_auth_table_of_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "host.toml"
    path.write_text('[auth.tokens]\nalice = "tok-a"\nbob = "tok-b"\n', encoding="utf-8")
    config = load_config(path, environ={})
    assert config.auth_tokens == {"alice": "tok-a", "bob": "tok-b"}
    assert config.auth_required is True


def test_named_tokens_load_from_the_environment_as_name_token_pairs() -> None:
    config = load_config(environ={"A2E_AUTH_TOKENS": "alice:tok-a, bob:tok-b"})
    assert config.auth_tokens == {"alice": "tok-a", "bob": "tok-b"}


@pytest.mark.parametrize("raw", ["alice", "alice:", ":tok", "alice:t,bob:t"])
def test_a_malformed_or_shared_token_is_refused_naming_the_setting(raw: str) -> None:
    with pytest.raises(ValueError, match="auth_tokens from environment variable A2E_AUTH_TOKENS"):
        load_config(environ={"A2E_AUTH_TOKENS": raw})


def test_an_unknown_key_in_the_auth_table_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "host.toml"
    path.write_text('[auth]\ntokenz = "x"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="unknown key 'tokenz' in \\[auth\\]"):
        load_config(path, environ={})


def test_each_named_token_opens_a_session_of_its_principal() -> None:
    config = HostConfig(auth_tokens={"alice": "tok-a", "bob": "tok-b"})
    assert _handshake(config, "tok-a") == "alice"
    assert _handshake(config, "tok-b") == "bob"
    assert _handshake(config, bearer="tok-b") == "bob"
    assert _handshake(config, "tok-c") is None
    assert _handshake(config) is None


def test_the_single_auth_token_is_one_principal_beside_named_ones() -> None:
    config = HostConfig(auth_token="shared", auth_tokens={"alice": "tok-a"})
    assert _handshake(config, "shared") == TOKEN_PRINCIPAL == "token"
    assert _handshake(config, "tok-a") == "alice"


def test_without_tokens_every_session_is_the_anonymous_principal() -> None:
    config = HostConfig()
    assert _handshake(config) == ANONYMOUS_PRINCIPAL == "anonymous"
    assert _handshake(config, "anything") == "anonymous"


def test_a_local_run_authenticates_with_a_named_token_when_there_is_no_single_one(
    tmp_path: Path,
) -> None:
    import subprocess

    from tests.support.process import CLI, host_env

    chain = tmp_path / "chain.json"
    chain.write_text('{"nodes": [{"node_id": "a", "kind": "tool", "name": "echo", '
                     '"input": {"v": 1}}], "entry_node": "a"}', encoding="utf-8")
    done = subprocess.run([*CLI, "run", str(chain), "--tools", "conformance", "--final"],
                          env=host_env(A2E_AUTH_TOKENS="alice:tok-a"), capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, '{"v":1}\n'), done.stderr[-2000:]
