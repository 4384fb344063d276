"""The floors hold: ``tinygpt`` imports neither ``app`` nor ``worker``, ``app`` never imports ``worker``, and no
module imports another that imports it back (imports inside functions included: a circle hidden in a
function is still a circle). And the processes that do not train start without torch."""

from __future__ import annotations

import ast
import subprocess
import sys
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


WITHOUT_TORCH = """
import sys
from fastapi.testclient import TestClient
import app.cli, tinygpt.cli, worker.main
from app.main import create_app
from app.settings import Settings

app.cli.extra_commands()
settings = Settings(home=sys.argv[1], holmes_path=sys.argv[2])
with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
    for page in ("/", "/partials/runs", "/compare", "/api/runs", "/api/options", "/api/presets"):
        assert client.get(page).status_code == 200, page
    run = {"preset": "tiny", "device": "cpu", "steps": 5, "batch_size": 4}
    assert client.post("/api/runs", json=run).status_code == 201
    assert client.post("/api/runs", json={**run, "device": "cuda:x"}).status_code == 422
print("torch" in sys.modules)
"""


def test_the_app_the_worker_loop_and_the_command_start_without_torch(tmp_path, slice_path):
    """Importing torch costs a process about 2 s of CPU (more on a busy machine): the dashboard's app, its worker
    loop and the `tinygpt` command import it only to train, sample, load a checkpoint or probe a backend other
    than the CPU (the forms' device lists). A fresh interpreter: pages without a form, the options, a CPU run's
creation, then whether torch came in."""
    done = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, str(tmp_path / "home"), str(slice_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "False"
