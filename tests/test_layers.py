"""The package's layers, read from its import graph: no import reaches upward, and no
import cycle runs at module level.

The graph is built from the source (``ast``), so it sees every import: at module level,
inside functions (lazy imports, which run later but still tie the modules together) and
under ``TYPE_CHECKING``. The layers, lowest first: the shared modules at the top of the
package (types, errors, config, keys, watching...), then the backends, models and
privacy filters, then the engine, then what works through it (history import, migrate,
export and import), then the server, and the CLI on top.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "memd"

LOWER = ("memd.engine", "memd.backends", "memd.models", "memd.privacy", "memd.imports",
         "memd.migrate", "memd.transfer")
UPPER = ("memd.server", "memd.cli")
# A backend's own modules; memd.backends.common (the SQL and migrations both share) is
# public to the tools that read a store's schema (doctor, migrate).
BACKEND_INTERNALS = ("memd.backends.sqlite.", "memd.backends.postgres.")


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    line: int
    lazy: bool  # inside a function: runs when the function does
    typing_only: bool  # under ``if TYPE_CHECKING:``

    def __str__(self) -> str:
        kind = "lazy " if self.lazy else "typing " if self.typing_only else ""
        return f"{self.importer}:{self.line} -> {kind}{self.imported}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(node: ast.AST, lazy: bool = False, typing_only: bool = False
             ) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, lazy, typing_only
        in_function = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
        guarded = isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)
        if guarded:
            assert isinstance(child, ast.If)
            for stmt in child.body:
                yield from _imports(ast.Module(body=[stmt], type_ignores=[]), lazy, True)
            for stmt in child.orelse:
                yield from _imports(ast.Module(body=[stmt], type_ignores=[]), lazy,
                                    typing_only)
            continue
        yield from _imports(child, lazy or in_function, typing_only)


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The memd modules an import statement loads (``from a import b`` loads ``a.b``
    when that is a module, else ``a``)."""
    known = modules()
    if isinstance(node, ast.Import):
        yield from (a.name for a in node.names if a.name.split(".")[0] == "memd")
        return
    base = node.module or ""
    if node.level:
        package = module if known[module].name == "__init__.py" else module.rpartition(".")[0]
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(parts + ([base] if base else []))
    if base.split(".")[0] != "memd":
        return
    for alias in node.names:
        full = f"{base}.{alias.name}"
        yield full if full in known else base


@cache
def edges() -> tuple[Edge, ...]:
    found = []
    for module, path in modules().items():
        tree = ast.parse(path.read_text("utf-8"), str(path))
        for node, lazy, typing_only in _imports(tree):
            for target in _targets(module, node):
                if target != module:
                    found.append(Edge(module, target, node.lineno, lazy, typing_only))
    return tuple(found)


def _within(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, ()):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _graph(keep: object = lambda e: True) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for e in edges():
        if keep(e):  # type: ignore[operator]
            graph.setdefault(e.importer, set()).add(e.imported)
    return graph


def test_the_graph_sees_the_package() -> None:
    """The parser finds what is there: a known module-level, lazy and typing import."""
    found = {(e.importer, e.imported, e.lazy, e.typing_only) for e in edges()}
    assert ("memd.engine.memory", "memd.backends.base", False, False) in found
    assert ("memd.cli.common", "memd.server.discovery", True, False) in found
    assert ("memd.registry", "memd.backends.base", False, True) in found


def test_no_lower_layer_imports_the_server_or_the_cli() -> None:
    upward = [str(e) for e in edges()
              if _within(e.importer, *LOWER) and _within(e.imported, *UPPER)]
    assert upward == []


def test_only_the_cli_imports_the_cli() -> None:
    assert [str(e) for e in edges()
            if _within(e.imported, "memd.cli") and not _within(e.importer, "memd.cli")] == []


# What the CLI may import of the server: what it starts (the daemon's app, its listener,
# config watching and local model transport; the MCP stdio server and its tools) and the
# daemon's record in the data dir (written by the daemon, read to find it). What it
# prints of API objects comes from memd.engine.shapes, below both.
CLI_MAY_START = frozenset({
    "memd.server.app", "memd.server.listen", "memd.server.watch",
    "memd.server.local_upstream", "memd.server.mcp_server", "memd.server.mcp_tools",
    "memd.server.discovery"})


def _cli_reaching_into_the_server(found: tuple[Edge, ...]) -> list[str]:
    return [str(e) for e in found if _within(e.importer, "memd.cli")
            and _within(e.imported, "memd.server") and e.imported not in CLI_MAY_START]


def test_the_cli_imports_of_the_server_only_what_it_starts() -> None:
    assert _cli_reaching_into_the_server(edges()) == []
    planted = Edge("memd.cli.memories", "memd.server.api", 1, lazy=True, typing_only=False)
    assert _cli_reaching_into_the_server((planted,)) == [str(planted)]


def test_the_server_reaches_no_backend() -> None:
    """The server talks to the engine; the shared types (queued jobs included) live in
    memd.types, not in the backends."""
    assert [str(e) for e in edges()
            if _within(e.importer, "memd.server") and _within(e.imported, "memd.backends")
            ] == []


@pytest.mark.parametrize("importer", ["memd.cli", "memd.doctor", "memd.doctor_store",
                                      "memd.server"])
def test_no_backend_internals_from_the_edges(importer: str) -> None:
    """The CLI, doctor and the server use a backend through its package's public names
    (memd.backends.sqlite), encryption keys through memd.keys."""
    assert [str(e) for e in edges() if _within(e.importer, importer)
            and e.imported.startswith(BACKEND_INTERNALS)] == []


def test_the_cli_has_no_import_cycle() -> None:
    """Not even through lazy or typing imports: the command modules import
    memd.cli.common, and memd.cli imports them."""
    graph = {k: {v for v in vs if _within(v, "memd.cli")}
             for k, vs in _graph().items() if _within(k, "memd.cli")}
    assert _cycles(graph) == []


def test_no_import_cycle_at_module_level() -> None:
    """What runs on import has no cycle anywhere in the package (a package's
    ``__init__`` importing its own modules, which import their package for a shared
    name, counts)."""
    graph = _graph(lambda e: not e.lazy and not e.typing_only)
    assert _cycles(graph) == []


def test_no_import_cycle_at_all() -> None:
    """Not even through lazy or typing imports: an engine part typed against what it
    needs of ``Memd`` names a protocol, not ``Memd`` (which is built from the parts).
    The message lists every cycle found."""
    cycles = _cycles(_graph())
    assert cycles == [], "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    """A typing import back to ``Memd`` from one of its parts, as the notes folder had."""
    graph = _graph()
    graph.setdefault("memd.engine.learning.notes", set()).add("memd.engine.memory")
    assert any({"memd.engine.memory", "memd.engine.learning.notes"} <= set(c)
               for c in _cycles(graph))


def _private_imports(tree: ast.AST) -> list[str]:
    return [f"{node.module}.{alias.name}" for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("memd")
            for alias in node.names if alias.name.startswith("_")]


def test_no_module_imports_another_modules_private_names() -> None:
    """A name another module needs is public where it is defined."""
    found = [f"{module}: {name}" for module, path in modules().items()
             for name in _private_imports(ast.parse(path.read_text("utf-8")))]
    assert found == []
    assert _private_imports(ast.parse("from memd.engine.x import _y")) == ["memd.engine.x._y"]


MODULE_LINES = 500  # a module longer than this is split by what its parts do


def test_no_module_of_the_package_is_over_the_limit() -> None:
    long = {m: n for m, path in modules().items()
            if (n := len(path.read_text("utf-8").splitlines())) > MODULE_LINES}
    assert long == {}
