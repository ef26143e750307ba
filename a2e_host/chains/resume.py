"""Resume after a restart: a durable run's stored log folded back into a runner's state.

Layer: core (no anyio, no I/O, no clock). Source: PROTOCOL.md §5 Resume.

**The event log is the checkpoint.** A durable run stores every frame it emits, and with
each node's terminal event (``done``, ``error``, ``skip``; map items ``t[3]`` and skill
inner nodes ``outer/inner`` included) that node's *checkpoint* (:func:`checkpoint_of`):
the encoded output of a ``done`` node, the encoded failure of an ``error`` one, even when
the wire frame carries neither (``event_outputs: false``). A host that restarts reads the
log (:func:`read_log`) and folds it into where the run stood (:func:`fold_plan`):

* a node whose ``done``, ``skip`` or ``error`` is on the log never runs again: its output
  (or failure) comes back into the context, and the plan's readiness moves on exactly as
  it did (the terminals are applied in ``seq`` order, so a handler fired by two failures
  sees the same one);
* a branch that had not finished re-evaluates (it is pure);
* a node with a ``start`` and no terminal event was *in flight*: it gets no second
  ``start``; it runs again only when :func:`may_rerun` says so (a tool declared
  ``idempotent``, or the node's ``resume: "rerun"``; a map node and a declarative skill
  node always, since what they hold is restored item by item and node by node), with the
  same idempotency key as before; otherwise it ends with an ``interrupted`` error and its
  ``on_error`` decides. Its terminal event's ``data`` carries ``{"resumed": true}``;
* ``seq`` continues from the last stored one (:attr:`ResumeLog.last_seq`).

The fold is a pure function of the plan and the log: the runner
(:mod:`a2e_host.chains.scheduler`) adopts its :class:`Starting` state, and the parts of a
run (:mod:`~a2e_host.chains.attempt`) consult the same :class:`ResumeLog` for map items
and in-flight nodes as they reach them.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from .. import secrets as _secrets
from ..errors import ChainFailure, chain_failure_of
from ..exceptions import ChainError, NodeInterrupted
from . import kinds
from .outcome import NodeFailure
from .plan import NodeStatus, PlanState
from .validation import ChainPlan, PlanNode

__all__ = [
    "INTERRUPTED",
    "RESUME_DRIFT",
    "FrameLike",
    "Record",
    "ResumeLog",
    "Resumption",
    "Starting",
    "checkpoint_of",
    "failure_error",
    "fold_plan",
    "interrupted_failure",
    "may_rerun",
    "plan_hash",
    "read_log",
]

INTERRUPTED = "interrupted"
"""The error code of a node (and a run) that a restart interrupted."""

RESUME_DRIFT = "resume_drift"
"""``details.reason`` of a run that could not resume: what it was validated against
changed (its plan hash differs)."""

_TERMINAL = frozenset({"done", "error", "skip"})


class FrameLike(Protocol):
    """What the fold reads of one stored frame (:class:`a2e_host.store.StoredFrame`)."""

    @property
    def seq(self) -> int: ...

    @property
    def node_id(self) -> str: ...

    @property
    def phase(self) -> str: ...

    @property
    def frame(self) -> bytes: ...

    @property
    def output(self) -> bytes | None: ...


class _EventView(msgspec.Struct):
    """The fields of a stored ``chain/event`` frame the fold reads."""

    type: str = ""
    seq: int = 0
    node_id: str = ""
    phase: str = ""
    kind: str = "status"
    output: Any = None
    error: str = ""


_view_decoder = msgspec.json.Decoder(_EventView)
_failure_decoder = msgspec.json.Decoder(ChainFailure)
_encoder = msgspec.json.Encoder()


class Record(msgspec.Struct, frozen=True):
    """One node's (or map item's) terminal event as the log holds it.

    Attributes:
        phase: ``done``, ``error`` or ``skip``.
        seq: the event's ``seq``.
        output: a ``done`` node's output, else None.
        size: the encoded size of that output, bytes (0 for none).
        failure: an ``error`` node's failure; None for a ``done`` or ``skip``, and for
            an ``error`` that is a *stop* (the run ending, or another map item failing,
            cancelled it): a durable run keeps a failure with every real one.
    """

    phase: str
    seq: int
    output: Any = None
    size: int = 0
    failure: ChainFailure | None = None


@dataclass(slots=True)
class ResumeLog:
    """A durable run's log, read for a resume (:func:`read_log`).

    Attributes:
        records: display id → its terminal :class:`Record`.
        in_flight: display id → ``seq`` of its ``start``, for every node or item that
            started and has no terminal event; a run's parts take an id out when they
            resume it, so what is left when the run ends gets its terminal event then.
        last_seq: the highest stored ``seq`` (events continue from it).
    """

    records: dict[str, Record] = field(default_factory=dict)
    in_flight: dict[str, int] = field(default_factory=dict)
    last_seq: int = 0


@dataclass(slots=True)
class Resumption:
    """A resumed run's log and what its parts need to resume a node (a run's
    :attr:`~a2e_host.chains.run_state.RunConfig.resume`, shared by its sub-chains).

    Attributes:
        log: the run's :class:`ResumeLog` (its ``in_flight`` shrinks as nodes resume).
        idempotent: whether the tool of that name is declared ``idempotent``.
        declared_skill: whether the skill of that name is a declarative (chain) skill.
        resumed: display ids of the in-flight nodes resumed so far: their terminal event
            carries ``data.resumed``.
    """

    log: ResumeLog
    idempotent: Callable[[str], bool]
    declared_skill: Callable[[str], bool]
    resumed: set[str] = field(default_factory=set)

    def take_in_flight(self) -> list[str]:
        """The in-flight nodes no part resumed, by ``seq`` of their ``start``, taken out
        of the log and counted as resumed (the run ended before reaching them)."""
        left = sorted(self.log.in_flight, key=self.log.in_flight.__getitem__)
        self.log.in_flight.clear()
        self.resumed.update(left)
        return left

    def may_rerun(self, pnode: PlanNode) -> bool:
        """:func:`may_rerun` for ``pnode`` with what this host declares of its name."""
        name = pnode.node.name
        spec = kinds.NODE_KINDS.get(pnode.kind)
        registry = spec.registry if spec is not None else None
        return may_rerun(pnode, idempotent=registry == "tool" and self.idempotent(name),
                         declared_skill=registry == "skill" and self.declared_skill(name))


def checkpoint_of(phase: str, output: Any = None, failure: ChainFailure | None = None
                  ) -> bytes | None:
    """The bytes kept with a terminal event (:attr:`a2e_host.store.StoredFrame.output`):
    a ``done`` node's output as JSON, an ``error`` node's failure as JSON
    (``{code, message, node_id, retryable, details}``), None for a ``skip``.

    Like every frame, it holds no secret value the process knows: each is replaced by
    ``«secret:NAME»`` (:func:`a2e_host.secrets.redact_frame`; README "Secrets").

    Raises:
        TypeError: the output cannot be encoded (a checked output always can).
    """
    if phase == "done":
        return _secrets.redact_frame(_encoder.encode(output))
    if phase == "error" and failure is not None:
        return _secrets.redact_frame(_encoder.encode(failure))
    return None


def read_log(frames: Iterable[FrameLike]) -> ResumeLog:
    """Read a durable run's stored frames, in ``seq`` order, into a :class:`ResumeLog`.

    A ``start`` (or a ``kind: "progress"`` event, phase ``start``) marks its node in
    flight; its terminal event records it. A ``done`` node's output is its checkpoint
    when one was kept, else the frame's ``output``; an ``error``'s failure is its
    checkpoint, and one without (a stop, see :attr:`Record.failure`) has none. Frames
    about no node (``chain/accepted``, an ``error``) only move ``last_seq``.

    Raises:
        msgspec.DecodeError: a frame or checkpoint is not what this host writes.
    """
    log = ResumeLog()
    records = log.records
    in_flight = log.in_flight
    for stored in frames:
        log.last_seq = max(log.last_seq, stored.seq)
        shown = stored.node_id
        phase = stored.phase
        if not shown:
            continue
        if phase == "start":
            if shown not in records:
                in_flight.setdefault(shown, stored.seq)
            continue
        if phase not in _TERMINAL:
            continue
        in_flight.pop(shown, None)
        kept = stored.output
        if phase == "done":
            if kept is not None:
                output = msgspec.json.decode(kept)
                size = len(kept)
            else:
                output = _view_decoder.decode(stored.frame).output
                size = len(_encoder.encode(output))
            records[shown] = Record("done", stored.seq, output, size)
        elif phase == "error":
            failure = _failure_decoder.decode(kept) if kept is not None else None
            records[shown] = Record("error", stored.seq, failure=failure)
        else:
            records[shown] = Record("skip", stored.seq)
    return log


def may_rerun(pnode: PlanNode, *, idempotent: bool, declared_skill: bool) -> bool:
    """Whether an in-flight node (or map item of template ``pnode``) runs again on resume.

    Any node that sets ``resume: "rerun"`` does; otherwise its kind's ``on_resume``
    column (:class:`~a2e_host.chains.kinds.KindSpec`) decides: a branch (pure) and a map
    (its items are restored one by one) always; a tool when it is declared
    ``idempotent``; a skill when it is declarative (its inner nodes are restored one by
    one and each decides for itself). Anything else — a tool with unknown effects, a
    process, a Python skill — ends ``interrupted``: it is never silently run twice.

    Args:
        pnode: the node.
        idempotent: its tool is declared ``idempotent``.
        declared_skill: it names a declarative (chain) skill.
    """
    if pnode.node.resume == "rerun":
        return True
    spec = kinds.NODE_KINDS.get(pnode.kind)
    rule = spec.on_resume if spec is not None else "interrupt"
    return (rule == "rerun" or (rule == "idempotent" and idempotent)
            or (rule == "subchain" and declared_skill))


def interrupted_failure(shown: str, node_id: str) -> ChainFailure:
    """The failure of an in-flight node a restart interrupted and that may not run again
    (code :data:`INTERRUPTED`, retryable, ``details.resumed``)."""
    return chain_failure_of(NodeInterrupted(
        f"node {shown!r} was running when the host restarted and may not run twice; "
        "declare its tool idempotent or set the node's resume to 'rerun' to let it run "
        "again",
        details={"resumed": True},
    ), node_id=node_id)


def failure_error(failure: ChainFailure) -> ChainError:
    """A recorded failure as the exception a run's parts pass around (a map applies its
    template's ``on_error`` to it as to a live one)."""
    return ChainError(failure.message, node_id=failure.node_id, details=dict(failure.details),
                      code=failure.code, retryable=failure.retryable)


@dataclass(slots=True)
class Starting:
    """Where a plan's run stood when the log ends (:func:`fold_plan`): what a
    :class:`~a2e_host.chains.scheduler.ChainRunner` adopts instead of starting at its roots.

    Attributes:
        state: the plan's readiness with every recorded terminal applied.
        context / outputs: the chain context and outputs of the restored nodes.
        failures: recorded failures not aborting the run, in ``seq`` order.
        abort: the recorded failure under ``on_error: abort``, when one is on the log: the
            run ends at once.
        nodes_run: restored nodes that had started (done or error).
        kept: output bytes the restored outputs keep.
        ready: nodes ready to run (in flight or not started), marked ready in ``state``.
        unsent_skips: nodes the fold skipped whose ``skip`` event is not on the log
            (sent when the run resumes).
    """

    state: PlanState
    context: dict[str, Any]
    outputs: dict[str, Any]
    failures: list[NodeFailure]
    abort: NodeFailure | None
    nodes_run: int
    kept: int
    ready: list[int]
    unsent_skips: list[int]


def fold_plan(
    plan: ChainPlan, initial_input: dict[str, Any], log: ResumeLog, prefix: str = ""
) -> Starting:
    """Fold the log's records of one plan's nodes (ids ``prefix + node_id``) into its
    starting state. Pure: the log is only read.

    Ready nodes with a record are applied in the order of their records' ``seq`` (the
    order the run applied them), each record's consequences (nodes it made ready or
    skipped) before a later one; a ready node without a record stops there and is handed
    to the runner. Map items and skill inner nodes are not plan nodes: the run's parts
    restore them from the same log when they reach them.

    Args:
        plan: the validated plan (a skill's sub-chain for ``prefix`` ``"outer/"``).
        initial_input: the context's ``input``.
        log: the run's :class:`ResumeLog`.
        prefix: display prefix of the plan's node ids.
    """
    state = PlanState(plan)
    nodes = plan.nodes
    records = log.records
    context: dict[str, Any] = {"input": initial_input}
    outputs: dict[str, Any] = {}
    failures: list[NodeFailure] = []
    abort: NodeFailure | None = None
    nodes_run = kept = 0
    ready: list[int] = []
    unsent: list[int] = []
    heap: list[tuple[int, int]] = []

    def offer(indices: Sequence[int]) -> None:
        for i in indices:
            record = records.get(prefix + nodes[i].node_id)
            if record is None or record.phase == "skip":
                ready.append(i)  # a skip record for a ready node: the log is behind the plan
            else:
                heapq.heappush(heap, (record.seq, i))

    offer(state.start())
    while heap and abort is None:
        _, i = heapq.heappop(heap)
        pnode = nodes[i]
        node_id = pnode.node_id
        record = records[prefix + node_id]
        nodes_run += 1
        if record.phase == "done":
            outputs[node_id] = record.output
            context[node_id] = {"output": record.output, "status": "done"}
            kept += record.size
            made_ready, skipped = state.node_done(i, _taken(plan, pnode, record.output))
        else:
            context[node_id] = {"output": None, "status": "error"}
            if record.failure is None:  # stopped: the run had ended (timeout, cancel)
                state.status[i] = NodeStatus.ERROR
                continue
            failure = NodeFailure(i, record.failure)
            if pnode.on_error == "abort":
                state.status[i] = NodeStatus.ERROR  # the run ends here
                abort = failure
                break
            failures.append(failure)
            made_ready, skipped = state.node_failed(i)
        for s in skipped:
            context[nodes[s].node_id] = {"output": None, "status": "skip"}
            if prefix + nodes[s].node_id not in records:
                unsent.append(s)
        offer(made_ready)
    return Starting(state, context, outputs, failures, abort, nodes_run, kept, ready, unsent)


def _taken(plan: ChainPlan, pnode: PlanNode, output: Any) -> int | None:
    """A recorded branch's taken side (node index), from its output's ``taken``."""
    if pnode.condition is None or not isinstance(output, Mapping):  # not a branch
        return None
    taken = output.get("taken")
    return plan.by_id.get(taken) if isinstance(taken, str) and taken else None


def plan_hash(request: bytes, signatures: Mapping[str, Any]) -> str:
    """The hex sha256 a durable run is stored with and a resume compares: over the
    encoded request and the schemas of the tools and skills it names (``signatures``:
    name → anything msgspec encodes, e.g. ``{"input": …, "output": …, "version": …}``),
    in name order. A tool whose schema changed between accept and resume changes it.
    """
    digest = hashlib.sha256(request)
    for name in sorted(signatures):
        digest.update(b"\0" + name.encode() + b"\0")
        digest.update(_encoder.encode(signatures[name]))
    return digest.hexdigest()
