"""Remote tools on Ray: a tool marked ``remote`` runs as a Ray task (README "Remote tools
on Ray"; its error codes: PROTOCOL.md §5 Recovery).

Layer: runtime (anyio). Optional: the ``ray`` package (extra ``a2e-host[ray]``) is imported
on the first remote call, in a worker thread, and this module itself only when a tool is
marked remote (:meth:`~a2e_host.tools.Tool.invoke`, :func:`~a2e_host.tools.load_tools`); a
host without remote tools never imports either.

How a call goes (:func:`run_remote`):

* The host validates the input and the output as for any tool; only the function runs in
  the Ray task, with the tool context as plain data (``node_id``, ``chain_id``,
  ``req_id``, ``run_key`` — so ``context().idempotency_key`` is the node's — and the
  seconds left before the node's deadline). Reports (``report()``) are not carried back:
  in a Ray worker they return False.
* The task has ``max_retries=0``: the host owns retries. A lost worker (killed, crashed,
  out of memory, its node gone) fails the attempt with code :data:`REMOTE_WORKER_LOST`,
  retryable, so the node's own ``retry`` decides (PROTOCOL.md §5 Recovery).
* The result is awaited as an asyncio future of the ``ObjectRef``: the event loop never
  blocks. When the awaiting node is cancelled (its timeout, the tool's, the chain's,
  ``chain/cancel``, a dropped connection) the task is cancelled with ``ray.cancel``: a
  ``KeyboardInterrupt`` in the worker at its next Python instruction (a tool blocked in
  one C call, ``time.sleep`` included, sees it only when the call returns); if the task
  still runs :data:`FORCE_CANCEL_AFTER` seconds later, with ``force=True``, which kills
  its worker process. One daemon thread does both, so the node ends at once.
* One daemon thread per process holds the connection: it runs ``ray.init`` and then the
  cancellations (:class:`_RayThread`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import dataclasses
import importlib.util
import inspect
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

import anyio
import anyio.lowlevel
import msgspec
import structlog

from ..chains.nodes import NodeContext, current_node
from ..exceptions import ChainLimitExceeded, NodeError
from ..runtime.limiters import loop_limiter
from ..sizes import JsonSizer
from ..tool_patterns import tool_matches


class _Markable(Protocol):
    """What marking needs of a :class:`~a2e_host.tools.Tool` (not imported: the model
    imports this module)."""

    name: str
    remote: bool


_T = TypeVar("_T", bound=_Markable)

__all__ = [
    "FORCE_CANCEL_AFTER",
    "MAX_IN_FLIGHT",
    "REMOTE_UNAVAILABLE",
    "REMOTE_WORKER_LOST",
    "check_available",
    "configure",
    "init_options",
    "marked_remote",
    "run_remote",
]

REMOTE_WORKER_LOST = "remote_worker_lost"
"""The own code (on the wire ``chain_node_error``) of an attempt whose Ray worker was lost:
the process died or was killed, ran out of memory, or its node left the cluster.
Retryable: a node's ``retry`` tries it again (a ``write``/``external`` tool that is not
``idempotent`` only when ``retry_on`` names it)."""

REMOTE_UNAVAILABLE = "remote_unavailable"
"""The own code of an attempt that could not reach Ray (``ray.init`` failed: no cluster at
``ray_address``, a cluster that refused the connection). Retryable."""

FORCE_CANCEL_AFTER = 2.0
"""Seconds a cancelled Ray task has to stop on its ``KeyboardInterrupt`` before it is
cancelled with ``force=True``, which kills its worker process."""

MAX_IN_FLIGHT = 256
"""Ray tasks one host process (one event loop) has in flight at most; further remote
calls wait in the host, before anything is sent to Ray, until one ends. Each chain's
``max_concurrency`` bounds its own nodes, but not the sum over chains and sessions: this
bounds what the host queues in Ray's scheduler and object store."""

_in_flight: anyio.lowlevel.RunVar[anyio.CapacityLimiter] = anyio.lowlevel.RunVar(
    "a2e_host_remote_in_flight")

_LOST = (
    "WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "OutOfMemoryError",
    "ObjectLostError", "OwnerDiedError",
)
"""Names in ``ray.exceptions`` that mean the worker (or what held the result) was lost."""

_log = structlog.get_logger("a2e_host.tools.remote")
_state_lock = threading.Lock()
_address = ""
_thread: _RayThread | None = None


def check_available() -> None:
    """Raise when a tool is marked remote but Ray is not installed (checked when the host
    loads its tools, without importing Ray).

    Raises:
        ValueError: ``ray`` is not importable, naming the extra to install.
    """
    if importlib.util.find_spec("ray") is None:
        raise ValueError(
            "a tool is marked remote (remote_tools, or Tool(remote=True)) but Ray is not "
            "installed; install the extra with pip install 'a2e-host[ray]', or mark no "
            "tool remote"
        )


def configure(address: str) -> None:
    """Set the Ray cluster the first remote call connects to (``ray_address``): ``""``
    starts a local instance (as ``ray.init()``, so ``RAY_ADDRESS`` still applies),
    ``"auto"`` joins the cluster running on this machine, ``"ray://host:10001"`` connects
    with Ray Client. Ray is one connection per process: a process already connected (a
    test's ``ray.init``) keeps its connection, and the first address configured wins."""
    global _address
    with _state_lock:
        if _thread is None:
            _address = address


def init_options(address: str) -> dict[str, Any]:
    """The keyword arguments of ``ray.init`` for ``address`` (see :func:`configure`): no
    dashboard, worker output kept in Ray's log files (never forwarded to the host's
    stdout or stderr), and a local instance bound to 127.0.0.1."""
    options: dict[str, Any] = {"log_to_driver": False, "logging_level": "warning"}
    if address:
        options["address"] = address
    else:
        options["include_dashboard"] = False
        options["_node_ip_address"] = "127.0.0.1"
    return options


def marked_remote(tools: Iterable[_T], pack: str, patterns: tuple[str, ...]) -> list[_T]:
    """``tools`` of ``pack``, each one a glob of ``patterns`` matches (by its name or by
    ``<pack>.<name>``, :func:`a2e_host.tool_patterns.tool_matches`) copied with ``remote`` set; the
    others, and those already remote, as they are (a pack's tool objects are shared, so
    they are never changed in place)."""
    out: list[_T] = []
    for t in tools:
        if not t.remote and tool_matches(patterns, t.name, pack):
            t = copy.copy(t)
            t.remote = True
        out.append(t)
    return out


async def run_remote(name: str, fn: Callable[..., Any], value: Any, call_kwargs: bool) -> Any:
    """Run a remote tool's function on ``value`` (its converted input) as a Ray task.

    Args:
        name: the tool's name, for messages.
        fn: its function (picklable by cloudpickle; what it imports importable on the
            Ray workers).
        value: the input as :meth:`~a2e_host.tools.Tool.invoke` converted it.
        call_kwargs: ``value`` is a Struct whose fields are ``fn``'s keyword arguments.

    Returns:
        What the function returned (the caller checks it against the output schema).

    Raises:
        NodeError: code :data:`REMOTE_WORKER_LOST` (the worker was lost; retryable),
            :data:`REMOTE_UNAVAILABLE` (Ray could not be reached; retryable), a function
            or input that cannot be pickled, or another failure of Ray itself.
        Exception: whatever the function raised, as it raised it (an
            :class:`~a2e_host.exceptions.A2EError` keeps its code).

    Cancellation propagates after the task is cancelled (see the module docstring).
    """
    ray, task = await _connected(name)
    arg = msgspec.structs.asdict(value) if call_kwargs else value
    ctx = current_node.get()
    async with loop_limiter(_in_flight, MAX_IN_FLIGHT):
        try:
            ref = task.remote(fn, arg, call_kwargs, _context_data(ctx))
        except Exception as exc:  # noqa: BLE001 - Ray serializes the call here, in the host
            raise NodeError(
                f"tool {name!r} cannot be sent to Ray ({type(exc).__name__}: "
                f"{_first_line(exc)}); a remote tool's function and input must be "
                "picklable: make it a module-level function importable on the workers"
            ) from None
        try:
            out = await ref  # an asyncio future of the result: the loop never blocks
        except anyio.get_cancelled_exc_class():
            _cancel(ref)
            if ctx is not None:
                ctx.mark_cancelled()
            raise
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, _Failure):
                raise NodeError(cause.message) from None
            if isinstance(cause, Exception) and not isinstance(cause, ray.exceptions.RayError):
                raise cause from None
            raise NodeError(f"tool {name!r} failed in its Ray task: {_first_line(exc)}") from None
        except ray.exceptions.RayError as exc:
            if isinstance(exc, _lost_types(ray)):
                raise NodeError(
                    f"tool {name!r} lost its Ray worker ({type(exc).__name__}: "
                    f"{_first_line(exc)}); a node retry runs it again",
                    code=REMOTE_WORKER_LOST, retryable=True,
                ) from None
            raise NodeError(
                f"Ray could not run tool {name!r}: {type(exc).__name__}: {_first_line(exc)}"
            ) from None
    if isinstance(out, _Oversize):
        raise _oversize_error(name, out, ctx)
    return out


class _Oversize:
    """What the task returns instead of an output over the node's ``max_output_bytes``:
    its size so far (a lower bound), so the output never leaves the worker."""

    __slots__ = ("size", "cap")

    def __init__(self, size: int, cap: int) -> None:
        self.size = size
        self.cap = cap


class _Failure(Exception):
    """An exception the tool raised, as its ``"<type>: <message>"`` sentence: always
    picklable (the tool's own exception may hold a lock, a socket …), and the sentence an
    in-process tool's failure gives. An :class:`~a2e_host.exceptions.A2EError` that
    pickles crosses as it is, keeping its code."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Failure, (self.message,))


def _oversize_error(name: str, out: _Oversize, ctx: NodeContext | None) -> Exception:
    message = (
        f"tool {name!r} returned at least {out.size} bytes of output in its Ray task, over "
        f"max_output_bytes {out.cap}; it was left in the worker: ask for less"
    )
    limits = None if ctx is None else ctx.limits
    refusal = None if limits is None else limits.refusal("max_output_bytes", out.size)
    if refusal is None or ctx is None:
        return NodeError(message)
    return ChainLimitExceeded(message, node_id=ctx.node_id, details=refusal.details)


def _context_data(ctx: NodeContext | None) -> dict[str, Any] | None:
    """The tool context as the task's data. The run key is not sent, only the node's
    idempotency key derived from it: a session's run key holds its unguessable
    ``session_id``, which a Ray cluster (its object store, its task records) has no
    need to see."""
    if ctx is None:
        return None
    left = None if ctx.deadline is None else ctx.deadline - time.monotonic()
    return {
        "node_id": ctx.node_id, "chain_id": ctx.chain_id, "req_id": ctx.req_id,
        "depth": ctx.depth, "max_output_bytes": ctx.max_output_bytes,
        "key": ctx.idempotency_key, "seconds_left": left,
    }


@dataclasses.dataclass(slots=True)
class _WorkerContext(NodeContext):
    """The tool context in a Ray worker: its idempotency key given, its run key empty."""

    key: str = ""

    @property
    def idempotency_key(self) -> str:
        return self.key


def _call_in_worker(fn: Any, arg: Any, kwargs: bool, data: dict[str, Any] | None) -> Any:
    """The Ray task: ``fn`` on ``arg`` in the worker, with the tool context rebuilt; an
    output over the node's ``max_output_bytes`` stays here (:class:`_Oversize` is sent
    instead), and an exception that would not pickle crosses as a :class:`_Failure`."""
    token = None
    cap = None
    if data is not None:
        left = data.pop("seconds_left")
        ctx = _WorkerContext(
            **data, deadline=None if left is None else time.monotonic() + left)
        cap = ctx.max_output_bytes
        token = current_node.set(ctx)
    try:
        if inspect.iscoroutinefunction(fn):
            out = asyncio.run(fn(**arg) if kwargs else fn(arg))
        else:
            out = fn(**arg) if kwargs else fn(arg)
    except Exception as exc:  # noqa: BLE001 - sent back to the host, which reports it
        raise _portable(exc) from None
    finally:
        if token is not None:
            current_node.reset(token)
    if cap is not None:
        sizer = JsonSizer(out, cap)
        try:
            while not sizer.advance(1 << 16):
                pass
        except (TypeError, ValueError, OverflowError):
            return out  # not JSON: the host's own check says so
        if sizer.over:
            return _Oversize(sizer.size, cap)
    return out


def _portable(exc: Exception) -> Exception:
    """``exc`` if it survives pickling (as Ray will send it), else its sentence."""
    cloudpickle: Any = importlib.import_module("ray.cloudpickle")  # what Ray pickles with

    try:
        cloudpickle.loads(cloudpickle.dumps(exc))
    except Exception:  # noqa: BLE001 - any failure to round-trip
        return _Failure(f"{type(exc).__name__}: {exc}")
    return exc


async def _connected(tool_name: str) -> tuple[Any, Any]:
    """``(ray, the remote task)``, from the process's :class:`_RayThread` (started on first
    use: importing Ray and starting a local instance take seconds, off the event loop)."""
    thread = _ray_thread()
    connected = thread.connected
    if connected.done() and connected.exception() is None:
        return connected.result()
    if not thread.restores_sigterm:  # once connected, even if no call waits by then
        thread.restores_sigterm = True
        loop = asyncio.get_running_loop()
        connected.add_done_callback(lambda _: _on_loop(loop, _restore_sigterm))
    try:  # shielded: a cancelled wait must not cancel the connection the thread makes
        return await asyncio.shield(asyncio.wrap_future(connected))
    except Exception as exc:  # noqa: BLE001 - any failure to reach Ray is this one error
        raise NodeError(
            f"remote tool {tool_name!r} could not reach Ray at "
            f"{_address or 'a local instance'!r} ({type(exc).__name__}: {_first_line(exc)}); "
            "check ray_address and that the cluster is up",
            code=REMOTE_UNAVAILABLE, retryable=True,
        ) from None


def _on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], None]) -> None:
    try:
        loop.call_soon_threadsafe(fn)
    except RuntimeError:  # the loop is closed: nothing left to stop gracefully
        pass


def _restore_sigterm() -> None:
    """Give SIGTERM back to the host's own handler (on the main thread, where Python
    handles signals). Ray's core worker installs a crash handler for SIGTERM when it
    connects; it dumps a stack and kills the process on the spot, skipping the host's
    graceful stop and ``ray.shutdown`` at exit, which left Ray's agent processes of a
    local instance running after the host was gone."""
    if threading.current_thread() is not threading.main_thread():
        return
    handler = signal.getsignal(signal.SIGTERM)
    if handler is not None:
        signal.signal(signal.SIGTERM, handler)


def _ray_thread() -> _RayThread:
    """The process's Ray thread; a new one when the last could not connect or Ray was
    shut down since (a test's ``ray.shutdown()``), so the next call tries again."""
    global _thread
    with _state_lock:
        thread = _thread
        if thread is None or not thread.usable():
            thread = _thread = _RayThread(_address)
        return thread


def _cancel(ref: Any) -> None:
    thread = _thread
    if thread is not None:
        thread.cancels.put(ref)


class _RayThread:
    """One daemon thread for the process's Ray connection: it connects (``ray.init``,
    unless this process is connected already), then cancels the refs it is given —
    ``ray.cancel``, and ``force=True`` for those still running
    :data:`FORCE_CANCEL_AFTER` seconds later.

    The thread that starts a local instance lives as long as the process: Ray's agent
    processes outlived a host whose instance a short-lived thread had started."""

    def __init__(self, address: str) -> None:
        self.connected: concurrent.futures.Future[tuple[Any, Any]] = concurrent.futures.Future()
        self.cancels: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.restores_sigterm = False
        self._address = address
        threading.Thread(target=self._main, name="a2e-host ray", daemon=True).start()

    def usable(self) -> bool:
        if not self.connected.done():
            return True
        if self.connected.exception() is not None:
            return False
        ray, _ = self.connected.result()
        return bool(ray.is_initialized())

    def _main(self) -> None:
        try:
            import ray

            if not ray.is_initialized():
                ray.init(**init_options(self._address))
                _log.info("connected to Ray", address=self._address or "local instance")
            task = ray.remote(max_retries=0, retry_exceptions=False)(_call_in_worker)
        except BaseException as exc:  # noqa: BLE001 - told to every waiting call
            self.connected.set_exception(exc)
            return
        self.connected.set_result((ray, task))
        self._cancel_loop(ray)

    def _cancel_loop(self, ray: Any) -> None:
        pending: list[tuple[float, Any]] = []
        while True:
            wait = None if not pending else max(0.0, pending[0][0] - time.monotonic())
            try:
                ref = self.cancels.get(timeout=wait)
            except queue.Empty:
                ref = None
            if ref is not None:
                _try_cancel(ray, ref, force=False)
                pending.append((time.monotonic() + FORCE_CANCEL_AFTER, ref))
                continue
            now = time.monotonic()
            due = [r for at, r in pending if at <= now]
            pending = [(at, r) for at, r in pending if at > now]
            try:
                ready, _ = ray.wait(due, num_returns=len(due), timeout=0, fetch_local=False)
            except Exception:  # noqa: BLE001 - Ray gone: nothing left to cancel
                continue
            done = {r.hex() for r in ready}
            for r in due:
                if r.hex() not in done:
                    _try_cancel(ray, r, force=True)


def _try_cancel(ray: Any, ref: Any, *, force: bool) -> None:
    try:
        ray.cancel(ref, force=force)
    except Exception as exc:  # noqa: BLE001 - a finished or unknown task: nothing to do
        _log.debug("ray.cancel failed", force=force, error=repr(exc))


def _lost_types(ray: Any) -> tuple[type[BaseException], ...]:
    return tuple(t for n in _LOST if isinstance(t := getattr(ray.exceptions, n, None), type))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
