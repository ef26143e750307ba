"""The hostile cases of issue 12, one row per reproduction (items 12.1–12.13).

Each :class:`~tests.hostile.harness.Case` names the item it reproduces, how the host is
started, the hostile request(s), the agreed outcome and a memory budget. The suite
(``tests/hostile/test_hostile.py``) runs every row with a probe session pinging beside
it; ``python -m bench.isolation`` runs the same rows and prints the probe's latencies
and the host's peak RSS.

Shapes assumed for the agreed behaviour (PROTOCOL.md §5, §6 and the agreed names):

* A ceiling refusal is a ``chain/resp`` with ``success: false`` and
  ``error.code == "chain_limit"``. The ceiling's name is read by
  :func:`~tests.hostile.harness.ceilings_named`: ``error.details.ceiling`` for a node or
  run-time refusal (an expression budget fails the **node**: ``error.node_id`` is that
  node), ``error.details.errors[*].ceiling`` for a validation refusal, or deeper when a
  skill or map item's failure is carried up.
* A refusal at validation is ``chain_invalid`` with ``nodes_run == 0`` and a problem in
  ``error.details.errors`` naming the node (``node_id``) and the field (``field``, e.g.
  ``input_map.v``, or ``input`` for a proc node's static input).
* The new host settings are read from ``A2E_HANDSHAKE_TIMEOUT``,
  ``A2E_MAX_CONNECTIONS``, ``A2E_MAX_CONNECTIONS_PER_PEER``, ``A2E_AUTH_FAILURE_DELAY``,
  ``A2E_PROC_ENV_KEYS``; the new ceilings from ``A2E_MAX_EXPRESSION_STEPS``,
  ``A2E_MAX_EXPRESSION_BYTES``, ``A2E_MAX_CHAIN_OUTPUT_BYTES``, ``A2E_MAX_TOTAL_NODES``.
* A connection over a connection ceiling is *refused*: the opening handshake fails
  (e.g. HTTP 503), or the connection is closed before any ``handshake/resp``, or it is
  never served within 5 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import anyio
from websockets.asyncio.client import connect

from tests.hostile.harness import (
    CHECKOUT_PATH,
    REPO,
    Case,
    CaseContext,
    Client,
    HostSpec,
    ceilings_named,
    poll,
)

__all__ = ["CASES", "CASES_BY_ID", "expect_invalid", "expect_limit", "mapping", "one_chain",
           "proc", "tool"]

MiB = 1024 * 1024
TOKEN = "T0k-hostile"


# ── building blocks ────────────────────────────────────────────────────────────


def tool(node_id: str, name: str, **fields: Any) -> dict[str, Any]:
    return {"node_id": node_id, "kind": "tool", "name": name, **fields}


def proc(node_id: str, argv: list[str], **input_fields: Any) -> dict[str, Any]:
    return {"node_id": node_id, "kind": "proc", "input": {"argv": argv, **input_fields}}


def mapping(items_path: str, template: dict[str, Any], **fields: Any) -> list[dict[str, Any]]:
    return [{"node_id": "m", "kind": "map", "items_path": items_path,
             "map_node": template["node_id"], **fields}, template]


def one_chain(
    nodes: list[dict[str, Any]] | Callable[[], list[dict[str, Any]]], **fields: Any
) -> Callable[[CaseContext], Awaitable[dict[str, Any]]]:
    """An action: one hostile session sends one chain and reads its answer. ``nodes`` and
    any field may be a function building it when the action runs (large requests are
    not kept alive by the table)."""

    async def action(ctx: CaseContext) -> dict[str, Any]:
        client = await ctx.connect()
        chain = nodes() if callable(nodes) else nodes
        body = {k: v() if callable(v) else v for k, v in fields.items()}
        frame = json.dumps({"type": "chain/req", "id": "hostile", "session_id": "",
                            "nodes": chain, "entry_node": chain[0]["node_id"], **body})
        return await client.run_raw("hostile", frame, wait=ctx.case.deadline)

    return action


def _resp(outcome: dict[str, Any]) -> dict[str, Any]:
    resp = outcome.get("resp")
    if resp is None:
        ended = [f"error {e.get('code')}: {e.get('message')}" for e in outcome.get("errors", [])]
        raise AssertionError(
            f"no chain/resp: the request ended with {'; '.join(ended) or 'nothing'} "
            "(every request must get exactly one chain/resp)"
        )
    assert isinstance(resp, dict)
    return resp


def _error(resp: dict[str, Any]) -> dict[str, Any]:
    assert resp.get("success") is False, (
        f"the chain succeeded (final_output {str(resp.get('final_output'))[:120]}), "
        "but the host should have refused it"
    )
    error = resp.get("error")
    assert isinstance(error, dict), f"a failed chain/resp without an error object: {resp}"
    return error


def expect_limit(*ceilings: str, node_id: str | None = None
                 ) -> Callable[[dict[str, Any]], None]:
    """The request fails with ``chain_limit`` naming one of ``ceilings`` (and, for a
    node-level budget, naming ``node_id``)."""

    def check(outcome: dict[str, Any]) -> None:
        error = _error(_resp(outcome))
        named = ceilings_named(error)
        assert error.get("code") == "chain_limit" and named & set(ceilings), (
            f"expected chain_limit naming {' or '.join(ceilings)}, got {error.get('code')} "
            f"naming {sorted(named) or 'no ceiling'}: {str(error.get('message'))[:200]}"
        )
        if node_id is not None:
            assert error.get("node_id") == node_id, (
                f"the budget should fail node {node_id!r}, but error.node_id is "
                f"{error.get('node_id')!r}"
            )

    return check


def expect_invalid(node_id: str, *fields: str) -> Callable[[dict[str, Any]], None]:
    """Validation refuses the request (``chain_invalid``, nothing run) with a problem
    naming ``node_id`` and a field starting with one of ``fields``."""

    def check(outcome: dict[str, Any]) -> None:
        resp = _resp(outcome)
        error = _error(resp)
        problems = error.get("details", {}).get("errors", [])
        assert error.get("code") == "chain_invalid" and resp.get("nodes_run") == 0, (
            f"expected a chain_invalid refusal before anything ran, got {error.get('code')} "
            f"with nodes_run {resp.get('nodes_run')}: {str(error.get('message'))[:200]}"
        )
        named = [p for p in problems if p.get("node_id") == node_id
                 and str(p.get("field", "")).startswith(fields)]
        assert named, (
            f"no problem names node {node_id!r} and field {' or '.join(fields)}: "
            f"{[(p.get('node_id'), p.get('field')) for p in problems[:5]]}"
        )

    return check


def _proc_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended: it only waits to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def _kill_escaped(pid: int) -> None:
    """SIGKILL the escaped ``sleep`` the case made, if it is still that process."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return
    if b"sleep" in cmdline:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# ── 12.1 expression value bomb ────────────────────────────────────────────────

BOMB = "|".join(["[@,@]"] * 40)
FLATTEN_BOMB = "length(" + "|".join(["[@,@]"] * 28 + ["[]"] * 27) + ")"

# ── 12.2 deeply nested expressions ───────────────────────────────────────────

DEPTH = 1000
NESTED = {
    "parens": "(" * DEPTH + "input" + ")" * DEPTH,
    "brackets": "[" * DEPTH + "input" + "]" * DEPTH,
    "not": "!" * DEPTH + "input",
    "functions": "abs(" * DEPTH + "`1`" + ")" * DEPTH,
    "literal": "`" + "[" * DEPTH + "]" * DEPTH + "`",
}


def _nested_case(shape: str, text: str) -> Case:
    return Case(
        id=f"12.2-nested-{shape}",
        item="12.2",
        title=f"input_map expression nested {DEPTH} deep ({shape})",
        host=SERVE,
        action=one_chain([tool("deep", "echo", input_map={"v": text})]),
        expect=expect_invalid("deep", "input_map.v"),
        budget_mb=0,
        budget_note="none (refused at validation)",
        deadline=10,
    )


# ── 12.3 quadratic validation ────────────────────────────────────────────────

WIDE = 10_000


def _misspelt_successors() -> list[dict[str, Any]]:
    return [tool(f"node{i:05d}", "echo", next_node=f"nodf{i:05d}") for i in range(WIDE)]


def _expect_unknown_successors(outcome: dict[str, Any]) -> None:
    resp = _resp(outcome)
    error = _error(resp)
    problems = error.get("details", {}).get("errors", [])
    assert error.get("code") == "chain_invalid" and resp.get("nodes_run") == 0, (
        f"expected chain_invalid, got {error.get('code')}: {str(error.get('message'))[:200]}"
    )
    assert any(p.get("field") == "next_node" and p.get("node_id") == "node00000"
               for p in problems), (
        f"no problem names node00000's next_node: {problems[:3]}"
    )
    assert outcome["elapsed"] <= 8, f"validation took {outcome['elapsed']:.1f} s (bound 8 s)"


# ── 12.4 ReDoS ───────────────────────────────────────────────────────────────

REDOS_TIMEOUT = 1


def _expect_regex_bounded(outcome: dict[str, Any]) -> None:
    resp = _resp(outcome)
    slack = 4.0
    assert outcome["elapsed"] <= REDOS_TIMEOUT + slack, (
        f"answered after {outcome['elapsed']:.1f} s; the chain timeout is {REDOS_TIMEOUT} s "
        f"(bound {REDOS_TIMEOUT + slack:g} s)"
    )
    if resp.get("success"):  # a linear-time engine: the pattern simply does not match
        assert resp["final_output"]["matches"] == [], resp["final_output"]
        return
    code = resp["error"]["code"]
    assert code in ("timeout", "chain_node_error", "chain_limit"), (
        f"expected the regex to be stopped (timeout, or the node failing on its time "
        f"budget), got {code}: {resp['error']['message'][:200]}"
    )


# ── 12.5 long expression over a big input ──────────────────────────────────────

LONG_ITEMS = 1_000_000
LONG_TIMEOUT = 1


def _expect_timeout_bounds_expression(outcome: dict[str, Any]) -> None:
    resp = _resp(outcome)
    assert not resp.get("success"), (
        f"the chain succeeded after {outcome['elapsed']:.1f} s although its timeout is "
        f"{LONG_TIMEOUT} s: the timeout does not bound expression evaluation"
    )
    code = resp["error"]["code"]
    assert code == "timeout", f"expected code timeout, got {code}: {resp['error']['message']}"
    assert outcome["elapsed"] <= LONG_TIMEOUT + 4, (
        f"the timeout answer came after {outcome['elapsed']:.1f} s (bound {LONG_TIMEOUT + 4} s)"
    )


# ── 12.6 chain-wide output budget ────────────────────────────────────────────


PARALLEL_MAPS = 12
ITEMS_PER_MAP = 7


def _parallel_maps() -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = []
    for k in range(PARALLEL_MAPS):
        nodes += [{"node_id": f"m{k}", "kind": "map", "items_path": "input.xs",
                   "map_node": f"t{k}"},
                  tool(f"t{k}", "big", input={"bytes": 1_000_000})]
    return nodes


async def _map_read_file(ctx: CaseContext) -> dict[str, Any]:
    rel, inside, _ = ctx.fresh_dirs("big")
    (inside / "big.txt").write_text("x" * 1_000_000, "utf-8")
    action = one_chain(mapping("input.xs", tool("r", "read_file",
                                                input={"path": f"{rel}/big.txt"})),
                       initial_input={"xs": list(range(300))})
    return await action(ctx)


# ── 12.7 skill fan-out ───────────────────────────────────────────────────────

FANOUT_LEVELS = 8
FANOUT_COPIES = 4


def _fanout_skills() -> dict[str, Any]:
    skills: dict[str, Any] = {}
    for level in range(FANOUT_LEVELS):
        name = f"s{level}"
        if level == FANOUT_LEVELS - 1:
            nodes = [tool("leaf", "echo", input={"leaf": True})]
        else:
            nodes = [{"node_id": f"c{k}", "kind": "skill", "name": f"s{level + 1}"}
                     for k in range(FANOUT_COPIES)]
        skills[name] = {"name": name, "description": f"fan-out level {level}",
                        "entry_node": nodes[0]["node_id"], "nodes": nodes}
    return skills


# ── 12.8 fs races and symlink loops ──────────────────────────────────────────

RACE_ITEMS = 1000


def _race_tree(inside: Path, outside: Path) -> None:
    """``inside/race.txt`` and ``inside/sub2/`` (real), each with a twin symlink to a file
    or directory under ``outside`` (``race_alt``, ``sub2_alt``) for the racer to swap in."""
    (outside / "secret.txt").write_text("SECRET outside the root\n", "utf-8")
    (outside / "dir2").mkdir()
    (outside / "dir2" / "f.txt").write_text("SECRET outside the root\n", "utf-8")
    (outside / "dir2" / "w.txt").write_text("ORIGINAL\n", "utf-8")
    (inside / "race.txt").write_text("inside\n", "utf-8")
    (inside / "race_alt").symlink_to(outside / "secret.txt")
    (inside / "sub2").mkdir()
    (inside / "sub2" / "f.txt").write_text("inside\n", "utf-8")
    (inside / "sub2" / "w.txt").write_text("inside\n", "utf-8")
    (inside / "sub2_alt").symlink_to(outside / "dir2")


async def _with_racer(
    ctx: CaseContext, run: Callable[[Client, str, Path], Awaitable[dict[str, Any]]]
) -> dict[str, Any]:
    """Build a fresh race tree, run ``run(client, its directory relative to the root, its
    outside directory)`` while ``tests/hostile/racer.py`` swaps the race names; stop the
    racer after."""
    rel, inside, outside = ctx.fresh_dirs("race")
    _race_tree(inside, outside)
    client = await ctx.connect()
    racer = await anyio.open_process(
        [sys.executable, "-m", "tests.hostile.racer", str(inside),
         "race.txt:race_alt", "sub2:sub2_alt"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO,
        env={**os.environ, "PYTHONPATH": CHECKOUT_PATH},
    )
    assert racer.stdin is not None and racer.stdout is not None
    try:
        with anyio.fail_after(10):
            assert (await racer.stdout.receive()).startswith(b"racing")
        outcome = await run(client, rel, outside)
    finally:
        with suppress(Exception):
            await racer.stdin.send(b"stop\n")
        with anyio.move_on_after(5):
            await racer.wait()
        if racer.returncode is None:
            racer.kill()
            await racer.wait()
        await racer.aclose()
    return outcome


async def _read_race(ctx: CaseContext) -> dict[str, Any]:
    async def run(client: Client, rel: str, outside: Path) -> dict[str, Any]:
        items = [f"{rel}/race.txt", f"{rel}/sub2/f.txt"] * (RACE_ITEMS // 2)
        nodes = mapping("input.paths", tool("r", "read_file", input_map={"path": "item"},
                                            on_error="skip"))
        outcome = await client.run("race", nodes, initial_input={"paths": items},
                                   wait=ctx.case.deadline)
        outputs = ((outcome["resp"] or {}).get("final_output")) or []
        texts = [o.get("text", "") for o in outputs if isinstance(o, dict)]
        outcome["inside_reads"] = sum("inside" in t for t in texts)
        outcome["outside_reads"] = sum("SECRET" in t for t in texts)
        outcome["summary"] = f"{outcome['outside_reads']} outside reads of {len(items)}"
        return outcome

    return await _with_racer(ctx, run)


def _expect_no_outside_read(outcome: dict[str, Any]) -> None:
    resp = _resp(outcome)
    assert resp.get("success"), f"the map of reads failed as a whole: {resp.get('error')}"
    assert outcome["outside_reads"] == 0, (
        f"{outcome['outside_reads']} of {RACE_ITEMS} reads returned the file outside the "
        "root: a path was checked, then opened again by name"
    )
    assert outcome["inside_reads"] > 0, "no read succeeded at all: the case proves nothing"


def _files_under(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` (relative path → text)."""
    return {str(p.relative_to(directory)): p.read_text("utf-8")
            for p in sorted(directory.rglob("*")) if p.is_file()}


async def _write_race(ctx: CaseContext) -> dict[str, Any]:
    async def run(client: Client, rel: str, outside: Path) -> dict[str, Any]:
        items = [f"{rel}/race.txt", f"{rel}/sub2/w.txt"] * (RACE_ITEMS // 2)
        nodes = mapping("input.paths", tool("w", "write_file", input={"text": "HOSTILE\n"},
                                            input_map={"path": "item"}, on_error="skip"))
        outcome = await client.run("race", nodes, initial_input={"paths": items},
                                   wait=ctx.case.deadline)
        outcome["outside_files"] = _files_under(outside)
        outcome["written"] = sum(o is not None for o in (outcome["resp"] or {}).get(
            "final_output") or [])
        changed = [k for k, v in outcome["outside_files"].items() if "HOSTILE" in v]
        outcome["summary"] = f"{len(changed)} outside files overwritten"
        return outcome

    return await _with_racer(ctx, run)


def _expect_no_outside_write(outcome: dict[str, Any]) -> None:
    resp = _resp(outcome)
    assert resp.get("success"), f"the map of writes failed as a whole: {resp.get('error')}"
    files = outcome["outside_files"]
    assert files == {"dir2/f.txt": "SECRET outside the root\n", "dir2/w.txt": "ORIGINAL\n",
                     "secret.txt": "SECRET outside the root\n"}, (
        f"write_file changed files outside the root: {files}"
    )
    assert outcome["written"] > 0, "no write succeeded at all: the case proves nothing"


async def _glob_loops(ctx: CaseContext) -> dict[str, Any]:
    rel, inside, _ = ctx.fresh_dirs("loops")
    (inside / "a.txt").write_text("a\n", "utf-8")
    (inside / "sub").mkdir()
    (inside / "sub" / "b.txt").write_text("b\n", "utf-8")
    (inside / "sub" / "self").symlink_to("self")  # a symlink to itself
    (inside / "sub" / "ping").symlink_to("pong")  # two that point at each other
    (inside / "sub" / "pong").symlink_to("ping")
    (inside / "sub" / "up").symlink_to("..")  # a directory loop back up
    client = await ctx.connect()
    outcome = await client.run("hostile", [tool("g", "glob",
                                                input={"pattern": "**/*", "path": rel})])
    outcome["rel"] = rel
    return outcome


def _expect_glob_survives_loops(outcome: dict[str, Any]) -> None:
    resp = _resp(outcome)
    assert resp.get("success"), (
        f"glob '**/*' failed because of a symlink loop under the root: {resp.get('error')}"
    )
    paths = resp["final_output"]["paths"]
    rel = outcome["rel"]
    assert f"{rel}/a.txt" in paths and f"{rel}/sub/b.txt" in paths, (
        f"glob missed real files: {paths[:20]}"
    )


# ── 12.9 proc allowlist ───────────────────────────────────────────────────────


PROC_FIELDS = ("input", "argv")
"""Where a proc refusal may point: ``input`` (as validation names a proc node's static
input today), ``input.argv…`` or ``argv…``."""


def _proc_refused(argv: list[str], control: list[str], files: dict[str, str]
                  ) -> Callable[[CaseContext], Awaitable[dict[str, Any]]]:
    """In a fresh directory holding ``files``, run ``argv`` (must be refused), then
    ``control`` (the allowlisted name: must run); record the directory's files after."""

    async def action(ctx: CaseContext) -> dict[str, Any]:
        rel, inside, _ = ctx.fresh_dirs("proc")
        for name, text in files.items():
            (inside / name).write_text(text, "utf-8")
        client = await ctx.connect()
        outcome = await client.run("hostile", [proc("p", argv, cwd=rel)])
        outcome["control"] = (await client.run("control", [proc("p", control, cwd=rel)]))[
            "resp"]
        outcome["files"] = sorted(p.name for p in inside.iterdir())
        return outcome

    return action


def _expect_proc_refused(files: list[str]) -> Callable[[dict[str, Any]], None]:
    invalid = expect_invalid("p", *PROC_FIELDS)

    def check(outcome: dict[str, Any]) -> None:
        invalid(outcome)
        assert outcome["files"] == files, (
            f"the refused command changed its directory: {outcome['files']}"
        )
        control = outcome["control"]
        assert control and control.get("success"), (
            f"the allowlisted executable under its own name no longer runs: {control}"
        )

    return check


HOSTILE_ENV = {
    "GCONV_PATH": "/tmp/hostile-gconv",
    "PYTHONPATH": "/tmp/hostile-py",
    "BASH_ENV": "/tmp/hostile-bash",
    "PERL5OPT": "-Mhostile",
    "NODE_OPTIONS": "--require=/tmp/hostile.js",
    "GIT_CONFIG_COUNT": "1",
}


async def _env_allowlist(ctx: CaseContext) -> dict[str, Any]:
    client = await ctx.connect()
    outcome = await client.run("hostile", [proc("p", ["printenv"], env=HOSTILE_ENV)])
    allowed = await client.run("allowed", [proc("p", ["printenv"], env={"LC_ALL": "C"})])
    outcome["allowed"] = allowed["resp"]
    return outcome


def _expect_env_allowlisted(outcome: dict[str, Any]) -> None:
    resp = _resp(outcome)
    stdout = ((resp.get("outputs") or {}).get("p") or {}).get("stdout", "")
    leaked = sorted(name for name in HOSTILE_ENV if f"{name}=" in stdout)
    assert not leaked, f"the child was given {leaked}, which proc_env_keys does not list"
    error = _error(resp)
    assert error.get("code") in ("chain_invalid", "chain_node_error"), (
        f"expected the env to be refused, got {error.get('code')}: {error.get('message')}"
    )
    text = json.dumps(error)
    assert any(name in text for name in HOSTILE_ENV), (
        f"the refusal does not name the variable: {error.get('message')}"
    )
    allowed = outcome["allowed"] or {}
    assert allowed.get("success") and "LC_ALL=C" in allowed["outputs"]["p"]["stdout"], (
        f"a variable listed in proc_env_keys (LC_ALL) was not passed: {allowed}"
    )


async def _nul_argv(ctx: CaseContext) -> dict[str, Any]:
    client = await ctx.connect()
    return await client.run("hostile", [proc("p", ["cat", "a\x00b"])])


# ── 12.10 setsid escapes ─────────────────────────────────────────────────────

ESCAPE = ["sh", "-c", "setsid sh -c 'echo $$ > escaped.pid; exec sleep 300' & sleep 300"]


def _escape_action(how: str) -> Callable[[CaseContext], Awaitable[dict[str, Any]]]:
    async def action(ctx: CaseContext) -> dict[str, Any]:
        rel, inside, _ = ctx.fresh_dirs("escape")
        pid_file = inside / "escaped.pid"
        client = await ctx.connect()
        started = time.monotonic()
        await client.send(json.dumps({
            "type": "chain/req", "id": "hostile", "session_id": "", "entry_node": "p",
            "nodes": [proc("p", ESCAPE, cwd=rel)], "timeout": 1 if how == "timeout" else 60,
        }))
        pid = 0
        try:
            if not await poll(lambda: pid_file.exists() and bool(pid_file.read_text().strip()),
                              10):
                raise AssertionError("the proc node never started its setsid child")
            pid = int(pid_file.read_text())
            outcome: dict[str, Any] = {"resp": None, "errors": []}
            if how == "cancel":
                await client.send({"type": "chain/cancel", "id": "c", "req_id": "hostile"})
            if how == "disconnect":
                await client.aclose()
            else:
                outcome = await client.collect("hostile", started)
            await poll(lambda: not _proc_alive(pid), 5, 0.05)
            outcome["escaped_alive"] = _proc_alive(pid)
            outcome["summary"] = (
                "setsid child survived" if outcome["escaped_alive"] else "setsid child killed"
            )
            return outcome
        finally:
            if pid:
                _kill_escaped(pid)

    return action


def _expect_tree_killed(code: str | None) -> Callable[[dict[str, Any]], None]:
    def check(outcome: dict[str, Any]) -> None:
        assert not outcome["escaped_alive"], (
            "a child that called setsid survived the node's end: kill the whole tree the "
            "node created, not only its process group"
        )
        if code is not None:
            error = _error(_resp(outcome))
            assert error.get("code") == code, f"expected {code}, got {error.get('code')}"

    return check


# ── 12.11 connections before the handshake ───────────────────────────────────

PEERS = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
IDLE = 8  # two per peer: within the CONN host's ceilings (4 per peer, 10 in all)


async def _refused(url: str, local_host: str, token: str = TOKEN) -> bool:
    """Whether a new connection from ``local_host`` is refused (see the module docstring);
    an accepted one is closed again."""
    try:
        with anyio.fail_after(5):
            ws = await connect(url, local_addr=(local_host, 0), ping_interval=None,
                               open_timeout=5)
    except Exception:
        return True
    try:
        with anyio.fail_after(5):
            await ws.send(json.dumps({"type": "handshake/req", "id": "h", "auth_token": token,
                                      "agent_caps": ["chains"]}))
            resp = json.loads(await ws.recv())
        return not resp.get("ok")
    except TimeoutError:
        return True
    except Exception:
        return True
    finally:
        with anyio.move_on_after(2):
            await ws.close()
        ws.transport.abort()


async def _idle_connections(ctx: CaseContext) -> dict[str, Any]:
    timeout = float(ctx.case.env(ctx.mode)["A2E_HANDSHAKE_TIMEOUT"])
    idle = []
    for n in range(IDLE):
        idle.append(await connect(ctx.url, local_addr=(PEERS[n % len(PEERS)], 0),
                                  ping_interval=None))
    opened = time.monotonic()
    closed_after: list[float] = []

    async def watch(ws: Any) -> None:
        await ws.wait_closed()
        closed_after.append(time.monotonic() - opened)

    try:
        with anyio.move_on_after(timeout + 5):
            async with anyio.create_task_group() as tg:
                for ws in idle:
                    tg.start_soon(watch, ws)
    finally:
        for ws in idle:
            ws.transport.abort()
    still_open = len(idle) - len(closed_after)
    return {"still_open": still_open, "latest_close": max(closed_after, default=None),
            "timeout": timeout, "opened": len(idle),
            "summary": f"{still_open} of {len(idle)} idle connections left open"}


def _expect_idle_closed(outcome: dict[str, Any]) -> None:
    assert outcome["still_open"] == 0, (
        f"{outcome['still_open']} of {outcome['opened']} connections that never sent a "
        f"handshake were still open {outcome['timeout'] + 5:g} s later (handshake_timeout "
        f"{outcome['timeout']:g} s)"
    )


async def _connection_ceilings(ctx: CaseContext) -> dict[str, Any]:
    env = ctx.case.env(ctx.mode)
    per_peer = int(env["A2E_MAX_CONNECTIONS_PER_PEER"])
    total = int(env["A2E_MAX_CONNECTIONS"])
    outcome: dict[str, Any] = {}
    held: list[Client] = []
    try:
        for _ in range(per_peer):  # one peer up to its ceiling
            held.append(await ctx.connect(local_host=PEERS[0]))
        outcome["peer_over_refused"] = await _refused(ctx.url, PEERS[0])
        # other peers fill the host to its total (the probe holds one connection)
        while len(held) + 1 < total:
            peer = PEERS[1 + (len(held) - per_peer) // per_peer]
            held.append(await ctx.connect(local_host=peer))
        outcome["total_over_refused"] = await _refused(ctx.url, PEERS[-1])
        for client in held[per_peer:]:
            await client.aclose()
        held = held[:per_peer]
        served = False
        for _ in range(30):  # freed places are served again (closing is asynchronous)
            if not await _refused(ctx.url, "127.0.0.1"):
                served = True
                break
            await anyio.sleep(0.1)
        outcome["served_after_close"] = served
    finally:
        for client in held:
            await client.aclose()
    outcome["summary"] = ", ".join(f"{k}={v}" for k, v in outcome.items())
    return outcome


def _expect_ceilings(outcome: dict[str, Any]) -> None:
    assert outcome["peer_over_refused"], (
        "a connection over max_connections_per_peer from the same address was served"
    )
    assert outcome["total_over_refused"], "a connection over max_connections was served"
    assert outcome["served_after_close"], (
        "after connections closed, a new client was still refused"
    )


async def _ping_before_auth(ctx: CaseContext) -> dict[str, Any]:
    ws = await connect(ctx.url, ping_interval=None)
    try:
        await ws.send(json.dumps({"type": "ping", "id": "early"}))
        with anyio.move_on_after(5):
            try:
                first = json.loads(await ws.recv())
            except Exception as exc:
                first = {"closed": f"{type(exc).__name__}"}
            summary = " ".join(str(first.get(k, "")) for k in ("type", "code", "closed"))
            return {"first": first, "summary": summary.strip()}
        return {"first": None, "summary": "no answer"}
    finally:
        ws.transport.abort()


def _expect_no_pong_before_auth(outcome: dict[str, Any]) -> None:
    first = outcome["first"]
    assert first is None or first.get("type") != "pong", (
        "a ping before an authenticated handshake was answered with pong"
    )


async def _token_guesses(ctx: CaseContext) -> dict[str, Any]:
    delay = float(ctx.case.env(ctx.mode).get("A2E_AUTH_FAILURE_DELAY", "1.0"))

    async def guess(n: int, out: list[tuple[float, str]]) -> None:
        ws = await connect(ctx.url, local_addr=(PEERS[n % len(PEERS)], 0), ping_interval=None)
        try:
            started = time.monotonic()
            await ws.send(json.dumps({"type": "handshake/req", "id": "h",
                                      "auth_token": f"guess-{n}", "agent_caps": ["chains"]}))
            resp = json.loads(await ws.recv())
            out.append((time.monotonic() - started, str(resp.get("reason"))))
        finally:
            ws.transport.abort()

    sequential: list[tuple[float, str]] = []
    for n in range(2):
        await guess(n, sequential)
    parallel: list[tuple[float, str]] = []
    async with anyio.create_task_group() as tg:
        for n in range(len(PEERS)):
            tg.start_soon(guess, n, parallel)
    times = [t for t, _ in sequential + parallel]
    return {"delay": delay, "guesses": sequential + parallel,
            "summary": f"fastest refusal {min(times):.2f} s (delay {delay:g} s)"}


def _expect_guesses_throttled(outcome: dict[str, Any]) -> None:
    delay = outcome["delay"]
    reasons = {reason for _, reason in outcome["guesses"]}
    assert reasons == {"auth_failed"}, f"wrong tokens were not refused as auth_failed: {reasons}"
    fastest = min(t for t, _ in outcome["guesses"])
    assert fastest >= 0.9 * delay, (
        f"a wrong token was refused after {fastest:.3f} s; auth_failure_delay is {delay:g} s"
    )


# ── 12.12 spurious busy ───────────────────────────────────────────────────────

SESSIONS = 4
STUBBORN = ["sh", "-c", "trap '' TERM; sleep 30"]  # ignores SIGTERM: killed after a grace


async def _back_to_back(ctx: CaseContext) -> dict[str, Any]:
    """Each session (max_parallel 1) runs a chain that times out while its node is still
    being killed (the response is sent before that node has stopped, PROTOCOL.md §5
    Timeout), then sends its next chain the moment that response arrives."""
    busy: list[str] = []
    wrong: list[Any] = []

    async def session(k: int) -> None:
        client = await ctx.connect(max_parallel=1)
        first = await client.run(f"slow{k}", [proc("p", STUBBORN)], timeout=1)
        if first["resp"] is None or first["resp"]["error"]["code"] != "timeout":
            wrong.append(first["resp"] or first["errors"])
        reply = await client.run(f"next{k}", [tool("e", "echo", input={"k": k})])
        busy.extend(e["code"] for e in reply["errors"])
        if reply["resp"] is not None and reply["resp"].get("final_output") != {"k": k}:
            wrong.append(reply["resp"])

    async with anyio.create_task_group() as tg:
        for k in range(SESSIONS):
            tg.start_soon(session, k)
    return {"busy": busy, "wrong": wrong, "summary": f"{len(busy)} busy of {SESSIONS}"}


def _expect_no_busy(outcome: dict[str, Any]) -> None:
    assert not outcome["wrong"], f"the chains did not end as set up: {outcome['wrong'][:2]}"
    assert not outcome["busy"], (
        f"{len(outcome['busy'])} of {SESSIONS} chains sent the moment the previous "
        f"chain/resp arrived (max_parallel 1) were refused: {sorted(set(outcome['busy']))}; "
        "a chain must be out of the count before its response is written"
    )


# ── 12.13 logging must never stall the protocol ──────────────────────────────

LOGGED_CHAINS = 250


async def _many_logged_chains(ctx: CaseContext) -> dict[str, Any]:
    client = await ctx.connect()
    answered = 0
    for n in range(LOGGED_CHAINS):
        reply = await client.run(f"l{n}", [tool("e", "echo", input={"n": n})], wait=5)
        if reply["resp"] and reply["resp"]["success"]:
            answered += 1
    return {"answered": answered, "summary": f"{answered} of {LOGGED_CHAINS} answered"}


def _expect_all_answered(outcome: dict[str, Any]) -> None:
    assert outcome["answered"] == LOGGED_CHAINS, (
        f"only {outcome['answered']} of {LOGGED_CHAINS} chains were answered"
    )


# ── the table ────────────────────────────────────────────────────────────────

# Cases that bring no files of their own share a host when they ask for the same one
# (tests/hostile/harness.py HostPool); so the rows of one item ask for one host.
SERVE = HostSpec()
FS = HostSpec(tools=("fs",))
PROC = HostSpec(allow_proc=("sh", "rbash", "xzcat", "cat", "printenv"), caps=("chains", "proc"),
                env={"A2E_PROC_ENV_KEYS": "LC_ALL"})
CONN = HostSpec(auth_token=TOKEN, env={
    "A2E_HANDSHAKE_TIMEOUT": "1",
    "A2E_MAX_CONNECTIONS_PER_PEER": "4",
    "A2E_MAX_CONNECTIONS": "10",
    "A2E_AUTH_FAILURE_DELAY": "0.3",
})

CASES: list[Case] = [
    Case(
        id="12.1-value-bomb",
        item="12.1",
        title="input_map `[@,@]|` × 40: 2^40 logical values from shared references",
        host=SERVE,
        action=one_chain([tool("bomb", "echo", input_map={"v": BOMB})]),
        expect=expect_limit("max_expression_bytes", node_id="bomb"),
        budget_mb=8,
        budget_note="max_expression_bytes 8 MiB",
    ),
    Case(
        id="12.1-flatten-freeze",
        item="12.1",
        title="length(`[@,@]|` × 28 | `[]|` × 27): a 2^28-item flatten",
        host=SERVE,
        # echo takes any value: count would refuse length(...) (an integer) before the run
        action=one_chain([tool("bomb", "echo", input_map={"items": FLATTEN_BOMB})]),
        expect=expect_limit("max_expression_bytes", "max_expression_steps", node_id="bomb"),
        budget_mb=8,
        budget_note="max_expression_bytes 8 MiB",
    ),
    *[_nested_case(shape, text) for shape, text in NESTED.items()],
    Case(
        id="12.3-misspelt-successors",
        item="12.3",
        title=f"{WIDE:,} nodes whose next_node names a missing nodfNNNNN id",
        host=SERVE,
        action=one_chain(_misspelt_successors),
        expect=_expect_unknown_successors,
        budget_mb=50,
        budget_note="the 10,000-node request and its 10,000 problems",
        deadline=12,
    ),
    Case(
        id="12.4-redos",
        item="12.4",
        title='regex_findall "(a+)+$" over "a"×27+"!", chain timeout 1 s',
        host=HostSpec(tools=("text",)),
        action=one_chain([tool("rx", "regex_findall",
                               input={"text": "a" * 27 + "!", "pattern": "(a+)+$"})],
                         timeout=REDOS_TIMEOUT),
        expect=_expect_regex_bounded,
        budget_mb=0,
        budget_note="none",
        deadline=10,
    ),
    Case(
        id="12.5-long-expression",
        item="12.5",
        title="length(input.items[?to_string(@)=='x']) over 1M items, chain timeout 1 s",
        # steps raised far past the work, so that the chain timeout has to stop it
        host=HostSpec(env={"A2E_MAX_EXPRESSION_STEPS": "1000000000"}),
        action=one_chain([tool("n", "echo", input_map={
            "n": "length(input.items[?to_string(@)=='x'])"})],
            initial_input=lambda: {"items": list(range(LONG_ITEMS))}, timeout=LONG_TIMEOUT),
        expect=_expect_timeout_bounds_expression,
        budget_mb=80,
        budget_note="the request: 1M ints (7 MB of JSON)",
        deadline=10,
    ),
    Case(
        id="12.6-map-big-outputs",
        item="12.6",
        title="map of 200 items, each a 1 MB output",
        host=SERVE,
        action=one_chain(mapping("input.xs", tool("t", "big", input={"bytes": 1_000_000})),
                         initial_input={"xs": list(range(200))}),
        # the map's own output (the list of its items' outputs) reaches max_output_bytes
        # before the chain's budget: either refusal, as items arrive, bounds the memory
        expect=expect_limit("max_output_bytes", "max_chain_output_bytes"),
        budget_mb=8,
        budget_note="max_output_bytes 8 MiB (the map's output)",
        deadline=15,
    ),
    Case(
        id="12.6-parallel-maps",
        item="12.6",
        title=f"{PARALLEL_MAPS} maps at once, each of {ITEMS_PER_MAP} items of 1 MB "
              "(each map under max_output_bytes, together over the chain's budget)",
        host=SERVE,
        action=one_chain(_parallel_maps(), initial_input={"xs": list(range(ITEMS_PER_MAP))}),
        expect=expect_limit("max_chain_output_bytes"),
        # what the request keeps is bounded by the budget; what its items build while in
        # flight is not known before they finish: up to max_map_concurrency (64) × 1 MB
        budget_mb=16 + 64,
        budget_note="max_chain_output_bytes 16 MiB kept + 64 items × 1 MB in flight "
                    "(default ceilings, in the test too)",
        deadline=15,
    ),
    Case(
        id="12.6-map-read-file",
        item="12.6",
        title="map of 300 items, each read_file of a 1 MB file",
        host=FS,
        action=_map_read_file,
        expect=expect_limit("max_output_bytes", "max_chain_output_bytes"),
        # the map's output is capped; the files its 64 items in flight read are not
        # known before they return
        budget_mb=8 + 64,
        budget_note="max_output_bytes 8 MiB (the map's output) + 64 items × 1 MB in flight",
        deadline=15,
    ),
    Case(
        id="12.7-skill-fanout",
        item="12.7",
        title=f"skills s0…s{FANOUT_LEVELS - 1}, each running {FANOUT_COPIES} copies of the next "
              f"({FANOUT_COPIES ** (FANOUT_LEVELS - 1):,} leaves), max_total_nodes 2,000",
        # Under the default max_total_nodes (250,000) its 21,845 node runs are allowed; on
        # a loaded 2-core machine they take over a minute, so both modes lower the ceiling.
        host=HostSpec(skills=_fanout_skills(), caps=("chains", "skill"),
                      env={"A2E_MAX_TOTAL_NODES": "2000"}),
        action=one_chain([{"node_id": "top", "kind": "skill", "name": "s0"}], timeout=60),
        expect=expect_limit("max_total_nodes"),
        budget_mb=0,
        budget_note="none (2,000 node runs)",
        deadline=20,
    ),
    Case(
        id="12.8-read-race",
        item="12.8",
        title=f"{RACE_ITEMS} read_file while race.txt and sub2/ swap with symlinks outside",
        host=FS,
        action=_read_race,
        expect=_expect_no_outside_read,
        budget_mb=0,
        budget_note="none",
        deadline=30,
    ),
    Case(
        id="12.8-write-race",
        item="12.8",
        title=f"{RACE_ITEMS} write_file while race.txt and sub2/ swap with symlinks outside",
        host=FS,
        action=_write_race,
        expect=_expect_no_outside_write,
        budget_mb=0,
        budget_note="none",
        deadline=30,
    ),
    Case(
        id="12.8-glob-symlink-loops",
        item="12.8",
        title="glob '**/*' under a root holding symlink loops",
        host=FS,
        action=_glob_loops,
        expect=_expect_glob_survives_loops,
        budget_mb=0,
        budget_note="none",
    ),
    Case(
        id="12.9-rbash-runs-bash",
        item="12.9",
        title="--allow-proc rbash; argv /usr/bin/bash -c …",
        host=PROC,
        action=_proc_refused(["/usr/bin/bash", "-c", "echo escaped > escaped.txt"],
                             ["rbash", "-c", "echo ok"], {}),
        expect=_expect_proc_refused([]),
        budget_mb=0,
        budget_note="none",
    ),
    Case(
        id="12.9-xzcat-runs-xz",
        item="12.9",
        title="--allow-proc xzcat; argv /usr/bin/xz -z victim.txt",
        host=PROC,
        action=_proc_refused(["/usr/bin/xz", "-z", "victim.txt"], ["xzcat", "--version"],
                             {"victim.txt": "victim\n"}),
        expect=_expect_proc_refused(["victim.txt"]),
        budget_mb=0,
        budget_note="none",
    ),
    Case(
        id="12.9-nul-in-argv",
        item="12.9",
        title='argv ["cat", "a\\u0000b"]',
        host=PROC,
        action=_nul_argv,
        expect=expect_invalid("p", *PROC_FIELDS),
        budget_mb=0,
        budget_note="none",
    ),
    Case(
        id="12.9-env-allowlist",
        item="12.9",
        title="proc env sets GCONV_PATH, PYTHONPATH, BASH_ENV, PERL5OPT, NODE_OPTIONS, "
              "GIT_CONFIG_COUNT (proc_env_keys = LC_ALL)",
        host=PROC,
        action=_env_allowlist,
        expect=_expect_env_allowlisted,
        budget_mb=0,
        budget_note="none",
    ),
    *[
        Case(
            id=f"12.10-setsid-{how}",
            item="12.10",
            title=f"sh -c 'setsid sleep 300 & sleep 300', ended by {how}",
            host=PROC,
            action=_escape_action(how),
            expect=_expect_tree_killed(code),
            budget_mb=0,
            budget_note="none",
            deadline=20,
        )
        for how, code in (("timeout", "timeout"), ("cancel", "cancelled"), ("disconnect", None))
    ],
    Case(
        id="12.11-idle-before-handshake",
        item="12.11",
        title=f"{IDLE} connections from {len(PEERS)} peers that never send a handshake",
        host=CONN,
        action=_idle_connections,
        expect=_expect_idle_closed,
        budget_mb=0,
        budget_note="none",
        deadline=15,
    ),
    Case(
        id="12.11-connection-ceilings",
        item="12.11",
        title="connections over max_connections_per_peer (4) and max_connections (10)",
        host=CONN,
        action=_connection_ceilings,
        expect=_expect_ceilings,
        budget_mb=0,
        budget_note="none",
        deadline=30,
    ),
    Case(
        id="12.11-ping-before-auth",
        item="12.11",
        title="a ping before the handshake on a host with an auth token",
        host=CONN,
        action=_ping_before_auth,
        expect=_expect_no_pong_before_auth,
        budget_mb=0,
        budget_note="none",
    ),
    Case(
        id="12.11-token-guesses",
        item="12.11",
        title="6 wrong auth tokens, 2 in a row then 4 at once from 4 peers",
        host=CONN,
        action=_token_guesses,
        expect=_expect_guesses_throttled,
        bench_env={"A2E_AUTH_FAILURE_DELAY": "1.0"},  # the default
        budget_mb=0,
        budget_note="none",
        deadline=30,
    ),
    Case(
        id="12.12-back-to-back",
        item="12.12",
        title=f"{SESSIONS} sessions (max_parallel 1) send their next chain the moment a "
              "timed-out chain's response arrives, its node still being killed",
        host=PROC,
        action=_back_to_back,
        expect=_expect_no_busy,
        budget_mb=0,
        budget_note="none",
        deadline=20,
    ),
    Case(
        id="12.13-unread-stderr-serve",
        item="12.13",
        title=f"{LOGGED_CHAINS} chains logged at INFO to a stderr pipe nobody reads (serve)",
        host=HostSpec(read_stderr=False, env={"A2E_LOG_LEVEL": "info"}),
        action=_many_logged_chains,
        expect=_expect_all_answered,
        budget_mb=0,
        budget_note="none",
        deadline=30,
    ),
    Case(
        id="12.13-unread-stderr-stdio",
        item="12.13",
        title=f"{LOGGED_CHAINS} chains on stdio, default logging, stderr never read",
        host=HostSpec(transport="stdio", read_stderr=False),
        action=_many_logged_chains,
        expect=_expect_all_answered,
        budget_mb=0,
        budget_note="none",
        deadline=30,
    ),
]

CASES_BY_ID: dict[str, Case] = {case.id: case for case in CASES}
assert len(CASES_BY_ID) == len(CASES), "case ids must be unique"
