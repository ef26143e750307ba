"""One place for each of: wire errors, chain failures, node-kind facts; and a host framework
that names no capability, read from the source.

Each check walks the package and its first-party plugins with :mod:`ast`. Where the code
still has copies, they are listed here by file and source text (a ratchet, like
``NOT_YET_SPLIT`` in ``test_module_sizes.py``): a new copy fails the check, and so does
removing one without removing its entry.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator

from tests.support import REPO

KIND_NAMES = frozenset({"tool", "skill", "proc", "branch", "map"})

HOST_FRAMEWORK = (
    "a2e_host/runtime", "a2e_host/transports", "a2e_host/codec.py", "a2e_host/messages.py",
    "a2e_host/session.py", "a2e_host/plugin.py",
)
"""What must know capabilities only through plugins (``errors.py`` is left out: it is
where ``ChainFailure`` is made, next to the wire ``error``)."""


@functools.cache
def _parsed(root: str) -> tuple[tuple[str, str, ast.Module], ...]:
    """Every module under ``root`` (path, text, tree), parsed once for all the checks (the
    trees are only read)."""
    path = REPO / root
    found = []
    for file in sorted([path] if path.is_file() else path.rglob("*.py")):
        text = file.read_text(encoding="utf-8")
        found.append((file.relative_to(REPO).as_posix(), text, ast.parse(text, str(file))))
    return tuple(found)


def modules(*roots: str) -> Iterator[tuple[str, str, ast.Module]]:
    for root in roots:
        yield from _parsed(root)


def segment(text: str, node: ast.AST) -> str:
    return " ".join((ast.get_source_segment(text, node) or "").split())


def calls_of(name: str, *roots: str) -> set[tuple[str, str]]:
    found = set()
    for path, text, tree in modules(*roots):
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Name) and node.func.id == name)
                or (isinstance(node.func, ast.Attribute) and node.func.attr == name)
            ):
                found.add((path, segment(text, node)))
    return found


# ── wire errors and chain failures: made in a2e_host/errors.py ────────────────


def test_wire_error_messages_are_built_only_in_errors() -> None:
    built = {path for path, _ in calls_of("ErrorMessage", "a2e_host", "plugins")}
    assert built <= {"a2e_host/errors.py"}


CHAIN_FAILURES_BUILT_ELSEWHERE = {
    # placeholders of the run display for a failed response without an error (not wire)
    ("a2e_host/progress.py", 'ChainFailure(code="error")'),
    ("a2e_host/commands/run_display.py", 'ChainFailure(code="error")'),
}


def test_chain_failures_are_built_only_in_errors() -> None:
    built = {(path, text) for path, text in calls_of("ChainFailure", "a2e_host", "plugins")
             if path != "a2e_host/errors.py"}
    assert built == CHAIN_FAILURES_BUILT_ELSEWHERE


def test_no_exception_attribute_is_read_with_getattr() -> None:
    reads = set()
    for path, text, tree in modules("a2e_host", "plugins"):
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and node.args
                    and isinstance(node.args[0], ast.Name)
                    and node.args[0].id in ("exc", "err", "error", "e", "cause")):
                reads.add((path, segment(text, node)))
    assert reads == set()


# ── node-kind facts: in a2e_host/chains/kinds.py ──────────────────────────────

KIND_FACTS_ELSEWHERE = {
    # the scheduler's runners of the control kinds, keyed by name beside the table
    ("a2e_host/chains/scheduler.py", '{"branch": run_branch, "map": run_map}'),
    # the executors of the executed kinds
    ("a2e_host/chains/toolbox.py",
     '{ "tool": self.run_tool, "skill": self.skills.run_skill, "proc": self.run_proc, }'),
    # front ends: the client's default caps, run's progress model and its hints
    ("a2e_host/client/session.py", '("chains", "tools", "proc", "skill")'),
    ("a2e_host/commands/common.py", 'kind == "proc"'),
    ("a2e_host/progress.py", 'n.kind == "map"'),
    ("a2e_host/progress.py", 'node.kind == "map"'),
}


def _is_kind(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute):
        # graph's Edge.kind is a drawing style (ControlEdge.style), not a node kind
        return node.attr == "kind" and not (
            isinstance(node.value, ast.Name) and node.value.id in ("e", "edge"))
    if isinstance(node, ast.Name):
        return node.id == "kind"
    return (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
            and node.slice.value == "kind")


def _names(node: ast.AST) -> set[str]:
    elts = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", [])
    return {e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}


def test_node_kind_facts_live_in_the_kind_table() -> None:
    found = set()
    for path, text, tree in modules("a2e_host", "plugins"):
        if path == "a2e_host/chains/kinds.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(_is_kind(s) for s in sides) and any(
                    isinstance(s, ast.Constant) and s.value in KIND_NAMES for s in sides
                ):
                    found.add((path, segment(text, node)))
            elif isinstance(node, ast.Dict) and len(_names(node) & KIND_NAMES) >= 2:
                found.add((path, segment(text, node)))
            elif isinstance(node, ast.Set | ast.Tuple | ast.List) and (
                {"skill", "proc"} <= _names(node)
            ):
                found.add((path, segment(text, node)))
    assert found == KIND_FACTS_ELSEWHERE


# ── the host framework names no capability ───────────────────────────────────

CHAIN_WORDS_IN_THE_FRAMEWORK: set[tuple[str, str]] = set()


def _docstrings(tree: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for stmt in body:
                if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                    ids.add(id(stmt.value))
    return ids


def test_the_host_framework_names_no_chain_message_or_capability() -> None:
    found = set()
    for path, _, tree in modules(*HOST_FRAMEWORK):
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docs
                    and ("chain/" in node.value or node.value == "chains")):
                found.add((path, node.value))
    assert found == CHAIN_WORDS_IN_THE_FRAMEWORK
