"""The hostile-suite harness: a real host process, a hostile client, a probe session
beside it, the host's peak memory, and a check that the host still serves afterwards.

Shared by the suite (``tests/hostile/test_hostile.py``) and the benchmark
(``python -m bench.isolation``); the cases themselves are in ``tests/hostile/cases.py``.

Theory of operation, per case (:func:`run_case`):

1. A work directory holds ``root/`` (the host's ``--root``), ``outside/`` (a sibling
   the host must never reach) and ``skills/`` (the declarative skills); the real CLI is
   spawned: ``a2e-host serve --port 0`` for
   most cases (a second session then shares the host process over its own connection),
   ``a2e-host stdio`` where the stdio transport is the point. Ceilings and host settings
   come from ``A2E_*`` variables; a name the host does not know is ignored by it, so
   every case starts on any branch.
2. The **probe** session pings every 20 ms, one ping at a time, for as long as the
   hostile action runs. Over WebSocket it is a separate process on its own connection
   (``tests/hostile/probe.py``), so the hostile client's own work never delays it; a
   stdio host has one connection, so there a thread of this process pings on the
   hostile client's pipe.
3. The hostile **action** (an async function of the case) runs under the case's
   deadline. A watchdog thread samples the host's RSS every 10 ms and kills it (SIGKILL,
   by pid) once it is :data:`KILL_MARGIN_MB` past the case's bound: a host that would
   eat the machine is stopped and reported, never left to swap a shared box to a halt.
4. The baseline is the host's ``VmRSS`` just before the action, when its peak
   (``VmHWM``) is also reset to it (``/proc/<pid>/clear_refs``); the peak is read when
   the action ends.
5. **After** the action, a fresh session runs a one-node chain: the host must answer it.

Host processes and probes are driven by threads and blocking calls, never by the event
loop of the test, so a :class:`HostPool` may keep a serving host (and its probe) for
the next case that asks for the same one, when it came out of the last case healthy.

Units: seconds for times, MiB (2**20 bytes) for memory figures, ms for ping latencies.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

import anyio
import anyio.to_thread
from websockets.asyncio.client import ClientConnection, connect

__all__ = [
    "REPO", "CHECKOUT_PATH", "HostSpec", "Case", "CaseContext", "CaseResult", "Client", "HostPool",
    "ProbeStats", "run_case", "ceilings_named", "percentile", "poll", "describe",
]

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "a2e_host"]

START_TIMEOUT = 20.0
"""Seconds a host (or the probe) may take to start on a loaded machine."""

RECV_TIMEOUT = 15.0
"""Default seconds a hostile client waits for its next frame."""

PING_TIMEOUT = 5.0
"""Seconds after which a probe ping counts as unanswered."""

PROBE_MAX_MS = 1500.0
"""The suite's bound on any one probe ping (a loaded 2-core CI box; the benchmark's goal
is a p99 of 50 ms)."""

RSS_CONSTANT_MB = 100.0
"""What a case may add to the host's RSS beyond its budget (interpreter, allocator, the
request itself): issue 12's "RSS ≤ budget + 100 MB"."""

KILL_MARGIN_MB = 400.0
"""MiB over a case's RSS bound at which the watchdog kills the host."""

AFTER_TIMEOUT = 10.0
"""Seconds the after-case chain may take."""

Mode = Literal["test", "bench"]


# ── the table's types ──────────────────────────────────────────────────────────


@dataclass(frozen=True)
class HostSpec:
    """How to start the host for a case.

    Attributes:
        transport: ``serve`` (WebSocket, probe on its own connection) or ``stdio``.
        tools: tool packs (``--tools``); ``conformance`` is always added (the after-case
            chain uses its ``echo``).
        allow_proc: executables for proc nodes (``--allow-proc``).
        skills: declarative skills, name → the skill file's body (written as JSON into
            ``skills/``, passed as ``--skills``).
        auth_token: the host's auth token; every session of the harness presents it.
        env: ``A2E_*`` settings (ceilings, host configuration) for every mode.
        caps: ``agent_caps`` of the hostile sessions.
        read_stderr: False leaves the host's stderr pipe unread once the host is up (the
            way an SDK that pipes stderr and never reads it does).
    """

    transport: Literal["serve", "stdio"] = "serve"
    tools: tuple[str, ...] = ()
    allow_proc: tuple[str, ...] = ()
    skills: Mapping[str, Any] = field(default_factory=dict)
    auth_token: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    caps: tuple[str, ...] = ("chains",)
    read_stderr: bool = True


Action = Callable[["CaseContext"], Awaitable[dict[str, Any]]]
Expectation = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Case:
    """One hostile case of issue 12.

    Attributes:
        id: a stable name, e.g. ``12.1-value-bomb``.
        item: the issue item it reproduces, e.g. ``12.1``.
        title: one line: what the hostile request does.
        host: how to start the host.
        action: the hostile request(s); returns an outcome dict for ``expect``, with a
            short ``"summary"`` string in it for the benchmark's table when the
            ``chain/resp`` alone does not say what happened.
        expect: raises AssertionError (one sentence: what was wanted, what came) when the
            outcome is not the agreed behaviour.
        budget_mb: the memory the case may legitimately take (its ceiling in MiB); the
            host's peak RSS may exceed its baseline by at most this plus
            :data:`RSS_CONSTANT_MB`.
        budget_note: what the budget is, for the benchmark's table (e.g. the ceiling).
        deadline: seconds the action may take before it is stopped as unanswered.
        test_env / bench_env: ``A2E_*`` settings for one mode only (the suite lowers
            ceilings to stay fast; the benchmark keeps the defaults where sensible).
        test_budget_mb: the budget under ``test_env`` when it differs.
    """

    id: str
    item: str
    title: str
    host: HostSpec
    action: Action
    expect: Expectation
    budget_mb: float
    budget_note: str
    deadline: float = 15.0
    test_env: Mapping[str, str] = field(default_factory=dict)
    bench_env: Mapping[str, str] = field(default_factory=dict)
    test_budget_mb: float | None = None

    def env(self, mode: Mode) -> dict[str, str]:
        """The ``A2E_*`` settings of the host in ``mode``."""
        extra = self.test_env if mode == "test" else self.bench_env
        return {**self.host.env, **extra}

    def budget(self, mode: Mode) -> float:
        """The memory budget (MiB) in ``mode``."""
        if mode == "test" and self.test_budget_mb is not None:
            return self.test_budget_mb
        return self.budget_mb


async def poll(predicate: Callable[[], bool], seconds: float, interval: float = 0.02) -> bool:
    """Check ``predicate`` every ``interval`` seconds for at most ``seconds``; whether it
    came true. For state outside this process (a file another process writes, another
    process's life), which no event of ours can signal."""
    deadline = time.monotonic() + seconds
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        await anyio.sleep(interval)


# ── clients ────────────────────────────────────────────────────────────────────


class Client:
    """One hostile session: send frames, receive JSON messages, run chains."""

    async def send(self, message: dict[str, Any] | str) -> None:
        raise NotImplementedError

    async def recv(self, wait: float = RECV_TIMEOUT) -> dict[str, Any]:
        """The next message; raises TimeoutError after ``wait`` seconds."""
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    async def handshake(
        self, token: str = "", caps: tuple[str, ...] = ("chains",), **limits: int
    ) -> dict[str, Any]:
        """Send ``handshake/req`` and return the ``handshake/resp`` (ok or not)."""
        hello: dict[str, Any] = {"type": "handshake/req", "id": "h", "agent_id": "hostile",
                                 "agent_caps": list(caps)}
        if token:
            hello["auth_token"] = token
        if limits:
            hello["limits"] = limits
        await self.send(hello)
        return await self.recv()

    async def run(
        self,
        req_id: str,
        nodes: list[dict[str, Any]],
        *,
        wait: float = RECV_TIMEOUT,
        **fields: Any,
    ) -> dict[str, Any]:
        """Send one ``chain/req`` and read until its ``chain/resp``.

        Args:
            req_id: the request id.
            nodes: the chain's nodes; ``entry_node`` defaults to the first one's id.
            wait: seconds to wait for each next frame.
            fields: more ``chain/req`` fields (``initial_input``, ``timeout``…).

        Returns:
            ``{"resp": the chain/resp or None, "events": int, "errors": [error frames for
            this req_id], "elapsed": seconds from send to the end}``. ``resp`` is None when
            an ``error`` frame ended the request instead (e.g. ``runtime_error``).

        Raises:
            TimeoutError: no frame for ``wait`` seconds.
        """
        request = {"type": "chain/req", "id": req_id, "session_id": "", "nodes": nodes,
                   "entry_node": nodes[0]["node_id"], **fields}
        return await self.run_raw(req_id, json.dumps(request), wait=wait)

    async def run_raw(self, req_id: str, frame: str, *, wait: float = RECV_TIMEOUT
                      ) -> dict[str, Any]:
        """:meth:`run` for a request already encoded."""
        started = time.monotonic()
        await self.send(frame)
        return await self.collect(req_id, started, wait=wait)

    async def collect(self, req_id: str, started: float, *, wait: float = RECV_TIMEOUT
                      ) -> dict[str, Any]:
        """Read until ``req_id``'s ``chain/resp`` (or an ``error`` frame for it)."""
        events = 0
        errors: list[dict[str, Any]] = []
        while True:
            message = await self.recv(wait)
            kind = message.get("type")
            if kind == "chain/event" and message.get("req_id") == req_id:
                events += 1
            elif kind == "chain/resp" and message.get("req_id") == req_id:
                return {"resp": message, "events": events, "errors": errors,
                        "elapsed": time.monotonic() - started}
            elif kind == "error" and message.get("req_id") == req_id:
                errors.append(message)
                return {"resp": None, "events": events, "errors": errors,
                        "elapsed": time.monotonic() - started}


class WsClient(Client):
    """A hostile session on its own WebSocket connection."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    async def send(self, message: dict[str, Any] | str) -> None:
        await self.ws.send(json.dumps(message) if isinstance(message, dict) else message)

    async def recv(self, wait: float = RECV_TIMEOUT) -> dict[str, Any]:
        try:
            with anyio.fail_after(wait):
                data = await self.ws.recv()
        except TimeoutError:
            raise TimeoutError(f"no message from the host for {wait:g} s") from None
        message = json.loads(data)
        assert isinstance(message, dict), data[:200]
        return message

    async def aclose(self) -> None:
        with anyio.move_on_after(2):
            await self.ws.close()
        self.ws.transport.abort()


class StdioLink:
    """The one connection of a stdio host, read by a thread: pongs to the probe's ids
    (``probe-…``) wake the probe, every other message is queued for the hostile client."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.stdin = process.stdin
        self.stdout = process.stdout
        self.incoming: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.pongs: dict[str, threading.Event] = {}
        self.lock = threading.Lock()
        self.closed = threading.Event()
        threading.Thread(target=self._read, name="stdio-link", daemon=True).start()

    def write(self, data: bytes) -> None:
        """Write ``data`` (blocks while the host does not read its stdin).

        Raises:
            OSError: the pipe is broken (the host is gone).
        """
        with self.lock:
            self.stdin.write(data)
            self.stdin.flush()

    def _read(self) -> None:
        try:
            for line in self.stdout:
                message = json.loads(line)
                req = message.get("req_id", "")
                if message.get("type") == "pong" and req.startswith("probe-"):
                    event = self.pongs.get(req)
                    if event is not None:
                        event.set()
                    continue
                self.incoming.put(message)
        except (OSError, ValueError):
            pass
        finally:
            self.closed.set()
            self.incoming.put(None)
            for event in list(self.pongs.values()):
                event.set()


class StdioClient(Client):
    """The hostile side of a :class:`StdioLink`."""

    def __init__(self, link: StdioLink) -> None:
        self.link = link

    async def send(self, message: dict[str, Any] | str) -> None:
        text = json.dumps(message) if isinstance(message, dict) else message
        await anyio.to_thread.run_sync(self.link.write, text.encode() + b"\n",
                                       abandon_on_cancel=True)

    async def recv(self, wait: float = RECV_TIMEOUT) -> dict[str, Any]:
        def get() -> dict[str, Any] | None:
            try:
                return self.link.incoming.get(timeout=wait)
            except queue.Empty:
                raise TimeoutError(f"no message from the stdio host for {wait:g} s") from None

        message = await anyio.to_thread.run_sync(get, abandon_on_cancel=True)
        if message is None:
            self.link.incoming.put(None)
            raise EOFError("the stdio host closed its stdout")
        return message

    async def aclose(self) -> None:
        pass


# ── the host process ───────────────────────────────────────────────────────────


def _status_kib(pid: int, key: str) -> int:
    """``VmRSS`` / ``VmHWM`` of ``pid`` in KiB; 0 when the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return 0
    return 0


def _host_argv(spec: HostSpec, workdir: Path) -> list[str]:
    argv = [*CLI, spec.transport]
    if spec.transport == "serve":
        argv += ["--port", "0"]
    for pack in dict.fromkeys(("conformance", *spec.tools)):
        argv += ["--tools", pack]
    for name in spec.allow_proc:
        argv += ["--allow-proc", name]
    argv += ["--root", str(workdir / "root")]
    if spec.skills:
        argv += ["--skills", str(workdir / "skills")]
    return argv


CHECKOUT_PATH = os.pathsep.join([str(REPO), str(REPO / "plugins")])
"""``PYTHONPATH`` of every process the harness starts: this checkout's own ``a2e_host``
and first-party plugins, whichever environment runs it."""


def _host_env(env: Mapping[str, str], spec: HostSpec) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("A2E_")}
    out["PYTHONPATH"] = CHECKOUT_PATH
    if spec.auth_token:
        out["A2E_AUTH_TOKEN"] = spec.auth_token
    out.update(env)
    return out


class HostProcess:
    """A running host (``a2e-host serve`` or ``stdio``), its work directory, its URL
    (serve) or link (stdio), and the tail of its stderr.

    Raises:
        RuntimeError: the host did not come up within :data:`START_TIMEOUT`.
    """

    def __init__(self, spec: HostSpec, env: Mapping[str, str], workdir: Path) -> None:
        self.spec = spec
        self.workdir = workdir
        for name, body in spec.skills.items():
            (workdir / "skills").mkdir(exist_ok=True)
            (workdir / "skills" / f"{name}.json").write_text(json.dumps(body), "utf-8")
        self.process = subprocess.Popen(
            _host_argv(spec, workdir), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, cwd=workdir, env=_host_env(env, spec),
        )
        self.pid = self.process.pid
        self.url = ""
        self.link: StdioLink | None = None
        self.stderr_tail = bytearray()
        self.killed_for_rss_kib = 0
        self._listening = threading.Event()
        if spec.transport == "serve" or spec.read_stderr:
            assert self.process.stderr is not None
            threading.Thread(target=self._read_stderr, args=(self.process.stderr,),
                             name="host-stderr", daemon=True).start()
        if spec.transport == "serve":
            if not self._listening.wait(START_TIMEOUT):
                self.close()
                raise RuntimeError(f"the host did not start: {self.stderr_text()}")
        else:
            self.link = StdioLink(self.process)

    def _read_stderr(self, stream: IO[bytes]) -> None:
        fd = stream.fileno()
        while chunk := os.read(fd, 65536):
            self.stderr_tail += chunk
            del self.stderr_tail[:-262_144]
            if not self.url:
                found = re.search(rb"listening on (ws://127\.0\.0\.1:\d+)", self.stderr_tail)
                if found:
                    self.url = found.group(1).decode()
                    self._listening.set()
                    if not self.spec.read_stderr:
                        return  # from now on nobody reads the host's stderr

    @property
    def root(self) -> Path:
        return self.workdir / "root"

    def alive(self) -> bool:
        return self.process.poll() is None

    def rss_kib(self) -> int:
        return _status_kib(self.pid, "VmRSS")

    def peak_kib(self) -> int:
        return _status_kib(self.pid, "VmHWM")

    def reset_peak(self) -> None:
        """Reset ``VmHWM`` to the current RSS (Linux ≥ 4.0), so a reused host's peak is
        this case's."""
        with suppress(OSError), open(f"/proc/{self.pid}/clear_refs", "w") as f:
            f.write("5")

    def stderr_text(self, last: int = 3000) -> str:
        return bytes(self.stderr_tail[-last:]).decode("utf-8", "replace")

    def close(self) -> None:
        """Stop the host: EOF on stdin (stdio), SIGTERM, SIGKILL after 5 s each."""
        process = self.process
        if process.poll() is None and self.link is not None:
            with suppress(OSError):
                process.stdin.close()  # type: ignore[union-attr]
            with suppress(subprocess.TimeoutExpired):
                process.wait(5)
        if process.poll() is None:
            with suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            with suppress(subprocess.TimeoutExpired):
                process.wait(5)
        if process.poll() is None:
            with suppress(ProcessLookupError):
                process.kill()
            process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            with suppress(OSError):
                if stream is not None:
                    stream.close()


# ── the probe ──────────────────────────────────────────────────────────────────


@dataclass
class ProbeStats:
    """The probe's record: latencies (ms) of answered pings, unanswered count, error."""

    latencies_ms: list[float] = field(default_factory=list)
    unanswered: int = 0
    error: str = ""

    @property
    def count(self) -> int:
        return len(self.latencies_ms) + self.unanswered

    def quantile(self, q: float) -> float:
        return percentile(self.latencies_ms, q)


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q``-quantile (0 < q ≤ 1) of ``values``; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class WsProbe:
    """``tests/hostile/probe.py`` in its own process, on its own connection to ``url``.

    Raises:
        RuntimeError: the probe could not open its session.
    """

    def __init__(self, url: str, token: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.hostile.probe", url, token],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO,
            env={**os.environ, "PYTHONPATH": CHECKOUT_PATH},
        )
        self.healthy = True
        line = self._line(START_TIMEOUT)
        if line != "ready":
            self.close()
            raise RuntimeError(f"the probe did not start: {line[:500]}")

    def _line(self, wait: float) -> str:
        """The probe's next stdout line ("" at EOF or after ``wait`` seconds)."""
        stdout = self.process.stdout
        assert stdout is not None
        out: list[bytes] = []
        reader = threading.Thread(target=lambda: out.append(stdout.readline()), daemon=True)
        reader.start()
        reader.join(wait)
        return out[0].decode().strip() if out else ""

    def _command(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command.encode() + b"\n")
        self.process.stdin.flush()

    def start(self) -> None:
        """Start recording; returns once the first ping is on its way."""
        self._command("start")
        line = self._line(START_TIMEOUT)
        if line != "started":
            self.healthy = False
            raise RuntimeError(f"the probe did not start recording: {line[:500]}")

    def stop(self) -> ProbeStats:
        """Stop recording and return what was recorded."""
        self._command("stop")
        line = self._line(START_TIMEOUT + PING_TIMEOUT)
        if not line:
            self.healthy = False
            return ProbeStats(error="the probe did not report")
        data = json.loads(line)
        if data["error"]:
            self.healthy = False
        return ProbeStats(data["latencies_ms"], data["unanswered"], data["error"])

    def close(self) -> None:
        with suppress(OSError):
            self.process.stdin.close()  # type: ignore[union-attr]
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(5)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        with suppress(OSError):
            self.process.stdout.close()  # type: ignore[union-attr]


class StdioProbe:
    """Pings on the stdio host's one connection, from a thread of this process."""

    def __init__(self, link: StdioLink) -> None:
        self.link = link
        self.stats = ProbeStats()
        self.halt = threading.Event()
        self.n = 0
        self.thread = threading.Thread(target=self._run, name="stdio-probe", daemon=True)

    def ping(self) -> float | None:
        self.n += 1
        key = f"probe-{self.n}"
        answered = self.link.pongs[key] = threading.Event()
        started = time.perf_counter()
        try:
            self.link.write(json.dumps({"type": "ping", "id": key}).encode() + b"\n")
            answered.wait(PING_TIMEOUT)
        finally:
            self.link.pongs.pop(key, None)
        if not answered.is_set() or self.link.closed.is_set():
            return None
        return (time.perf_counter() - started) * 1000

    def start(self) -> None:
        if self.ping() is None:
            raise RuntimeError("the stdio host did not answer the probe's first ping")
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.halt.is_set():
                started = time.perf_counter()
                latency = self.ping()
                if latency is None:
                    self.stats.unanswered += 1
                    if self.link.closed.is_set():
                        self.stats.error = "the stdio host closed its stdout"
                        return
                else:
                    self.stats.latencies_ms.append(latency)
                self.halt.wait(max(0.0, 0.02 - (time.perf_counter() - started)))
        except OSError as exc:
            self.stats.error = f"{type(exc).__name__}: {exc}"

    def stop(self) -> ProbeStats:
        self.halt.set()
        self.thread.join(PING_TIMEOUT + 1)
        if self.thread.is_alive():  # stuck writing a ping the host never reads
            self.stats.unanswered += 1
        return self.stats


# ── hosts, shared when they can be ─────────────────────────────────────────────


class _Served:
    """A host and its probe."""

    def __init__(self, host: HostProcess, probe: WsProbe | None) -> None:
        self.host = host
        self.probe = probe

    def close(self) -> None:
        if self.probe is not None:
            self.probe.close()
        self.host.close()


class HostPool:
    """Hosts (with their probes) kept for the next case that asks for the same one.

    A case may reuse a host when its host is a ``serve`` host whose stderr is read and
    that host came out of the last case healthy (answered the after-case chain, probe
    intact). Actions make the files they need in directories of their own
    (:meth:`CaseContext.fresh_dirs`), so a reused root holds nothing they trip on. Use
    as a context manager, or call :meth:`close`.

    Args:
        base: a directory for the shared hosts' work directories.
    """

    def __init__(self, base: Path) -> None:
        self.base = base
        self.idle: dict[str, _Served] = {}
        self.started = 0

    @staticmethod
    def shareable(case: Case) -> bool:
        spec = case.host
        return spec.transport == "serve" and spec.read_stderr

    @staticmethod
    def key(case: Case, mode: Mode) -> str:
        spec = case.host
        return json.dumps({"tools": spec.tools, "allow_proc": spec.allow_proc,
                           "skills": spec.skills, "token": spec.auth_token,
                           "env": case.env(mode)}, sort_keys=True)

    def take(self, case: Case, mode: Mode, workdir: Path) -> _Served:
        """A healthy idle host for ``case``, or a new one (in ``workdir`` unless shared)."""
        if self.shareable(case):
            served = self.idle.pop(self.key(case, mode), None)
            if served is not None:
                if served.host.alive() and (served.probe is None or served.probe.healthy):
                    return served
                served.close()
            self.started += 1
            workdir = self.base / f"shared-{self.started}"
            (workdir / "root").mkdir(parents=True)
            (workdir / "outside").mkdir()
        return _start(case, mode, workdir)

    def give_back(self, case: Case, mode: Mode, served: _Served, healthy: bool) -> None:
        """Keep ``served`` for a later case when it may be shared, else stop it."""
        key = self.key(case, mode)
        if healthy and self.shareable(case) and key not in self.idle:
            self.idle[key] = served
        else:
            served.close()

    def close(self) -> None:
        for served in self.idle.values():
            served.close()
        self.idle.clear()

    def __enter__(self) -> HostPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _start(case: Case, mode: Mode, workdir: Path) -> _Served:
    host = HostProcess(case.host, case.env(mode), workdir)
    if host.link is not None:
        return _Served(host, None)
    try:
        return _Served(host, WsProbe(host.url, case.host.auth_token))
    except Exception:
        host.close()
        raise


# ── one case ───────────────────────────────────────────────────────────────────


_runs = itertools.count(1)


class CaseContext:
    """What an action gets: the host, its root, and ways to open hostile sessions."""

    def __init__(self, host: HostProcess, case: Case, mode: Mode) -> None:
        self.host = host
        self.case = case
        self.mode = mode
        self._clients: list[Client] = []

    @property
    def root(self) -> Path:
        return self.host.root

    @property
    def workdir(self) -> Path:
        return self.host.workdir

    @property
    def url(self) -> str:
        return self.host.url

    def fresh_dirs(self, name: str) -> tuple[str, Path, Path]:
        """A new directory under the host's root and one under ``outside/``, for one run
        of an action (a shared host's root may hold earlier runs' files).

        Returns:
            ``(path relative to the root, the directory inside, the one outside)``.
        """
        rel = f"{name}-{next(_runs)}"
        inside, outside = self.root / rel, self.workdir / "outside" / rel
        inside.mkdir()
        outside.mkdir()
        return rel, inside, outside

    async def connect(self, *, local_host: str = "", **limits: int) -> Client:
        """A hostile session, handshake done: a new WebSocket connection (serve), or the
        stdio link (whose one session the harness opened).

        Args:
            local_host: bind the client end to this loopback address (e.g.
                ``127.0.0.2``), to look like another peer.
            limits: session ceilings to ask for in the handshake.

        Raises:
            AssertionError: the handshake was refused.
        """
        if self.host.link is not None:
            return StdioClient(self.host.link)
        options: dict[str, Any] = {"max_size": None, "ping_interval": None,
                                   "open_timeout": RECV_TIMEOUT}
        if local_host:
            options["local_addr"] = (local_host, 0)
        client = WsClient(await connect(self.url, **options))
        self._clients.append(client)
        resp = await client.handshake(self.case.host.auth_token, self.case.host.caps, **limits)
        assert resp.get("type") == "handshake/resp" and resp.get("ok"), (
            f"the hostile session's handshake was refused: {resp}"
        )
        return client

    async def aclose(self) -> None:
        """Close every session :meth:`connect` opened (after each run of the action)."""
        clients, self._clients = self._clients, []
        with anyio.CancelScope(shield=True):  # even when the action's deadline passed
            for client in clients:
                with suppress(Exception):
                    await client.aclose()


@dataclass
class CaseResult:
    """What happened in one case (see :func:`run_case`)."""

    case: Case
    mode: Mode
    outcome: dict[str, Any] | None = None
    runs: int = 0
    action_error: str = ""
    expect_error: str = ""
    probe: ProbeStats = field(default_factory=ProbeStats)
    baseline_kib: int = 0
    peak_kib: int = 0
    killed_for_rss: bool = False
    alive_after: bool = False
    after_error: str = ""
    elapsed: float = 0.0
    stderr_tail: str = ""

    @property
    def added_mb(self) -> float:
        return max(0, self.peak_kib - self.baseline_kib) / 1024

    @property
    def rss_bound_mb(self) -> float:
        return self.case.budget(self.mode) + RSS_CONSTANT_MB

    @property
    def summary(self) -> str:
        """One short line for the benchmark's table: what the host answered."""
        if self.killed_for_rss:
            return f"killed: RSS over +{self.rss_bound_mb + KILL_MARGIN_MB:.0f} MB"
        if self.action_error:
            return self.action_error.split(";")[0][:60]
        outcome = self.outcome or {}
        if "summary" in outcome:
            return str(outcome["summary"])
        return describe(outcome.get("resp"), outcome.get("errors", []))

    def problems(self, probe_max_ms: float = PROBE_MAX_MS) -> list[str]:
        """Every way the case missed the agreed behaviour, one sentence each."""
        out: list[str] = []
        if self.killed_for_rss:
            out.append(
                f"the host's RSS passed {self.rss_bound_mb + KILL_MARGIN_MB:.0f} MiB over its "
                f"baseline and the watchdog killed it (bound: {self.rss_bound_mb:.0f} MiB)"
            )
        if self.action_error:
            out.append(f"hostile action: {self.action_error}")
        elif self.expect_error:
            out.append(f"outcome: {self.expect_error}")
        probe = self.probe
        if probe.error:
            out.append(f"probe session failed: {probe.error}")
        if probe.unanswered:
            out.append(f"{probe.unanswered} of the probe's {probe.count} pings went unanswered "
                       f"for {PING_TIMEOUT:g} s while the hostile request ran")
        if probe.latencies_ms and max(probe.latencies_ms) > probe_max_ms:
            out.append(f"the probe's slowest ping took {max(probe.latencies_ms):.0f} ms "
                       f"(bound {probe_max_ms:.0f} ms): the hostile request stalled the host")
        if not probe.latencies_ms and not probe.error and not probe.unanswered:
            out.append("the probe recorded no ping at all")
        if not self.killed_for_rss and self.added_mb > self.rss_bound_mb:
            out.append(f"the host's peak RSS grew {self.added_mb:.0f} MiB over its baseline "
                       f"(bound {self.rss_bound_mb:.0f} MiB = budget "
                       f"{self.case.budget(self.mode):.0f} + {RSS_CONSTANT_MB:.0f})")
        if not self.alive_after:
            out.append(f"the host no longer serves after the case: {self.after_error}")
        return out


def describe(resp: dict[str, Any] | None, errors: list[dict[str, Any]]) -> str:
    """A short text for a ``chain/resp`` (or the ``error`` frame that replaced it)."""
    if resp is None:
        if errors:
            return f"error frame {errors[0].get('code')} (no chain/resp)"
        return "no answer"
    if resp.get("success"):
        return "success"
    error = resp.get("error") or {}
    named = sorted(ceilings_named(error))
    return " ".join([str(error.get("code")), *named])


def ceilings_named(error: Any) -> set[str]:
    """Every ceiling a ``chain/resp`` error names: ``error.details.ceiling`` (a run-time
    refusal or a failing node's, PROTOCOL.md §6), ``error.details.errors[*].ceiling``
    (validation lists every problem), or nested deeper (a skill's or map item's failure
    carried up)."""
    found: set[str] = set()
    stack = [error]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            ceiling = value.get("ceiling")
            if isinstance(ceiling, str):
                found.add(ceiling)
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return found


class _Watchdog(threading.Thread):
    """Samples the host's RSS every 10 ms; SIGKILLs it (by pid) past ``limit_kib``."""

    def __init__(self, host: HostProcess, limit_kib: int) -> None:
        super().__init__(name="rss-watchdog", daemon=True)
        self.host = host
        self.limit_kib = limit_kib
        self.halt = threading.Event()
        self.killed = False

    def run(self) -> None:
        while not self.halt.wait(0.01):
            rss = self.host.rss_kib()
            if rss == 0:
                return
            if rss > self.limit_kib:
                self.killed = True
                self.host.killed_for_rss_kib = rss
                with suppress(ProcessLookupError):
                    os.kill(self.host.pid, signal.SIGKILL)
                return


async def _still_serves(host: HostProcess, case: Case) -> tuple[bool, str]:
    """Whether a fresh session (the stdio link itself for stdio) gets a chain answered."""
    if not host.alive():
        return False, f"the host process is gone (exit code {host.process.returncode})"
    client: Client | None = None
    try:
        with anyio.fail_after(AFTER_TIMEOUT):
            if host.link is not None:
                client = StdioClient(host.link)
            else:
                client = WsClient(await connect(host.url, max_size=None, ping_interval=None))
                resp = await client.handshake(case.host.auth_token)
                if not resp.get("ok"):
                    return False, f"a fresh session's handshake was refused: {resp}"
            reply = await client.run("after", [{"node_id": "e", "kind": "tool", "name": "echo",
                                                "input": {"after": case.id}}])
    except Exception as exc:
        return False, f"a fresh chain got no answer ({type(exc).__name__}: {exc})"
    finally:
        if isinstance(client, WsClient):
            with suppress(Exception):
                await client.aclose()
    resp = reply["resp"]
    if not resp or not resp.get("success") or resp.get("final_output") != {"after": case.id}:
        return False, f"a fresh chain was not answered right: {resp or reply['errors']}"
    return True, ""


async def _act(case: Case, ctx: CaseContext, repeat_for: float, result: CaseResult
               ) -> dict[str, Any]:
    """Run the action once, then again while less than ``repeat_for`` seconds passed and
    each outcome was the agreed one; the last outcome."""
    started = time.monotonic()
    while True:
        try:
            outcome = await case.action(ctx)
        finally:
            await ctx.aclose()  # repeated runs must not pile up connections
        result.runs += 1
        if time.monotonic() - started >= repeat_for:
            return outcome
        try:
            case.expect(outcome)
        except AssertionError:
            return outcome


async def run_case(case: Case, mode: Mode, workdir: Path, pool: HostPool | None = None,
                   *, repeat_for: float = 0.0) -> CaseResult:
    """Run ``case`` and record what happened.

    Args:
        case: the case.
        mode: ``test`` (the suite: ``test_env``, lowered ceilings) or ``bench``.
        workdir: an empty directory of the caller's, for the case's own host (``root/``,
            ``outside/``, ``skills/`` are made in it).
        pool: where a host may be reused from and given back to; None runs the case on a
            fresh host, stopped at the end.
        repeat_for: seconds: repeat the hostile action (on the same host, the probe
            pinging throughout) until this long has passed, so that a quick request still
            gives the probe enough pings for its percentiles; 0 runs it once. The
            deadline then applies to the whole run plus ``repeat_for``.

    Returns:
        The :class:`CaseResult`; :meth:`CaseResult.problems` lists what went wrong.
        Exceptions of the action are recorded in it, not raised.
    """
    result = CaseResult(case, mode)
    (workdir / "root").mkdir(parents=True, exist_ok=True)
    (workdir / "outside").mkdir(exist_ok=True)
    started = time.monotonic()
    if pool is None:
        served = await anyio.to_thread.run_sync(_start, case, mode, workdir)
    else:
        served = await anyio.to_thread.run_sync(pool.take, case, mode, workdir)
    host = served.host
    try:
        ctx = CaseContext(host, case, mode)
        stdio_probe: StdioProbe | None = None
        if host.link is not None:
            resp = await StdioClient(host.link).handshake(case.host.auth_token, case.host.caps)
            assert resp.get("ok"), f"the stdio host refused the handshake: {resp}"
            stdio_probe = StdioProbe(host.link)
            await anyio.to_thread.run_sync(stdio_probe.start)
        else:
            assert served.probe is not None
            await anyio.to_thread.run_sync(served.probe.start)
        host.reset_peak()
        result.baseline_kib = host.rss_kib()
        limit_mb = result.rss_bound_mb + KILL_MARGIN_MB
        watchdog = _Watchdog(host, result.baseline_kib + int(limit_mb * 1024))
        watchdog.start()
        try:
            deadline = case.deadline + repeat_for
            with anyio.move_on_after(deadline) as scope:
                result.outcome = await _act(case, ctx, repeat_for, result)
            if scope.cancelled_caught:
                result.action_error = f"no answer within the case's deadline of {deadline:g} s"
        except Exception as exc:
            result.action_error = f"{type(exc).__name__}: {exc}"
        finally:
            result.peak_kib = max(host.peak_kib(), host.killed_for_rss_kib)
            watchdog.halt.set()
            await anyio.to_thread.run_sync(watchdog.join)
            result.killed_for_rss = watchdog.killed
            probe = stdio_probe or served.probe
            assert probe is not None
            result.probe = await anyio.to_thread.run_sync(probe.stop)
            await ctx.aclose()
        if result.outcome is not None and not result.action_error:
            try:
                case.expect(result.outcome)
            except AssertionError as exc:
                result.expect_error = str(exc) or "the outcome is not the agreed one"
        if "deadline" in result.action_error:
            result.after_error = "not checked: the hostile request was still unanswered"
        else:
            result.alive_after, result.after_error = await _still_serves(host, case)
    finally:
        result.stderr_tail = host.stderr_text()
        healthy = result.alive_after and not result.action_error
        if pool is None:
            await anyio.to_thread.run_sync(served.close)
        else:
            await anyio.to_thread.run_sync(pool.give_back, case, mode, served, healthy)
    result.elapsed = time.monotonic() - started
    return result
