"""Import contracts, checked on the source (ARCHITECTURE.md: imports point down, no cycles).

- the API stands on the shared core alone;
- the core imports nothing above it (no service, no executor, no app);
- services never import each other: they meet in app.py;
- the local-server tooling (`punchclock up`, tests, bench) is used by no daemon module;
- no module imports, directly or not, one that imports it.
Every module of supervisor/ belongs to exactly one layer: a new one must be placed here.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CORE = {
    "__init__", "config", "db", "domain", "errors", "health", "httpd", "jobs", "jobspec", "log",
    "metrics", "migrator", "model", "planning", "runs", "schedule", "store",
}  # fmt: skip
LOCAL = {"pgbin", "pgchain", "pgserver", "up", "watchdog"}
SERVICES = {
    "claimer",
    "completer",
    "fence",
    "heartbeater",
    "listener",
    "planner",
    "pruner",
    "reaper",
}
DAEMON = {
    "executor", "faces", "keeper", "keeperd", "lease", "loop", "orphans", "output",
    "parentwatch", "registry", "runner", "sdnotify", "spawn", "tree", "verdict",
}  # fmt: skip
TOP = {"__main__", "app", "cli", "instruments"}
LAYERS = {"core": CORE, "local": LOCAL, "services": SERVICES, "daemon": DAEMON, "top": TOP}


def _imports(path: Path) -> set[str]:
    """The supervisor modules `path` imports (anywhere in the file, TYPE_CHECKING too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] != "supervisor":
                continue
            if len(parts) > 1:
                found.add(parts[1])
            else:  # from supervisor import lease, __version__
                found |= {
                    a.name for a in node.names if (ROOT / "supervisor" / f"{a.name}.py").exists()
                }
                found.add("__init__")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "supervisor":
                    found.add(parts[1] if len(parts) > 1 else "__init__")
    return found


def _graph() -> dict[str, set[str]]:
    return {p.stem: _imports(p) - {p.stem} for p in sorted((ROOT / "supervisor").glob("*.py"))}


def test_every_module_has_one_layer() -> None:
    placed = [m for layer in LAYERS.values() for m in layer]
    assert len(placed) == len(set(placed)), "a module is in two layers"
    assert set(_graph()) == set(placed), "place new modules (or drop removed ones) in LAYERS"


def test_the_api_stands_on_the_core_alone() -> None:
    for path in sorted((ROOT / "api").glob("*.py")):
        assert _imports(path) <= CORE, f"api/{path.name} imports {_imports(path) - CORE}"


def test_the_core_imports_nothing_above_it() -> None:
    for module, deps in _graph().items():
        if module in CORE:
            assert deps <= CORE, f"core module {module} imports {deps - CORE}"


def test_services_never_import_each_other() -> None:
    for module, deps in _graph().items():
        if module in SERVICES:
            assert not deps & SERVICES, f"service {module} imports {deps & SERVICES}"


def test_no_daemon_module_uses_the_local_server_tooling() -> None:
    for module, deps in _graph().items():
        if module in CORE | SERVICES | DAEMON:
            assert not deps & LOCAL, f"{module} imports {deps & LOCAL}"


def test_imports_have_no_cycles() -> None:
    graph = _graph()
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError(
                "import cycle: " + " -> ".join([*path[path.index(module) :], module])
            )
        if module in done:
            return
        for dep in sorted(graph.get(module, ())):
            visit(dep, [*path, module])
        done.add(module)

    for module in graph:
        visit(module, [])
