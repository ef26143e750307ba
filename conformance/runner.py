"""Running one case over one connection: the step interpreter.

Layer: I/O (asyncio) over :mod:`conformance.transports`; the checks themselves are
pure (:mod:`conformance.matchers`, :mod:`conformance.invariants`).

A :class:`CaseRun` runs over the case's connection (a ``reconnect`` step opens a fresh
one), or over a session an earlier case with the same handshake opened and left clean
(``session``: the handshake is not repeated, the case gets that session's variables;
:meth:`CaseRun.settle` checks every passed case left nothing behind). It keeps every
received frame that no step has consumed yet in ``pending``; ``expect`` takes the first
pending frame (of the request named by ``for``, if given), ``expect_chain`` takes every
frame of one request up to its ``chain/resp``. At the end, a frame nobody consumed fails
the case: a host must not send what the transcript did not ask for.

Every received frame must be one strict JSON object with the envelope (``type``,
``id``, ``version`` ``1.x``, ``ts``), and no two host messages may share an ``id``.

Variables a case can ``$ref``: ``nonce`` (fresh hex per case), ``case``, ``clock``
(``{min, max}``: now ± one day, epoch seconds),
``session`` (the handshake/resp), ``session_id``, ``chains`` (the ``chains``
entry's metadata), ``limits``, ``features``, ``probe`` (the suite's probe
handshake/resp), ``probe_limits``, ``other_cap``, ``auth_token``, and every ``as``
name (a sent message, or a received one).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from .cases import CONNECTION_STEPS, Case
from .invariants import INVARIANTS, check_chain, partial_top
from .matchers import MatcherError, match
from .results import RUNNER_ERROR, CaseFailure, CaseResult, chains_entry
from .templates import expand, fill_envelope
from .transports import Connection, Frame

__all__ = ["CaseResult", "CaseRun", "CaseFailure", "chains_entry", "ENVELOPE", "SESSION_VARS",
           "RUNNER_ERROR"]

#: The case variables a handshake sets; a case sharing a session inherits them.
SESSION_VARS = ("session", "session_id", "chains", "limits", "features")

ENVELOPE = {"type": {"$type": "str"}, "id": {"$type": "str"}, "version": {"$regex": r"^1\."},
            "ts": {"$type": "number"}}


_PARSE_SENT_BELOW = 2**20  # raw text sent is read back for its chain/req id when this small
BARRIER_TIMEOUT = 10.0  # seconds for the pong to the ping that ends a passed case


class CaseRun:
    """Interprets one case's steps over ``connection`` (see module docstring)."""

    def __init__(self, case: Case, connection: Connection, variables: dict[str, Any],
                 connect: Callable[[], Awaitable[Connection]] | None = None,
                 token: str | None = None, session: dict[str, Any] | None = None,
                 seen_ids: set[str] | None = None, patience: float = 1.0) -> None:
        """Args:
            case: the transcript to run.
            connection: where to run it.
            variables: suite variables (``probe``, ``auth_token``, ...).
            connect: opens a fresh connection, for ``reconnect`` steps.
            token: the auth token to handshake with.
            session: the :data:`SESSION_VARS` of a session already handshaken on
                ``connection`` by an earlier case; the case then skips its handshake.
            seen_ids: ids of host messages already seen on ``connection``.
            patience: multiplies the runner's own waits (a handshake/resp, the pong
                ending a case); a case's own bounds (``within``) are never scaled.
        """
        self.patience = patience
        self.case = case
        self.conn = connection
        self.connections = [connection]  # every connection used, for cleanup
        self._connect = connect
        self._token = token
        now = time.time()
        self.vars: dict[str, Any] = {"nonce": uuid.uuid4().hex[:12], "case": case.id,
                                     "clock": {"min": now - 86400, "max": now + 86400},
                                     **variables}
        self.inherited = session
        self.pending: list[Frame] = []
        # ids of every host message on this connection, to catch reuse
        self.seen_ids: set[str] = set() if seen_ids is None else seen_ids
        self.responded: set[str] = set()  # req_ids whose chain/resp has arrived
        self.requested: set[str] = set()  # ids of every chain/req sent
        self.refused: set[str] = set()  # req_ids an error message answered
        self.anonymous_errors = 0  # errors with req_id "": the message's id was unreadable
        self.history: dict[str, list[Frame]] = {}  # req_id → frames consumed by `expect`
        self.last_sent: dict[str, Any] | None = None
        self.closed = False
        self.findings: list[tuple[str, str]] = []
        self.notes: list[str] = []

    # ---- receiving ------------------------------------------------------------
    def finding(self, requirements: tuple[str, ...], text: str) -> None:
        """A transport or event invariant broken (one defect, one verdict).

        When the case names one of ``requirements`` it fails now; otherwise the defect
        is kept in :attr:`findings` (the report fails those requirements once, with
        every case that met it) and the case goes on to be judged on its own property.
        """
        named = [r for r in requirements if r in self.case.requires]
        if named:
            raise CaseFailure([f"{named[0]}: {text}"])
        self.findings += [(rid, text) for rid in requirements]

    def _check_frame(self, frame: Frame) -> bool:
        """Check one received frame; False when it is not protocol (then it is dropped)."""
        if frame.message is None:
            kind = self.conn.kind.upper()
            self.finding((f"FRAME-{kind}",), f"host sent a frame that is not protocol "
                                             f"({frame.fault}): {frame.raw[:200]!r}")
            return False
        message = frame.message
        problems = match({"$partial": ENVELOPE}, message, {}, "$msg")
        if problems:
            self.finding(("FRAME-ENVELOPE",), f"{problems[0]} in {frame.raw[:300]}")
        mid = message.get("id")
        if isinstance(mid, str):
            if mid in self.seen_ids:
                self.finding(("FRAME-MESSAGE-ID",), f"id {mid!r} was already used by "
                                                    f"another message: {frame.raw[:300]}")
            self.seen_ids.add(mid)
        mtype, req_id = message.get("type"), message.get("req_id")
        if mtype == "error" and isinstance(req_id, str):
            self.refused.add(req_id)
            if req_id == "":
                self.anonymous_errors += 1
        if mtype in ("chain/event", "chain/resp") and isinstance(req_id, str):
            if req_id in self.responded:
                self.finding(("CHAIN-EVT-BEFORE-RESP", "SPEC-EVENTS-BEFORE-RESP"),
                             f"a {mtype} for request {req_id!r} arrived after its "
                             f"chain/resp: {frame.raw[:300]}")
                return False
            if mtype == "chain/resp":
                self.responded.add(req_id)
        return True

    async def _take(self, wanted: Callable[[dict[str, Any]], bool], what: str,
                    within: float | None) -> Frame:
        for i, waiting in enumerate(self.pending):
            if waiting.message is not None and wanted(waiting.message):
                return self.pending.pop(i)
        deadline = None if within is None else time.monotonic() + within
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                frame = await asyncio.wait_for(self.conn.receive(), left)
            except TimeoutError:
                raise CaseFailure([f"no {what} within {within} s; "
                                   f"unconsumed: {self.pending_text()}"]) from None
            if frame is None:
                self.closed = True
                raise CaseFailure([f"connection closed while waiting for {what}; "
                                   f"unconsumed: {self.pending_text()}"])
            if not self._check_frame(frame):
                continue
            assert frame.message is not None
            if wanted(frame.message):
                return frame
            self.pending.append(frame)

    def pending_text(self) -> str:
        if not self.pending:
            return "none"
        return " | ".join(f.raw[:300] for f in self.pending[:6])

    def _request_id(self, step: dict[str, Any]) -> str | None:
        label = step.get("for")
        if label is None:
            return None
        sent = self.vars.get(label)
        if not isinstance(sent, dict) or "id" not in sent:
            raise MatcherError(f"'for': {label!r} names no sent message with an id")
        return str(sent["id"])

    def _note_request(self, message: Any) -> None:
        """Remember a sent chain/req's id, to tell at the end whether it was answered."""
        if (isinstance(message, dict) and message.get("type") == "chain/req"
                and isinstance(message.get("id"), str)):
            self.requested.add(message["id"])

    def unanswered(self) -> list[str]:
        """Ids of chain/req sent that got neither a chain/resp nor an error.

        An error with ``req_id`` ``""`` (PROTOCOL.md §2: the offending message had no
        readable id, e.g. it was too large to read) is taken to answer one of them.
        """
        left = sorted(self.requested - self.responded - self.refused)
        return left if len(left) > self.anonymous_errors else []

    # ---- steps ------------------------------------------------------------------
    async def do_send(self, step: dict[str, Any]) -> None:
        message = expand(step["send"], self.vars)
        if not step.get("exact"):
            message = fill_envelope(message, self.vars)
        if "as" in step:
            self.vars[step["as"]] = message
        if isinstance(message, dict) and message.get("type") == "chain/req":
            self.last_sent = message
        self._note_request(message)
        await self.conn.send_text(json.dumps(message, ensure_ascii=False))

    async def do_send_text(self, step: dict[str, Any]) -> None:
        text = expand(step["send_text"], self.vars)
        if isinstance(text, list):  # pieces, so a case can build huge or odd frames
            text = "".join(str(piece) for piece in text)
        message: Any = None
        if "as" in step:  # name a raw message for `for` / `$ref` (Python's last-wins decode)
            message = json.loads(text)
            self.vars[step["as"]] = message
            if message.get("type") == "chain/req":
                self.last_sent = message
        elif len(text) < _PARSE_SENT_BELOW:
            with contextlib.suppress(ValueError, RecursionError):  # odd frames stay odd
                message = json.loads(text)
        self._note_request(message)
        await self.conn.send_text(text)

    async def do_send_bytes(self, step: dict[str, Any]) -> None:
        await self.conn.send_bytes(bytes.fromhex(step["send_bytes"]))

    async def do_send_text_bytes(self, step: dict[str, Any]) -> None:
        await self.conn.send_text_bytes(bytes.fromhex(step["send_text_bytes"]))

    async def do_expect(self, step: dict[str, Any]) -> None:
        req_id = self._request_id(step)
        where = step.get("where")

        def wanted(m: dict[str, Any]) -> bool:
            if req_id is not None and m.get("req_id") != req_id:
                return False
            return where is None or not match(partial_top(where), m, dict(self.vars))

        what = "message" if req_id is None else f"message for {step['for']}"
        if where is not None:
            what += f" where {json.dumps(where)[:100]}"
        frame = await self._take(wanted, what, step.get("within"))
        assert frame.message is not None
        problems = match(partial_top(step["expect"]), frame.message, self.vars, "$msg")
        if problems:
            raise CaseFailure(problems + [f"received: {frame.raw[:600]}"])
        if isinstance(frame.message.get("req_id"), str):
            self.history.setdefault(frame.message["req_id"], []).append(frame)
        if "as" in step:
            self.vars[step["as"]] = frame.message

    async def do_expect_chain(self, step: dict[str, Any]) -> None:
        spec = step["expect_chain"]
        req_id: str | None = None
        if "for" in step:
            req_id = self._request_id(step)
        elif self.last_sent is not None:
            req_id = str(self.last_sent["id"])
        else:
            raise MatcherError("expect_chain without 'for' and no chain/req sent yet")
        assert req_id is not None
        earlier = self.history.pop(req_id, [])  # events an `expect` already took
        messages = [f.message for f in earlier if f.message is not None]
        raws = [f.raw for f in earlier]
        within = spec.get("within", step.get("within"))
        while not messages or messages[-1].get("type") != "chain/resp":
            frame = await self._take(lambda m: m.get("req_id") == req_id,
                                     f"chain/resp for {req_id}", within)
            assert frame.message is not None
            messages.append(frame.message)
            raws.append(frame.raw)
            if frame.message.get("type") not in ("chain/accepted", "chain/event", "chain/resp"):
                break
        if messages[-1].get("type") != "chain/resp":
            raise CaseFailure([f"expected chain events and a chain/resp for {req_id}, got "
                               f"{raws[-1][:600]}"])
        request = self.vars.get(step["for"]) if "for" in step else self.last_sent
        notes: list[str] = []
        problems = []
        for problem in check_chain(messages, raws, spec, self.vars, request, notes):
            rid = problem.split(":", 1)[0]
            if rid in INVARIANTS and rid not in self.case.requires:
                self.findings.append((rid, problem.split(":", 1)[1].strip()))
            else:
                problems.append(problem)
        self.notes += [n for n in notes if n not in self.notes]
        if problems:
            shown = "\n      ".join(r[:400] for r in raws[-12:])
            raise CaseFailure(problems + [f"transcript (last {min(12, len(raws))}):\n      "
                                          f"{shown}"])
        if "as" in step:
            self.vars[step["as"]] = messages[-1]

    async def do_expect_silence(self, step: dict[str, Any]) -> None:
        await asyncio.sleep(float(step["expect_silence"]))
        while True:
            try:
                frame = self.conn.receive()
                got = await asyncio.wait_for(frame, 0.001)
            except TimeoutError:
                break
            if got is None:
                self.closed = True
                break
            if self._check_frame(got):
                self.pending.append(got)
        if self.pending:
            raise CaseFailure([f"expected silence, got: {self.pending_text()}"])

    async def do_expect_close(self, step: dict[str, Any]) -> None:
        spec = step["expect_close"] or {}
        within = step.get("within", spec.get("within", 5.0))
        deadline = time.monotonic() + within
        while not self.closed:
            try:
                frame = await asyncio.wait_for(self.conn.receive(),
                                               max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise CaseFailure([f"the host did not close the connection within {within} s"]
                                  ) from None
            if frame is None:
                self.closed = True
                continue
            if not self._check_frame(frame):
                continue
            ignored = "ignore" in spec and not match(partial_top(spec["ignore"]),
                                                     frame.message, dict(self.vars))
            if not ignored:
                self.pending.append(frame)
        if self.conn.kind == "ws" and "ws_code" in spec:
            await asyncio.sleep(0)  # let the close handshake settle
            problems = match(spec["ws_code"], self.conn.closed_code(), self.vars, "$close_code")
            if problems:
                raise CaseFailure(problems)

    async def do_close(self, step: dict[str, Any]) -> None:
        await self.conn.close_sending()

    async def do_reconnect(self, step: dict[str, Any]) -> None:
        """Open a fresh connection (and handshake, as the case header says)."""
        if self.pending:
            raise CaseFailure([f"unexpected messages before reconnecting: "
                               f"{self.pending_text()}"])
        if self._connect is None:
            raise MatcherError("this runner cannot open a second connection")
        self.conn = await self._connect()
        self.connections.append(self.conn)
        self.closed = False
        if self.case.handshake is not None:
            await self.handshake(self._token)

    async def do_expect_transport(self, step: dict[str, Any]) -> None:
        spec = step["expect_transport"]
        if self.conn.kind == "ws" and "subprotocol" in spec:
            if self.conn.subprotocol != spec["subprotocol"]:
                raise CaseFailure([f"FRAME-WS-SUBPROTOCOL: negotiated {self.conn.subprotocol!r},"
                                   f" expected {spec['subprotocol']!r}"])

    async def do_sleep(self, step: dict[str, Any]) -> None:
        await asyncio.sleep(float(step["sleep"]))

    async def do_comment(self, step: dict[str, Any]) -> None:
        return None

    # ---- the case -----------------------------------------------------------
    async def handshake(self, token: str | None) -> None:
        """Send the case's handshake/req and keep the session facts as variables."""
        assert self.case.handshake is not None
        request: dict[str, Any] = {"type": "handshake/req", "agent_id": "a2e-conformance",
                                   "agent_caps": ["chains"]}
        if token:
            request["auth_token"] = token
        request.update(expand(self.case.handshake, self.vars))
        request = fill_envelope(request, self.vars)
        await self.conn.send_text(json.dumps(request))
        frame = await self._take(lambda m: m.get("req_id") == request["id"],
                                 "handshake/resp", 10.0 * self.patience)
        assert frame.message is not None
        resp = frame.message
        if resp.get("type") != "handshake/resp" or resp.get("ok") is not True:
            raise CaseFailure([f"handshake refused: {frame.raw[:600]}"])
        entry = chains_entry(resp) or {}
        metadata: dict[str, Any] = entry.get("metadata") or {}
        if not isinstance(metadata, dict):
            metadata = {}
        self.vars.update(session=resp, session_id=resp.get("session_id"), chains=metadata,
                         limits=metadata.get("limits") or {},
                         features=metadata.get("features") or [])

    async def run(self, token: str | None) -> None:
        """Run every step; raise :class:`CaseFailure` on the first that fails."""
        if self.inherited is not None:
            self.vars.update(self.inherited)
        elif self.case.handshake is not None:
            await self.handshake(token)
        for number, step in enumerate(self.case.steps, 1):
            kind = next(k for k in step if k in _STEPS)
            try:
                await _STEPS[kind](self, step)
            except CaseFailure as failure:
                failure.problems.insert(0, f"step {number} ({kind}) failed:")
                raise
        if self.pending:
            raise CaseFailure([f"unexpected messages at the end: {self.pending_text()}"])


    def session_facts(self) -> dict[str, Any]:
        """The :data:`SESSION_VARS` of this case's session, for a case that shares it."""
        return {name: self.vars[name] for name in SESSION_VARS if name in self.vars}

    async def settle(self, drain: bool = False) -> str | None:
        """After a passed case: did the host send anything more for it?

        When the case has a session and kept its connection, sends a ``ping`` and reads
        up to its ``pong``. Anything else arriving first was sent by the host after the
        case's last step: that fails the case, as unconsumed messages at the end always
        do (without this, a message sent just after the last one a case waits for
        would go unseen).

        With ``drain`` (after a failed case), what arrives before the ``pong`` is dropped
        instead: the case's verdict is given, and only whether the session can be shared
        on is asked.

        Returns:
            None when the session is clean and can be shared on, else why not (the
            case closed or replaced its connection, has no session, left a chain/req
            unanswered; the connection closed; no pong within :data:`BARRIER_TIMEOUT`).

        Raises:
            CaseFailure: the host sent more for this case than its steps consumed.
        """
        if any(kind in step for step in self.case.steps for kind in CONNECTION_STEPS):
            return "the case closed or replaced its connection"
        if "session_id" not in self.vars:
            return "the case has no session"
        left = self.unanswered()
        if left:
            return f"request(s) {', '.join(left)} got no chain/resp or error"
        if self.closed:
            return "the connection closed"
        barrier = fill_envelope({"type": "ping", "id": f"{self.vars['nonce']}-settle"},
                                self.vars)
        await self.conn.send_text(json.dumps(barrier))
        wait = BARRIER_TIMEOUT * self.patience
        deadline = time.monotonic() + wait
        while True:
            try:
                frame = await asyncio.wait_for(self.conn.receive(),
                                               max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                return f"no pong to the ping ending the case within {wait} s"
            if frame is None:
                self.closed = True
                return "the connection closed"
            if frame.message is not None and frame.message.get("req_id") == barrier["id"]:
                self.seen_ids.add(str(frame.message.get("id")))
                break
            if self._check_frame(frame) and not drain:
                self.pending.append(frame)
        if self.pending and not drain:
            raise CaseFailure([f"unexpected messages at the end: {self.pending_text()}"])
        return None


_STEPS: dict[str, Callable[[CaseRun, dict[str, Any]], Awaitable[None]]] = {
    "send": CaseRun.do_send,
    "send_text": CaseRun.do_send_text,
    "send_bytes": CaseRun.do_send_bytes,
    "send_text_bytes": CaseRun.do_send_text_bytes,
    "expect": CaseRun.do_expect,
    "expect_chain": CaseRun.do_expect_chain,
    "expect_silence": CaseRun.do_expect_silence,
    "expect_close": CaseRun.do_expect_close,
    "expect_transport": CaseRun.do_expect_transport,
    "close": CaseRun.do_close,
    "reconnect": CaseRun.do_reconnect,
    "sleep": CaseRun.do_sleep,
    "comment": CaseRun.do_comment,
}
