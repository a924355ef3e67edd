"""Import contracts, checked on the source (ARCHITECTURE.md: imports point down, no cycles).

- supervisor/core/ (what the API and the daemon share) imports nothing else of supervisor/;
- the API stands on supervisor.core alone;
- services never import each other: they meet in app.py;
- no daemon module uses supervisor/local/ (the PostgreSQL for `up`, tests and bench);
- no module imports, directly or not, one that imports it.
Every top-level module of supervisor/ is placed in one layer here: a new one must be too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "supervisor"

SERVICES = {
    "census",
    "claimer",
    "completer",
    "fence",
    "heartbeater",
    "listener",
    "livetail",
    "notifier",
    "planner",
    "pruner",
    "reaper",
}
DAEMON = {
    "claimpace", "duties", "executor", "faces", "inflight", "lease", "loop",
    "outbound",
    "registry", "sdnotify", "verdict",
}  # fmt: skip
TOP = {"__init__", "__main__", "app", "checks", "cli", "cli_format", "compose", "instruments",
       "reload"}  # fmt: skip


def _module(path: Path) -> str:
    """supervisor/core/store.py -> "core.store"; supervisor/app.py -> "app"."""
    return ".".join(path.relative_to(PKG).with_suffix("").parts)


def _exists(name: str) -> bool:
    return (PKG / Path(*name.split("."))).with_suffix(".py").exists()


def _imports(path: Path) -> set[str]:
    """The supervisor modules `path` imports (anywhere in the file, TYPE_CHECKING too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] != "supervisor":
                continue
            base = ".".join(parts[1:])
            for alias in node.names:  # from supervisor.core import schedule: a module
                name = f"{base}.{alias.name}" if base else alias.name
                found.add(name if _exists(name) else (base or "__init__"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "supervisor":
                    found.add(".".join(parts[1:]) or "__init__")
    return {m if _exists(m) else f"{m}.__init__" for m in found}


def _graph() -> dict[str, set[str]]:
    return {_module(p): _imports(p) - {_module(p)} for p in sorted(PKG.rglob("*.py"))}


def _layer(module: str) -> str:
    if module.startswith(("core.", "local.", "proc.")):
        return module.split(".", maxsplit=1)[0]
    for name, layer in (("services", SERVICES), ("daemon", DAEMON), ("top", TOP)):
        if module in layer:
            return name
    raise AssertionError(f"supervisor/{module}.py is in no layer: place it in test_layers.py")


def test_every_module_has_one_layer() -> None:
    assert not (SERVICES & DAEMON or SERVICES & TOP or DAEMON & TOP), "a module in two layers"
    for module in _graph():
        _layer(module)
    top_level = {m for m in _graph() if "." not in m}
    assert top_level == SERVICES | DAEMON | TOP, "drop removed modules from the layers"


def test_the_core_imports_nothing_else_of_supervisor() -> None:
    for module, deps in _graph().items():
        if _layer(module) == "core":
            assert all(_layer(d) == "core" for d in deps), f"{module} imports {deps}"


def test_the_api_stands_on_the_core_alone() -> None:
    for path in sorted((ROOT / "api").rglob("*.py")):  # the dashboard (api/ui/) too
        deps = _imports(path) - {"__init__"}  # __version__
        where = path.relative_to(ROOT)
        assert all(_layer(d) == "core" for d in deps), f"{where} imports {deps}"


def test_only_the_data_layer_names_the_drivers_errors() -> None:
    """asyncpg's exceptions are translated in core/db.py (DB_ERRORS, CONNECT_ERRORS) and
    core/sql.py (UniqueConflict, RefusedValue); everything else catches those."""
    named = re.compile(r"asyncpg\.(exceptions\b|\w*(Error|NotMatched)\b)")
    allowed = {PKG / "core" / "db.py", PKG / "core" / "sql.py"}
    for path in sorted([*PKG.rglob("*.py"), *(ROOT / "api").rglob("*.py")]):
        if path not in allowed:
            hits = named.findall(path.read_text())
            assert not hits, f"{path.relative_to(ROOT)} names asyncpg errors: {hits}"


def test_services_never_import_each_other() -> None:
    for module, deps in _graph().items():
        if module in SERVICES:
            assert not deps & SERVICES, f"service {module} imports {deps & SERVICES}"


def test_no_daemon_module_uses_the_local_server_tooling() -> None:
    for module, deps in _graph().items():
        if _layer(module) in ("core", "services", "daemon"):
            assert not [d for d in deps if _layer(d) == "local"], f"{module} imports {deps}"


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
