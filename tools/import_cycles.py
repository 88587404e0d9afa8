#!/usr/bin/env python3
"""List the import cycles among the modules of a package (matchbox-core's by default).

Usage: python tools/import_cycles.py [SOURCE_ROOT] [PACKAGE]

An edge ``a -> b`` is any import of ``b`` written in ``a``'s source: at module level or
inside a function (a function-local import still makes ``a`` depend on ``b``), but not
under ``if TYPE_CHECKING:`` (never run).  ``from p import name`` is an import of the
submodule ``p.name`` where there is one, else of ``p``; importing ``p.q.r`` also runs
the packages ``p`` and ``p.q``, which count as imported too -- but for a package that
contains the importing module: it is running already, so an import through it (or
``import matchbox`` to read ``matchbox.__path__``) does not depend on its body, and
only ``from p import name``, of a name its ``__init__`` defines, counts.

A cycle is a strongly connected component of more than one module (or a module that
imports itself); the script prints one per line, with a shortest loop through it, and
exits 1 if there is any.  Standard library only: ``ast`` reads the sources, nothing is
imported.
"""

from __future__ import annotations

import ast
import sys
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = ROOT / "packages" / "matchbox-core" / "src"
DEFAULT_PACKAGE = "matchbox"


def modules(source: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` under ``source``: dotted name -> file."""
    found = {}
    for path in sorted((source / package).rglob("*.py")):
        parts = list(path.relative_to(source).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree``, at any depth, outside ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def imports_of(name: str, path: Path, known: dict[str, Path], package: str) -> set[str]:
    """The modules of ``known`` that module ``name`` (file ``path``) imports."""
    is_package = path.name == "__init__.py"
    # The packages that contain this module are running before it: importing a
    # submodule through one of them, or binding it (``import matchbox``), is no
    # dependency on its body; taking a name its body defines is.
    inside = {".".join(name.split(".")[:end]) for end in range(1, name.count(".") + 1)}
    if is_package:
        inside.add(name)
    targets: set[str] = set()

    def add(module: str) -> None:
        # The module and every package between it and the top-level one, but those
        # that contain this module.
        parts = module.split(".")
        for end in range(1, len(parts) + 1):
            prefix = ".".join(parts[:end])
            if prefix in known and prefix not in inside:
                targets.add(prefix)

    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
            continue
        if node.level:
            base = name.split(".") if is_package else name.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)]
            origin = ".".join(base + ([node.module] if node.module else []))
        else:
            origin = node.module or ""
        if origin.split(".")[0] != package:
            continue
        add(origin)
        for alias in node.names:
            submodule = f"{origin}.{alias.name}"
            if submodule in known:
                add(submodule)
            elif origin in inside and origin != name:
                targets.add(origin)  # a name defined by the body of a containing package
    return targets


def graph(source: Path = DEFAULT_SOURCE, package: str = DEFAULT_PACKAGE
          ) -> dict[str, set[str]]:
    known = modules(source, package)
    return {name: imports_of(name, path, known, package) for name, path in known.items()}


def components(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``edges`` (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                found.append(sorted(component))
    return found


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: components of more than one module, or a module importing itself."""
    return sorted(c for c in components(edges)
                  if len(c) > 1 or c[0] in edges.get(c[0], ()))


def loop(edges: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest loop through the first module of ``component``, inside it."""
    start, members = component[0], set(component)
    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(edges[node] & members):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return list(reversed(path)) + [start]
            if child not in previous:
                previous[child] = node
                queue.append(child)
    return [start, start]


def main(argv: list[str]) -> int:
    source = Path(argv[0]) if argv else DEFAULT_SOURCE
    package = argv[1] if len(argv) > 1 else DEFAULT_PACKAGE
    edges = graph(source, package)
    found = cycles(edges)
    for component in found:
        print(f"{len(component)} modules: {', '.join(component)}")
        print(f"    loop: {' -> '.join(loop(edges, component))}")
    print(f"{len(found)} import cycle(s) among {len(edges)} modules of {package}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
