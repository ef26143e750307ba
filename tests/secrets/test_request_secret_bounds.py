"""A request's own ``secrets`` are refused where the host lets them reach nothing, and
the redaction of many long values sharing a beginning stays bounded (README "Secrets",
PROTOCOL.md §5 Secrets)."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from a2e_chains import ChainPlugin
from a2e_tools import ToolsPlugin

from a2e_host import secrets
from a2e_host.chains.messages import ChainNode, ChainRequest, ChainResponse
from a2e_host.client import connect_memory
from a2e_host.config import load_config
from a2e_host.redaction import Redactor
from a2e_host.runtime.host import Host
from a2e_host.secrets import RequestSecretPolicy

ECHO = {"node_id": "n", "kind": "tool", "name": "secret_echo",
        "input": {"a": "x", "b": "y"}}


@pytest.mark.asyncio
async def test_request_secrets_are_refused_when_the_policy_allows_no_tool_nor_executable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """They were registered for redaction process-wide (every session's output scanned
    for them) though no node could ever receive them."""
    path = tmp_path / "host.toml"
    path.write_text('tools = ["secretprobe"]\n', encoding="utf-8")
    config = load_config(path, overrides={"root": str(tmp_path)}, environ={})
    registered: list[Any] = []
    real = secrets.register
    monkeypatch.setattr(secrets, "register",
                        lambda values: registered.append(dict(values)) or real(values))
    chains = ChainPlugin(config)
    host = Host(config, plugins=[chains, ToolsPlugin(config)])
    try:
        request = ChainRequest(id="r", nodes=[ChainNode(**ECHO)], entry_node="n",
                               secrets={"REQKEY": "req-value-123456"})
        with anyio.fail_after(10):
            async with connect_memory(host, agent_caps=["chains"]) as client:
                messages = [m async for m in client.send_request(request)]
    finally:
        await chains.aclose()
    response = messages[-1]
    assert isinstance(response, ChainResponse) and not response.success
    assert response.error is not None and response.error.code == "chain_invalid"
    errors = response.error.details["errors"]
    assert [(e["code"], e["field"]) for e in errors] == [("secret_denied", "secrets")]
    assert "[request_secrets] tools/executables" in errors[0]["hint"]
    assert "req-value-123456" not in str(response.error)
    assert [values for values in registered if "REQKEY" in values] == []


def test_a_request_policy_resolves_its_executables_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each request secret ran ``shutil.which`` per executable, on the event loop."""
    calls: list[str] = []
    real = secrets.shutil.which

    def which(name: str, *args: Any, **kwargs: Any) -> str | None:
        calls.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(secrets.shutil, "which", which)
    policy = RequestSecretPolicy(executables=("env", "true"))
    assert sorted(calls) == ["env", "true"]
    made = [policy.secret(f"K{i}", "value-123456789") for i in range(20)]
    assert sorted(calls) == ["env", "true"]
    assert all(s.allows_executable("env") and not s.allows_executable("ls") for s in made)
    assert policy.allows_executable("env")


SHARED = "A" * 4000
LONG_VALUES = {f"K{i:02d}": f'{SHARED}-{i:02d}-"é\\{i * 7919:08d}' for i in range(16)}


class _Counted(str):
    """A text that counts the characters of the forms it is compared with."""

    compared = 0

    def startswith(self, prefix: Any, *args: Any) -> bool:  # type: ignore[override]
        _Counted.compared += len(prefix) if isinstance(prefix, str) else 0
        return super().startswith(prefix, *args)


def test_redacting_many_long_values_sharing_a_beginning_is_bounded() -> None:
    """Each place the text repeated the beginning 16 values of 4 KiB share was compared
    with every form of every value: 1.2 s per 100 KB of output, chosen by the agent."""
    redactor = Redactor(LONG_VALUES)
    value = LONG_VALUES["K03"]
    text = "A" * 60_000 + value + "A" * 40_000 + value + "tail"
    _Counted.compared = 0
    started = time.perf_counter()
    out = redactor.redact(_Counted(text))
    elapsed = time.perf_counter() - started
    assert out == "A" * 60_000 + "«secret:K03»" + "A" * 40_000 + "«secret:K03»tail"
    bound = max(1 << 20, 8 * len(text)) + 16 * 12 * (len(value) + 40)
    assert _Counted.compared <= bound, (_Counted.compared, bound)
    assert elapsed < 5, elapsed


def test_redaction_past_its_work_bound_finds_what_the_anchors_find() -> None:
    """Past the bound the rest is searched form by form: leftmost, then longest, never
    overlapping, like the anchored search."""
    values = {"A": "abcdefgh", "B": "abcdefghijkl", "C": "ghijklmnop", "D": "zzzzzzzz"}
    redactor = Redactor(values)
    matcher = redactor._text  # noqa: SLF001
    texts = ["x abcdefghijklmnop zzzzzzzzz abcdefg abcdefghXY ghijklmnopabcdefgh",
             "zzzzzzzzzzzzzzzzz" * 3, "abcdefghijklabcdefghij" * 4, "xghijklmnopghijklmnop"]
    for text in texts:
        anchored = list(matcher._matches(text))  # noqa: SLF001
        one_by_one = list(matcher._found_one_by_one(text, 0))  # noqa: SLF001
        assert anchored == one_by_one, text
        assert anchored, text
    chooser = random.Random(22)
    for _ in range(200):  # values built of 'ab', texts too: overlaps everywhere
        values = {f"V{i}": "".join(chooser.choice("ab") for _ in range(chooser.randint(8, 14)))
                  for i in range(4)}
        matcher = Redactor(values)._text  # noqa: SLF001
        text = "".join(chooser.choice("ab") for _ in range(200))
        assert list(matcher._matches(text)) == list(  # noqa: SLF001
            matcher._found_one_by_one(text, 0)), (values, text)  # noqa: SLF001
