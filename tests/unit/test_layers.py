"""Import contracts, checked on the source (ARCHITECTURE.md: imports point down, no cycles).

- supervisor/core/ (what the API and the daemon share) imports nothing else of supervisor/;
- the API stands on supervisor.core alone;
- services never import each other: they meet in app.py;
- no daemon module uses supervisor/local/ (the PostgreSQL for `up`, tests and bench);
- supervisor/proc/ (child processes, not runs) imports only itself and core/log;
- no module imports, directly or not, one that imports it (api/ included), and no
  dashboard page imports another;
- no module of supervisor/ or api/ is over LINE_LIMIT lines.
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
    "registry", "runlife", "sdnotify", "verdict",
}  # fmt: skip
TOP = {"__init__", "__main__", "app", "checks", "cli", "cli_format", "compose", "instruments",
       "reload", "upapi"}  # fmt: skip


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
    found = _cycle(_graph())
    assert found is None, "import cycle: " + " -> ".join(found or [])


# ---------------------------------------------------------------- the whole tree's shape

LINE_LIMIT = 400  # a file longer than this holds more than one concept: split it


def _api_graph() -> dict[str, set[str]]:
    """api/'s own modules ("api.ui.site") and the api modules each imports."""
    api = ROOT / "api"
    names = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in api.rglob("*.py")}
    names = {n.removesuffix(".__init__") for n in names}

    def resolve(name: str) -> str | None:
        while name and name not in names:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for path in sorted(api.rglob("*.py")):
        me = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module.split(".")[0] == "api":
                    for alias in node.names:  # from api import problems: a module
                        deps.add(resolve(f"{node.module}.{alias.name}") or node.module)
            elif isinstance(node, ast.Import):
                deps |= {resolve(a.name) or a.name for a in node.names if a.name.startswith("api")}
        graph[me] = {d for d in deps if d and d != me and d != "api"}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        for dep in sorted(graph.get(module, ())):
            if found := visit(dep, [*path, module]):
                return found
        done.add(module)
        return None

    for module in graph:
        if found := visit(module, []):
            return found
    return None


def test_no_module_of_the_daemon_or_the_api_is_over_the_line_limit() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in sorted([*PKG.rglob("*.py"), *(ROOT / "api").rglob("*.py")])
        if (n := len(p.read_text().splitlines())) > LINE_LIMIT
    }
    assert not long, f"over {LINE_LIMIT} lines: {long}"


def test_the_process_machinery_imports_only_itself_and_the_log() -> None:
    """supervisor/proc/ speaks of processes, not runs: nothing above it reaches in."""
    for module, deps in _graph().items():
        if module.startswith("proc."):
            outside = {d for d in deps if not d.startswith("proc.") and d != "core.log"}
            assert not outside, f"{module} imports {outside}"


def test_the_api_has_no_import_cycle() -> None:
    found = _cycle(_api_graph())
    assert found is None, "import cycle: " + " -> ".join(found or [])


def test_no_dashboard_page_imports_another() -> None:
    """Pages share helpers through leaf modules (the request layer), never each other."""
    for module, deps in _api_graph().items():
        if module.startswith("api.ui.pages_"):
            pages = {d for d in deps if d.startswith("api.ui.pages_")}
            assert not pages, f"{module} imports {pages}"


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
