"""Paths by which a secret value could leave an in-process host other than the frames'
own encoder (README "Secrets"): a failure whose text is not its string ``args`` (an
``OSError``'s ``filename``) and the checkpoint a durable run stores beside its frames,
scanned byte by byte in the store's files."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from a2e_chains import ChainPlugin
from a2e_mcp.errlog import errlog
from a2e_tools import ToolsPlugin

from a2e_host import secrets
from a2e_host.chains.messages import ChainEvent, ChainNode, ChainRequest, ChainResponse
from a2e_host.chains.proc import _Capture
from a2e_host.chains.resume import checkpoint_of
from a2e_host.chains.secret_refs import SecretResolver
from a2e_host.client import connect_memory
from a2e_host.config import load_config
from a2e_host.errors import ChainFailure, chain_failure_of
from a2e_host.exceptions import NodeError
from a2e_host.redaction import Redactor
from a2e_host.runtime.host import Host
from a2e_host.secrets import Secret
from tests.support.secret_values import HOST_VALUE, leaks, store_bytes

CONFIG = """\
tools = ["secretprobe"]

[secrets]
HOSTKEY = {file = "hostkey.txt", tools = ["secret_*"]}

[request_secrets]
tools = ["secret_echo"]
"""

OPEN = {"node_id": "open", "kind": "tool", "name": "secret_open",
        "input": {"a": {"$secret": "HOSTKEY"}, "b": "plain"}}


@pytest.fixture
def durable_host(tmp_path: Path) -> Iterator[tuple[Host, ChainPlugin]]:
    (tmp_path / "hostkey.txt").write_text(HOST_VALUE + "\n", encoding="utf-8")
    path = tmp_path / "host.toml"
    path.write_text(CONFIG, encoding="utf-8")
    config = load_config(path, overrides={"root": str(tmp_path),
                                          "store": str(tmp_path / "runs.db")}, environ={})
    chains = ChainPlugin(config)
    try:
        yield Host(config, plugins=[chains, ToolsPlugin(config)]), chains
    finally:
        anyio.run(chains.aclose)  # commits the store; its secrets leave the registry


async def _run(host: Host, nodes: list[dict[str, Any]], **fields: Any) -> tuple[
        list[ChainEvent], ChainResponse]:
    request = ChainRequest(id="r", nodes=[ChainNode(**n) for n in nodes],
                           entry_node=nodes[0]["node_id"], **fields)
    with anyio.fail_after(10):
        async with connect_memory(host, agent_caps=["chains"]) as client:
            messages = [m async for m in client.send_request(request)]
    response = messages[-1]
    assert isinstance(response, ChainResponse)
    return [m for m in messages if isinstance(m, ChainEvent)], response


@pytest.mark.asyncio
async def test_a_durable_run_stores_no_secret_a_failure_shows_outside_its_args(
    durable_host: tuple[Host, ChainPlugin], tmp_path: Path,
) -> None:
    host, chains = durable_host
    events, response = await _run(host, [OPEN], durable=True)
    await chains.aclose()  # every queued write committed before the files are read
    assert response.error is not None
    assert response.error.message == (
        "node 'open' failed: FileNotFoundError: [Errno 2] No such file or directory: "
        f"'{tmp_path / 'missing'}/«secret:HOSTKEY»'")
    assert response.error.code == "chain_node_error" and response.error.node_id == "open"
    assert [e.error for e in events if e.phase == "error"] == [
        response.error.message.removeprefix("node 'open' failed: ")]
    files = store_bytes(tmp_path)
    assert files.get("runs.db")
    for name, data in files.items():
        assert leaks(data, HOST_VALUE) == [], name
    assert any("«secret:HOSTKEY»".encode() in data for data in files.values())


@pytest.mark.asyncio
async def test_a_tool_error_showing_a_secret_outside_its_args_becomes_the_same_sentence_redacted(
) -> None:
    resolver = SecretResolver({"K": Secret("K", HOST_VALUE, tools=("t",))})
    node = ChainNode(node_id="n", kind="tool", name="t", input={"p": {"$secret": "K"}})

    async def opens(node: ChainNode, args: dict[str, Any], ctx: Any) -> Any:
        raise FileNotFoundError(2, "No such file or directory", f"/keys/{args['p']}")

    async def lists(node: ChainNode, args: dict[str, Any], ctx: Any) -> Any:
        raise RuntimeError(["token", args["p"]])

    shown = {}
    for name, executor in (("opens", opens), ("lists", lists)):
        with pytest.raises(Exception) as raised:
            await resolver.wrap({"tool": executor})["tool"](node, {"p": "x"}, None)
        failure = chain_failure_of(raised.value, node_id="n")
        assert failure.code == "chain_node_error" and failure.retryable is False
        assert leaks(repr(raised.value).encode(), HOST_VALUE) == []
        shown[name] = failure.message
    assert shown == {
        "opens": "FileNotFoundError: [Errno 2] No such file or directory: "
                 "'/keys/«secret:K»'",
        "lists": "RuntimeError: ['token', '«secret:K»']",
    }


@pytest.mark.asyncio
async def test_a_tool_error_holding_no_secret_keeps_its_own_type() -> None:
    resolver = SecretResolver({"K": Secret("K", HOST_VALUE, tools=("t",))})
    node = ChainNode(node_id="n", kind="tool", name="t", input={"p": {"$secret": "K"}})

    async def fails(node: ChainNode, args: dict[str, Any], ctx: Any) -> Any:
        raise FileNotFoundError(2, "No such file or directory", "/keys/other")

    with pytest.raises(FileNotFoundError):
        await resolver.wrap({"tool": fails})["tool"](node, {"p": "x"}, None)
    with pytest.raises(NodeError, match="^kept$"):
        async def chain_error(node: ChainNode, args: dict[str, Any], ctx: Any) -> Any:
            raise NodeError("kept")
        await resolver.wrap({"tool": chain_error})["tool"](node, {"p": "x"}, None)


def test_a_checkpoint_holds_no_registered_secret() -> None:
    token = secrets.register({"K": HOST_VALUE})
    try:
        done = checkpoint_of("done", {"echo": [HOST_VALUE, f"a {HOST_VALUE} b"]})
        error = checkpoint_of("error", failure=ChainFailure(
            code="chain_node_error", message=f"saw {HOST_VALUE}", node_id="n",
            details={"why": HOST_VALUE}))
    finally:
        secrets.unregister(token)
    assert done is not None and error is not None
    assert leaks(done + error, HOST_VALUE) == []
    assert msgspec.json.decode(done) == {"echo": ["«secret:K»", "a «secret:K» b"]}
    failure = msgspec.json.decode(error)
    assert failure["message"] == "saw «secret:K»"
    assert failure["details"] == {"why": "«secret:K»"}


def test_registering_a_requests_longest_secrets_costs_about_as_much_as_short_ones() -> None:
    """Every request's secrets are compiled into the process-wide redactor on the event
    loop: 16 values of 4 KiB (``max_request_secrets`` × ``max_secret_bytes``) once cost
    ~0.5 s of it per registration (every form compiled whole)."""
    def build(chars: int) -> float:
        values = {f"K{i}": (f"{i:02d}" + "Zq-9" * chars)[:chars] for i in range(16)}
        started = time.perf_counter()
        redactor = Redactor(values)
        took = time.perf_counter() - started
        assert redactor.redact(f"<{values['K7']}>") == "<«secret:K7»>"
        return took

    build(16)  # warm
    short, long = build(16), build(4096)
    assert long < 20 * short + 0.1, (short, long)


def test_the_longest_form_starting_at_a_place_is_replaced_whole() -> None:
    redactor = Redactor({"SHORT": "abcdefgh", "LONG": "abcdefghijkl", "OTHER": "zzzzzzzz"})
    assert redactor.redact("x abcdefghijkl abcdefghXY zzzzzzzzz abcdefg") == (
        "x «secret:LONG» «secret:SHORT»XY «secret:OTHER»z abcdefg")
    assert redactor.redact_frame(b'["abcdefghijkl","zzzzzzzz"]') == (
        '["«secret:LONG»","«secret:OTHER»"]'.encode())
    assert redactor.scrub({"k": "nothing here"}) == {"k": "nothing here"}


@pytest.mark.asyncio
async def test_a_process_output_cut_at_its_cap_keeps_no_part_of_a_secret() -> None:
    async def chunks() -> Any:
        for chunk in (b"0123456789", HOST_VALUE.encode(), b" and more after it"):
            yield chunk

    token = secrets.register({"K": HOST_VALUE})
    try:
        capture = _Capture(15)  # the value starts at byte 10: the cut falls inside it
        await capture.drain(chunks())  # type: ignore[arg-type]
        kept = capture.text()
    finally:
        secrets.unregister(token)
    assert capture.truncated is True
    assert kept == "0123456789«sec" and len(kept.encode()) <= 15
    assert HOST_VALUE[:3] not in kept


def test_a_stdio_mcp_servers_stderr_reaches_the_hosts_redacted(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A server's stderr went to descriptor 2 as it was: a server printing the arguments
    of a call (a resolved ``$secret``) wrote the value past every redaction."""
    token = secrets.register({"K": HOST_VALUE})
    try:
        pipe = errlog()
        pipe.write(f"server got token={HOST_VALUE}\npartial line {HOST_VALUE}")
        pipe.write(" ends here\n")
        pipe.flush()
        seen = ""
        deadline = time.monotonic() + 10
        while "ends here" not in seen and time.monotonic() < deadline:
            seen += capfd.readouterr().err
            time.sleep(0.01)
    finally:
        secrets.unregister(token)
    assert "server got token=«secret:K»\npartial line «secret:K» ends here\n" in seen
    assert leaks(seen.encode(), HOST_VALUE) == []


@pytest.mark.asyncio
async def test_a_requests_secrets_leave_the_registry_when_its_run_ends(
    durable_host: tuple[Host, ChainPlugin],
) -> None:
    host, _ = durable_host
    before = secrets.redactor()
    assert before is not None and "HOSTKEY" in before.names
    plain = [{"node_id": "n", "kind": "tool", "name": "secret_echo",
              "input": {"a": "x", "b": "y"}}]
    for fields in ({}, {"durable": True}):
        _, response = await _run(host, plain, secrets={"REQKEY": "req-value-123456"},
                                 **fields)
        assert response.success, response.error
        after = secrets.redactor()
        assert after is not None and "HOSTKEY" in after.names
        assert "REQKEY" not in after.names, fields
