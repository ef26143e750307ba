"""What an executor of a node kind sees: the contract between the scheduler and the
``tool`` / ``skill`` / ``proc`` executors.

Layer: core (no anyio). An executor is ``async def run(node, args, ctx) -> output``; it
raises :class:`~a2e_host.exceptions.NodeError` (or any exception, which the scheduler turns
into the node's error) and must let cancellation propagate. Source: PROTOCOL.md §5.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from ..exceptions import NodeError
from ..limits import SessionLimits
from .messages import ChainNode

_FLAG_LOCK = threading.Lock()

__all__ = [
    "MAX_REPORT_BYTES",
    "MAX_REPORTS",
    "NodeContext",
    "REPORT_KINDS",
    "Executor",
    "ReportSink",
    "SubchainRunner",
    "current_node",
    "idempotency_key",
]

REPORT_KINDS: tuple[str, ...] = ("progress", "log", "artifact", "status")
"""What a tool may report while it runs (A2E ``EventKind``): ``progress {pct, message}``,
``log {level, message}``, ``artifact {name, mime, chunk, final}``, ``status {message}``."""

MAX_REPORTS = 256
"""Reports one node execution (one map item, one direct call) may send; later ones are
dropped (:meth:`NodeContext.report` returns False), so a tool cannot flood the wire."""

MAX_REPORT_BYTES = 4096
"""The most bytes of JSON one report's ``data`` may encode to; a larger one is dropped."""

ReportSink = Callable[[str, dict[str, Any]], bool]
"""``sink(kind, data) -> sent``: where a node's checked reports go (the runtime's, which
counts them against :data:`MAX_REPORTS` and moves them onto the event loop)."""

SubchainRunner = Callable[[str, list[ChainNode], str, dict[str, Any]], Awaitable[Any]]
"""``run_subchain(skill_name, nodes, entry_node, initial_input) -> final_output``: runs a
declared sub-chain inside the current one (inner events stream as ``<outer>/<inner>``).
Raises :class:`~a2e_host.exceptions.ChainError` when the sub-chain fails or is invalid, and
:class:`~a2e_host.exceptions.ChainLimitExceeded` past ``max_depth``."""


@dataclass(slots=True)
class NodeContext:
    """Per-call facts for an executor.

    Attributes:
        node_id: the node's id as events show it (``t[3]`` for a map item,
            ``outer/inner`` inside a skill).
        chain_id / req_id: the running chain and its request id.
        depth: skill nesting depth, 0 for the top-level chain.
        granted: capabilities granted to the session (``{"chains", "proc", …}``).
        max_output_bytes: the effective output ceiling, bytes.
        limits: the session's scoped ceilings, for an executor that refuses work by a
            ceiling and must name its scope (PROTOCOL.md §6); None outside a session.
        run_subchain: see :data:`SubchainRunner`.
        log: a structlog logger bound with the chain's ids.
        run_key: the run's key (``RunConfig.run_key``: ``"<session_id>/<req_id>"``, a
            durable run's ``run_id``), from which :attr:`idempotency_key` is derived.
        deadline: when the node must be done, ``time.monotonic()`` seconds (the chain's
            or direct call's timeout, or the node's own shorter one); None for none.
        sink: where :meth:`report` sends (None: reports are dropped).

    Cancellation: an ``async`` tool sees it as the usual cancellation of its task; a
    blocking tool, run in a worker thread the host abandons when the node is cancelled
    (its timeout, the chain's or call's timeout, ``chain/cancel``, a dropped connection),
    asks :attr:`cancelled`, :meth:`check_cancelled` or :meth:`wait_cancelled` and stops.
    Each invocation of the tool (each attempt of a retrying node) has its own flag
    (:meth:`for_invocation`), so a new attempt does not see an old one's cancellation.
    """

    node_id: str
    chain_id: str
    req_id: str
    depth: int = 0
    granted: frozenset[str] = frozenset()
    max_output_bytes: int = 8 * 1024 * 1024
    limits: SessionLimits | None = None
    run_subchain: SubchainRunner | None = None
    log: Any = None
    run_key: str = ""
    deadline: float | None = None
    sink: ReportSink | None = None
    # made on first use (a cancel, or a tool waiting on it): most tool calls never need
    # one, and a threading.Event costs more than the rest of the context per node
    _cancel: threading.Event | None = field(default=None, repr=False, compare=False)

    def _flag(self) -> threading.Event:
        flag = self._cancel
        if flag is None:
            with _FLAG_LOCK:  # the loop (a cancel) and the tool's thread (a wait) may race
                flag = self._cancel
                if flag is None:
                    flag = self._cancel = threading.Event()
        return flag

    @property
    def cancelled(self) -> bool:
        """Whether this invocation was cancelled; safe to read from the tool's worker
        thread, which should then stop (its result is discarded)."""
        flag = self._cancel
        return flag is not None and flag.is_set()

    def check_cancelled(self) -> None:
        """Raise when this invocation was cancelled: the tool's loop stops there.

        Raises:
            NodeError: code ``cancelled``, naming the node.
        """
        if self.cancelled:
            raise NodeError(f"node {self.node_id!r} was cancelled", code="cancelled")

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block the calling worker thread until this invocation is cancelled or
        ``timeout`` seconds pass (None: no bound); whether it was cancelled. A blocking
        tool waits here instead of ``time.sleep`` so it wakes at once on cancellation.
        Never call it on the event loop."""
        return self._flag().wait(timeout)

    def mark_cancelled(self) -> None:
        """Set :attr:`cancelled` (the executor does, when the invocation's scope is
        cancelled); thread-safe, idempotent."""
        self._flag().set()

    def for_invocation(self) -> NodeContext:
        """This context with a fresh cancellation flag: one per run of the tool, so an
        abandoned attempt keeps seeing its own cancellation while the next runs."""
        return NodeContext(  # spelled out: dataclasses.replace is 3x slower per tool call
            self.node_id, self.chain_id, self.req_id, self.depth, self.granted,
            self.max_output_bytes, self.limits, self.run_subchain, self.log, self.run_key,
            self.deadline, self.sink)

    @property
    def idempotency_key(self) -> str:
        """sha256 hex of the run key and the node's display id (which holds its skill
        prefix and map item index): the same for every attempt of this node in this run,
        and after the run resumes; a tool passes it on to make a call idempotent."""
        return idempotency_key(self.run_key, self.node_id)

    def report(self, kind: str, data: Mapping[str, Any] | None = None) -> bool:
        """Report ``kind`` (one of :data:`REPORT_KINDS`) with ``data`` while the node runs.

        Inside a chain it travels as a ``chain/event`` with ``kind: "progress"``, the
        node's phase (``start``) unchanged and ``data: {"report": kind, **data}``; in a
        direct ``tool/call/req`` as a ``tool/event`` of that ``kind`` (PROTOCOL.md §11).
        Callable from the tool's worker thread. At most :data:`MAX_REPORTS` per node
        execution and :data:`MAX_REPORT_BYTES` of JSON each; past either, or once the
        node has ended, the report is dropped.

        Args:
            kind: ``progress`` (data ``{pct, message}``), ``log`` (``{level, message}``),
                ``artifact`` (``{name, mime, chunk, final}``) or ``status`` (``{message}``).
            data: a JSON-able mapping; default ``{}``.

        Returns:
            Whether it was sent.

        Raises:
            ValueError: an unknown ``kind``, or ``data`` that is not a JSON-able mapping.
        """
        if kind not in REPORT_KINDS:
            raise ValueError(
                f"report kind {kind!r} is not one of {', '.join(REPORT_KINDS)}"
            )
        try:
            payload = msgspec.to_builtins(dict(data or {}))
            size = len(msgspec.json.encode(payload))
        except (TypeError, ValueError, msgspec.EncodeError) as exc:
            raise ValueError(f"report data must be a JSON-able mapping: {exc}") from None
        if size > MAX_REPORT_BYTES or self.sink is None:
            return False
        return self.sink(kind, payload)


def idempotency_key(run_key: str, node_id: str) -> str:
    """sha256 hex of ``run_key`` and ``node_id`` (see :attr:`NodeContext.idempotency_key`)."""
    return hashlib.sha256(f"{run_key}\n{node_id}".encode()).hexdigest()


current_node: ContextVar[NodeContext | None] = ContextVar("a2e_current_node", default=None)
"""The :class:`NodeContext` of the tool node running in this task (and its worker
threads), None outside one. Set by the ``tool`` executor, so a tool function, which sees
only its input, can bound what it builds by ``max_output_bytes`` before building it, and
report progress (:func:`a2e_host.tools.context`)."""


class Executor(Protocol):
    """Runs one node of an executable kind (``tool``, ``skill``, ``proc``)."""

    async def __call__(self, node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        """Run ``node`` with its resolved input ``args``; return its JSON-able output."""
        ...
