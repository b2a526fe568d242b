"""The layers of ``src/tunekit`` import only downward, and no two modules import each other (directly or around a
circle). Read from the source with ``ast`` (nothing is imported), function-level imports included, since a lazy
import is still a dependency; imports under ``if TYPE_CHECKING:`` are annotations only and do not count.

The order, lowest first (docs/architecture.md draws the same picture)::

    config < data < model < tiny < train < plan < export < infer < flow < serve = webui < cli

``flow`` is ``tunekit/flow.py``, the one train flow: it needs ``plan`` (auto-fit, the checkpointing decision),
``train`` and ``infer`` (do_predict), and only the CLI (and so the board, which runs the CLI) calls it. The
top-level helpers ``errors``, ``env``, ``messages`` (keyed messages) and the package ``host`` (CPU-host machinery:
malloc tuning, the collector pause, the heap guard; a run decides whether to import it, ``train/decisions``) (and the
package ``tunekit`` itself) may be imported by every layer and import only each other.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tests.helpers import ROOT

SRC = ROOT / "src"
ORDER = {
    "config": 0,
    "data": 1,
    "model": 2,
    "tiny": 3,
    "train": 4,
    "plan": 5,
    "export": 6,
    "infer": 7,
    "flow": 8,
    "serve": 9,
    "webui": 9,
    "cli": 10,
}
HELPERS = {"errors", "env", "messages", "host"}


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in sorted((SRC / "tunekit").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if package else parts)] = (path, package)
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node, at any depth, except those inside ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph() -> dict[str, set[str]]:
    """``module -> modules of tunekit it imports`` (``from pkg import name`` counts as ``pkg.name`` when that is a
    module, else as ``pkg``)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, (path, package) in modules.items():
        here = name if package else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                bases, names = [a.name for a in node.names], []
            else:
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    bases = [".".join(base + ([node.module] if node.module else []))]
                else:
                    bases = [node.module or ""]
                names = [a.name for a in node.names]
            for base in bases:
                if not (base == "tunekit" or base.startswith("tunekit.")):
                    continue
                subs = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
                targets.update(subs)
                if len(subs) < len(names) or not names:
                    owner = base
                    while owner not in modules:  # import tunekit.a.b.c where c is not a module: its package
                        owner = owner.rpartition(".")[0]
                    targets.add(owner)
        graph[name] = targets - {name}
    return graph


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "tunekit"


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for source, targets in sorted(graph.items()):
        src_layer = layer(source)
        for target in sorted(targets):
            dst_layer = layer(target)
            if dst_layer in HELPERS or target == "tunekit":
                continue
            if src_layer in HELPERS or src_layer == "tunekit":
                bad.append(f"{source} -> {target} (a top-level helper imports a layer)")
            elif ORDER[dst_layer] > ORDER[src_layer]:
                bad.append(f"{source} -> {target} ({src_layer} is below {dst_layer})")
    return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for node in sorted(graph):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_every_layer_is_known():
    unknown = sorted({layer(m) for m in _modules()} - set(ORDER) - HELPERS - {"tunekit"})
    assert unknown == [], f"new top-level module(s) {unknown}: give them a place in ORDER (and docs/architecture.md)"


def test_no_layer_imports_a_higher_one():
    assert upward_imports(import_graph()) == []


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_the_checker_sees_lazy_relative_and_upward_imports():
    """The checker itself: a function-level relative import upward and a two-module circle are both found."""
    graph = {"tunekit.train.a": {"tunekit.infer.b"}, "tunekit.infer.b": {"tunekit.train.a"}, "tunekit.errors": set()}
    assert upward_imports(graph) == ["tunekit.train.a -> tunekit.infer.b (train is below infer)"]
    assert cycles(graph) == [["tunekit.infer.b", "tunekit.train.a"]]
    tree = ast.parse("def f():\n    from ..infer import engine\nif TYPE_CHECKING:\n    from ..cli import main\n")
    assert [(n.level, n.module) for n in _imports(tree)] == [(2, "infer")]
