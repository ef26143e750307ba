"""``{"$secret": "NAME"}`` references in a chain: checked at validation, resolved when the
tool or process is called, and every output and failure of a run with secrets redacted
(PROTOCOL.md §5 Secrets; README "Secrets").

Layer: chain engine. Validation (:func:`secret_problems`, called by
:func:`~a2e_host.chains.validation.validate_chain`) refuses, each as a problem naming the
node and field and never a value:

- ``secret_invalid``: a malformed reference (not an object with the one key ``$secret``
  whose value is a secret name), or a malformed request secret (name, length);
- ``secret_unknown``: a name neither the host's configuration nor the request defines;
- ``secret_denied``: a secret the node's tool (its ``fallback`` too) or executable may not
  receive; a request secret named like a configured one when shadowing is not allowed;
  request secrets at all where ``[request_secrets]`` allows no tool and no executable;
- ``secret_in_expression``: ``$secret`` inside an expression (``input_map``,
  ``condition``, ``items_path``): an expression's value is data, never resolved;
- ``secret_kind``: a reference in a node other than ``tool`` or ``proc`` (a skill's input
  becomes its sub-chain's context, which expressions read), in a proc node's ``argv``
  (every local user sees a command line), or in a proc node whose ``argv`` is not static
  (its executable must be known to check it).

Only a node's *static* ``input`` is resolved — a key its ``input_map`` also sets keeps the
expression's value, and an object an expression or a tool builds is never resolved — and
only at the moment its executor is called (:class:`SecretResolver`): the value is in no
event, no context, no cache key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import msgspec

from ..errors import failure_message_of
from ..exceptions import A2EError, ChainError, NodeError
from ..limits import SessionLimits
from ..redaction import Redactor, placeholder
from ..secrets import (
    MIN_SECRET_CHARS,
    SECRET_KEY,
    RequestSecretPolicy,
    Secret,
    is_secret_name,
)
from .hints import Suggester
from .kinds import NODE_KINDS
from .messages import ChainNode, ChainRequest
from .nodes import Executor, NodeContext
from .problems import limit_problem, problem

__all__ = [
    "HostSecrets",
    "SecretResolver",
    "has_secret_refs",
    "mentions_secrets",
    "ref_name",
    "request_secret_problems",
    "secret_problems",
]

_MARK = SECRET_KEY.encode()
_encode = msgspec.json.Encoder().encode


class HostSecrets:
    """The secrets of one host configuration, as validation and runs see them.

    Args:
        secrets: the configured secrets (``HostConfig.secrets``).
        policy: what a request's own secrets may reach (``HostConfig.request_secrets``).
        pack_of: tool name → the tool pack it was enabled from (``ToolRegistry.pack_of``),
            so that a ``tools`` pattern matches ``<pack>.<name>`` too; None: names only.
    """

    __slots__ = ("secrets", "policy", "pack_of")

    def __init__(self, secrets: Mapping[str, Secret] | None = None,
                 policy: RequestSecretPolicy | None = None,
                 pack_of: Callable[[str], str] | None = None) -> None:
        self.secrets = dict(secrets or {})
        self.policy = policy if policy is not None else RequestSecretPolicy()
        self.pack_of: Callable[[str], str] = pack_of if pack_of is not None else _no_pack

    def resolver_for(self, request: ChainRequest) -> SecretResolver | None:
        """The :class:`SecretResolver` of a run of ``request``; None when neither the
        host nor the request has a secret (the run then pays nothing for them)."""
        if not self.secrets and not request.secrets:
            return None
        return SecretResolver(self.for_request(request), self.pack_of)

    def for_request(self, request: ChainRequest) -> dict[str, Secret]:
        """The secrets ``request`` may reference: the host's, with the request's own
        added (replacing a host secret only where the policy lets them shadow)."""
        if not request.secrets:
            return self.secrets
        scope = dict(self.secrets)
        for name, value in request.secrets.items():
            if name not in scope or self.policy.shadow:
                scope[name] = self.policy.secret(name, value)
        return scope


def _no_pack(name: str) -> str:
    return ""


def receiver(kind: str) -> str | None:
    """What a node of ``kind`` hands its resolved input to, from the kind table:
    ``"tool"`` (a kind whose name is a tool), ``"proc"`` (a kind held to the proc
    policy), or None (no secret may be resolved for it)."""
    spec = NODE_KINDS.get(kind)
    if spec is None:
        return None
    if spec.registry == "tool":
        return "tool"
    return "proc" if spec.proc_policy else None


def ref_name(value: Any) -> str | None:
    """The name a reference names when ``value`` is one (``{"$secret": NAME}``), else
    None. A malformed one (extra keys, a name that is not a string) is not a reference:
    :func:`secret_problems` refuses it."""
    if type(value) is dict and len(value) == 1:
        name = value.get(SECRET_KEY)
        return name if isinstance(name, str) else None
    return None


def _refs(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """(path, object) of every object holding the key ``$secret`` inside ``value``."""
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, dict):
            if SECRET_KEY in item:
                yield where, item
                continue
            stack.extend((f"{where}.{k}", v) for k, v in reversed(list(item.items())))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(item))))


def has_secret_refs(value: Any) -> bool:
    """Whether ``value`` (a node's static input) holds a ``$secret`` reference."""
    return next(_refs(value, ""), None) is not None


def mentions_secrets(request: ChainRequest) -> bool:
    """Whether ``request`` carries secrets or writes ``$secret`` in a node's input or
    expressions: one C-speed encode and search, ~0.1–0.5 µs per declared node, the cost
    a chain without secrets pays (its validation costs ~17 µs per node)."""
    return bool(request.secrets) or _MARK in _encode(
        [(n.input, n.input_map, n.condition, n.items_path) for n in request.nodes])


# ── validation ──────────────────────────────────────────────────────────────


def secret_problems(
    request: ChainRequest, host: HostSecrets | None, limits: SessionLimits
) -> list[dict[str, Any]]:
    """Every problem of ``request``'s secrets and ``$secret`` references (see the module
    docstring for the codes), in declaration order.

    Args:
        request: the chain.
        host: the host's secrets; None for none.
        limits: the session's ceilings (``max_request_secrets``, ``max_secret_bytes``).

    Returns:
        Problems in the shape of :func:`~a2e_host.chains.problems.problem`, with the
        key ``secret`` naming the secret when there is one; ``[]`` when all is well.
    """
    if not mentions_secrets(request):
        return []
    host = host if host is not None else HostSecrets()
    found = request_secret_problems(request, host, limits)
    scope = host.for_request(request)
    for node in request.nodes:
        found.extend(_node_problems(node, scope, host.pack_of))
    return found


def request_secret_problems(request: ChainRequest, host: HostSecrets,
                            limits: SessionLimits) -> list[dict[str, Any]]:
    """The problems of ``request``'s own ``secrets`` alone (count, a policy that lets
    them reach nothing, names, lengths, shadowing), in time bounded by
    ``max_request_secrets``: what the chains plugin checks before it registers their
    values for redaction or stores the request.

    Returns:
        Problems as :func:`secret_problems` gives them; ``[]`` when all is well.
    """
    refused = limits.refusal("max_request_secrets", len(request.secrets))
    if refused is not None:  # the rest is not looked at: there may be very many
        return [limit_problem(refused, "", "secrets",
                              "send fewer secrets, only those the chain references")]
    if request.secrets and not (host.policy.tools or host.policy.executables):
        return [problem(  # registered for redaction, they would reach nothing
            "secret_denied", "", "secrets",
            "this host lets a request's own secrets reach no tool and no executable",
            "send no 'secrets' (reference the host's secrets by name), or configure "
            "[request_secrets] tools/executables on the host")]
    found: list[dict[str, Any]] = []
    most = limits.effective.max_secret_bytes
    for name, value in request.secrets.items():
        field = f"secrets.{name}"
        if not is_secret_name(name):
            found.append(problem(
                "secret_invalid", "", "secrets", f"secret name {name[:64]!r} is not a name",
                "name secrets with a letter or '_' then up to 63 letters, digits, '_', "
                "'.' or '-'"))
            continue
        if len(value) < MIN_SECRET_CHARS:
            found.append(problem(
                "secret_invalid", "", field,
                f"secret {name!r} is shorter than {MIN_SECRET_CHARS} characters, too short "
                "to redact safely", "send a longer value", secret=name))
        size = len(value.encode("utf-8", "surrogatepass"))
        refused = limits.refusal("max_secret_bytes", size)
        if refused is not None:
            found.append(limit_problem(refused, "", field,
                                       f"keep each secret within {most} bytes"))
        if name in host.secrets and not host.policy.shadow:
            found.append(problem(
                "secret_denied", "", field,
                f"secret {name!r} is configured on the host; a request may not replace it",
                "rename the request's secret, or use the host's by its name without "
                "sending it", secret=name))
    return found


def _node_problems(node: ChainNode, scope: Mapping[str, Secret],
                   pack_of: Callable[[str], str]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    nid = node.node_id
    expressions = [(f"input_map.{k}", v) for k, v in node.input_map.items()]
    expressions += [("condition", node.condition), ("items_path", node.items_path)]
    for field, text in expressions:
        if SECRET_KEY in text:
            found.append(problem(
                "secret_in_expression", nid, field,
                "$secret inside an expression is never resolved: an expression's value is "
                "data",
                "put {\"$secret\": \"NAME\"} in the node's static 'input' instead"))
    for key, value in node.input.items():
        for field, ref in _refs(value, f"input.{key}"):
            one = _ref_problem(node, key, field, ref, scope, pack_of)
            if one is not None:
                found.append(one)
    return found


def _ref_problem(node: ChainNode, key: str, field: str, ref: dict[str, Any],
                 scope: Mapping[str, Secret], pack_of: Callable[[str], str]
                 ) -> dict[str, Any] | None:
    nid = node.node_id
    name = ref_name(ref)
    if name is None:
        return problem("secret_invalid", nid, field,
                       "this is not a secret reference",
                       'write a reference as {"$secret": "NAME"}, with nothing beside it')
    if key in node.input_map:
        return None  # the expression's value replaces this one: never resolved
    target = receiver(node.kind)
    if target is None:
        return problem(
            "secret_kind", nid, field,
            f"a {node.kind!r} node receives no secret; only tool and proc nodes do",
            "pass the secret to the tool or proc node that needs it", secret=name)
    secret = scope.get(name)
    if secret is None:
        near = Suggester(sorted(scope)).best(name)
        known = ", ".join(sorted(scope)[:20]) or "none"
        hint = (f"did you mean {near!r}? " if near else "") + (
            f"known secrets: {known}; configure it under [secrets] or send it in the "
            "request's 'secrets'")
        return problem("secret_unknown", nid, field,
                       f"secret {name!r} is not defined", hint, secret=name)
    if target == "tool":
        for tool in (node.name, node.fallback):
            if tool and not secret.allows_tool(tool, pack_of(tool)):
                return problem(
                    "secret_denied", nid, field,
                    f"secret {name!r} may not be passed to tool {tool!r}",
                    f"use a tool its 'tools' allow ({_listed(secret.tools)}), or have the "
                    "operator allow this one", secret=name)
        return None
    return _proc_problem(node, key, field, name, secret)


def _proc_problem(node: ChainNode, key: str, field: str, name: str,
                  secret: Secret) -> dict[str, Any] | None:
    nid = node.node_id
    if key in ("argv", "cmd"):
        return problem("secret_kind", nid, field,
                       f"secret {name!r} would be on a command line, which every local user "
                       "can read", "pass it in 'env' or 'stdin' instead",
                       secret=name)
    argv = node.input.get("argv", node.input.get("cmd"))
    if "argv" in node.input_map or "cmd" in node.input_map or not (
            isinstance(argv, list) and argv and isinstance(argv[0], str)):
        return problem("secret_kind", nid, field,
                       f"secret {name!r} goes to a process whose 'argv' is not static",
                       "write 'argv' in the node's 'input', not its input_map",
                       secret=name)
    if not secret.allows_executable(argv[0]):
        return problem(
            "secret_denied", nid, field,
            f"secret {name!r} may not be passed to executable {argv[0]!r}",
            f"use an executable its 'executables' allow ({_listed(secret.executables)}), "
            "or have the operator allow this one", secret=name)
    return None


def _listed(names: tuple[str, ...]) -> str:
    return ", ".join(names[:10]) if names else "none"


# ── at run time ─────────────────────────────────────────────────────────────


class SecretResolver:
    """One run's secrets: resolves references when an executor is called, and redacts
    every known value from what comes back (outputs, failures).

    Args:
        scope: name → :class:`~a2e_host.secrets.Secret` the run may reference
            (:meth:`HostSecrets.for_request`); not empty.
        pack_of: tool name → its tool pack (:class:`HostSecrets`'s).

    Attributes:
        redactor: the run's :class:`~a2e_host.redaction.Redactor` (every value of
            ``scope``).
    """

    __slots__ = ("scope", "redactor", "pack_of")

    def __init__(self, scope: Mapping[str, Secret],
                 pack_of: Callable[[str], str] = _no_pack) -> None:
        self.scope = dict(scope)
        self.pack_of = pack_of
        self.redactor = Redactor({n: s.value for n, s in self.scope.items()})

    def values(self) -> dict[str, str]:
        """Name → value, for :func:`a2e_host.secrets.register`."""
        return {name: secret.value for name, secret in self.scope.items()}

    def wrap(self, executors: Mapping[str, Executor]) -> dict[str, Executor]:
        """``executors`` (kind → executor), each resolving references before the call
        and redacting its output and failure after it."""
        return {kind: self._wrapped(executor) for kind, executor in executors.items()}

    def _wrapped(self, executor: Executor) -> Executor:
        async def call(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
            if receiver(node.kind) is not None:
                args = self.resolve(node, args)
            try:
                output = await executor(node, args, ctx)
            except Exception as exc:
                self.scrub_exception(exc)
                shown = self.redacted_failure(exc)
                if shown is not None:
                    raise NodeError(shown) from None
                raise
            return self.redactor.scrub(output)

        return call

    def resolve(self, node: ChainNode, args: dict[str, Any]) -> dict[str, Any]:
        """``args`` with every reference of the node's static input replaced by its value.

        Raises:
            NodeError: a secret the tool or executable may not receive, an unknown one
                (validation refuses both), or a request secret of a run resumed after a
                restart (request secrets are not stored).
        """
        out = args
        for key, value in node.input.items():
            if key in node.input_map or not has_secret_refs(value):
                continue
            if out is args:
                out = dict(args)
            out[key] = self._resolved(node, out, value)
        return out

    def _resolved(self, node: ChainNode, args: dict[str, Any], value: Any) -> Any:
        name = ref_name(value)
        if name is not None:
            return self._value(node, args, name)
        if isinstance(value, dict):
            return {k: self._resolved(node, args, v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._resolved(node, args, v) for v in value]
        return value

    def _value(self, node: ChainNode, args: dict[str, Any], name: str) -> str:
        secret = self.scope.get(name)
        if secret is None:
            raise NodeError(f"node {node.node_id!r} names secret {name!r}, which this run "
                            "does not have; define it or send it in the request's 'secrets'")
        if receiver(node.kind) == "tool":
            allowed = secret.allows_tool(node.name, self.pack_of(node.name))
            target = f"tool {node.name!r}"
        else:
            argv = args.get("argv", args.get("cmd"))
            argv0 = argv[0] if isinstance(argv, list) and argv else ""
            allowed = isinstance(argv0, str) and secret.allows_executable(argv0)
            target = f"executable {argv0!r}"
        if not allowed:
            raise NodeError(f"secret {name!r} may not be passed to {target} "
                            f"(node {node.node_id!r})")
        if secret.source == "request" and secret.value == placeholder(name):
            raise NodeError(f"request secret {name!r} is not kept across a host restart "
                            f"(node {node.node_id!r}); send the chain again with it")
        return secret.value

    def redacted_failure(self, exc: BaseException) -> str | None:
        """The redacted failure message of ``exc`` when, scrubbed, it still shows a
        secret value (``str(exc)`` is not its string ``args``: an ``OSError``'s
        ``filename``, a ``CalledProcessError``'s ``cmd``, a list in ``args``); None when
        it shows none or ``exc`` is a chain error (its failure is its scrubbed
        ``message``). The caller raises a :class:`~a2e_host.exceptions.NodeError` with
        it instead: the same code, retry decision and sentence, minus the value, for
        the failure checkpoint a durable run stores as it is (no frame encoder)."""
        if isinstance(exc, ChainError):
            return None
        try:
            text = failure_message_of(exc)
        except Exception:  # noqa: BLE001 — a __str__ that raises shows nothing
            return f"{type(exc).__name__}: (its message could not be read)"
        shown = self.redactor.redact(text)
        return None if shown is text else shown

    def scrub_exception(self, exc: BaseException) -> None:
        """Redact, in place, the message, ``args`` and ``detail`` of ``exc`` and of the
        exceptions it was raised from (its ``__cause__`` / ``__context__`` chain)."""
        redactor = self.redactor
        seen: set[int] = set()
        current: BaseException | None = exc
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            current.args = tuple(redactor.redact(a) if isinstance(a, str) else a
                                 for a in current.args)
            if isinstance(current, A2EError):
                current.message = redactor.redact(current.message)
                current.detail = redactor.scrub(current.detail)
            current = current.__cause__ or current.__context__
