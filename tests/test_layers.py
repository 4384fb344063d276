"""The floors hold: ``tinygpt`` imports neither ``app`` nor ``worker``, ``app`` never imports ``worker``, and no
module imports another that imports it back (imports inside functions included: a circle hidden in a
function is still a circle)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tinygpt", "app", "worker")


def module_imports() -> dict[str, set[str]]:
    """Each module of the three packages (not the migrations) and the modules of the three it imports."""
    paths = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts:
                parts = path.relative_to(ROOT).with_suffix("").parts
                paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in imports_in(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join([*base, *([node.module] if node.module else [])])
                found |= {target, *(f"{target}.{alias.name}" for alias in node.names)}
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
        graph[name] = {m for m in found if m in paths and m != name}
    return graph


def imports_in(tree: ast.Module) -> list[ast.AST]:
    """Every import of a module, in functions too, but not in its ``if __name__ == "__main__":`` block (a program
    run as ``python -m``, not something importing the module does)."""
    main = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
    skipped = {id(x) for block in main for x in ast.walk(block)}
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom) and id(n) not in skipped]


def test_the_library_imports_no_layer_above_it():
    graph = module_imports()
    assert {(m, i) for m, deps in graph.items() if m.startswith("tinygpt") for i in deps
            if not i.startswith("tinygpt")} == set()
    # app.cli is the whole program's command (the `tinygpt` script: serve, app, worker): the top floor
    assert {(m, i) for m, deps in graph.items() if m.startswith("app") and m != "app.cli" for i in deps
            if i.startswith("worker")} == set()


def test_no_import_circle():
    graph = module_imports()
    cycles = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    cycles.append(path)
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert cycles == []
