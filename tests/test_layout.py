"""The package's modules import each other in one direction: no import circle.

The graph is read from the source with :mod:`ast`, not from a run, so every import counts
wherever it is written: at module level and inside a function alike (a lazy import is still
a dependency).  An import under ``if TYPE_CHECKING:`` is not one (it never runs), and a
module's node is the module itself: importing ``schedverify.cost.memory`` is an edge to it,
not also to the packages above it, which Python runs first but which are not what the
module reads.  ``from PACKAGE import NAME`` is an edge to the submodule ``NAME`` when there
is one, else to the package.

docs/layout.md shows the graph, layer by layer, generated from the same function
(``python tests/test_layout.py`` rewrites it; a test holds it equal)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "schedverify"
LAYOUT = ROOT / "docs" / "layout.md"


def _name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every Import and ImportFrom that can run (not under ``if TYPE_CHECKING``)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                stack.extend(child.orelse)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child
            stack.append(child)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the package's modules it imports."""
    modules = {_name(p, package): p for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        out: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                out |= {a.name for a in node.names if a.name in modules}
                continue
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target not in modules:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in modules:
                    out.add(sub)
                elif not (package.parent / (sub.replace(".", "/") + ".pyi")).exists():  # not a C extension
                    out.add(target)
        graph[name] = out - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph)))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def layers(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules by layer: layer 0 imports nothing of the package, layer k only modules of
    lower layers (the graph has no circle)."""
    level: dict[str, int] = {}

    def depth(v: str) -> int:
        if v not in level:
            level[v] = 0
            level[v] = 1 + max((depth(w) for w in graph[v]), default=-1)
        return level[v]

    for v in graph:
        depth(v)
    out: list[list[str]] = [[] for _ in range(max(level.values()) + 1)]
    for v, k in level.items():
        out[k].append(v)
    return [sorted(x) for x in out]


def layout_text(graph: dict[str, set[str]]) -> str:
    lines = ["# How the package is layered", "",
             "<!-- generated by `python tests/test_layout.py` from the imports in the source; "
             "tests/test_layout.py holds it equal -->", "",
             "Every module of `schedverify` imports only modules of lower layers (an import inside a",
             "function counts; one under `if TYPE_CHECKING:` does not), so the package has no import",
             "circle. Layer 0 imports nothing of the package. Each line: a module and what it imports.", ""]
    for k, mods in enumerate(layers(graph)):
        lines += [f"## Layer {k}", ""]
        for mod in mods:
            deps = ", ".join(f"`{d}`" for d in sorted(graph[mod]))
            lines.append(f"- `{mod}`" + (f": {deps}" if deps else ""))
        lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------- the tests


def test_the_package_has_no_import_circle():
    found = cycles(import_graph())
    assert not found, "import circles (break each along the direction its data flows):\n" + "\n".join(
        " <-> ".join(c) for c in found)


def test_the_graph_reader_sees_every_kind_of_import(tmp_path):
    pkg = tmp_path / "schedverify"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import x\n")
    (pkg / "a.py").write_text("def f():\n    from .b import y\n")  # a lazy import counts
    (pkg / "b.py").write_text("from . import a\n")  # a submodule by name
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "d.py").write_text("from .. import c\nimport schedverify.sub\n")
    graph = import_graph(pkg)
    assert graph == {"schedverify": {"schedverify.a"}, "schedverify.a": {"schedverify.b"},
                     "schedverify.b": {"schedverify.a"}, "schedverify.c": set(), "schedverify.sub": set(),
                     "schedverify.sub.d": {"schedverify.c", "schedverify.sub"}}
    assert cycles(graph) == [["schedverify.a", "schedverify.b"]]


def test_the_layout_page_is_the_graph_today():
    graph = import_graph()
    assert LAYOUT.read_text(encoding="utf-8") == layout_text(graph) + "\n", (
        "docs/layout.md is stale: run python tests/test_layout.py")


def test_the_display_hooks_are_the_renderers():
    """The model and the diagnostics draw nothing: render gives them their Jupyter view; and
    the engine registry calls the Z3 engine, which knows nothing of the registry."""
    graph = import_graph()
    for low in ("schedverify.model", "schedverify.diagnostics", "schedverify.graph"):
        assert not {m for m in graph[low] if m.startswith(("schedverify.render", "schedverify.smt"))}, low
    assert "schedverify.smt.check" in graph["schedverify.engines"]
    assert "schedverify.engines" not in graph["schedverify.smt.check"]
    import schedverify

    assert schedverify.Schedule._repr_html_.__qualname__ == "Schedule._repr_html_"
    assert schedverify.Report._repr_html_.__qualname__ == "Report._repr_html_"


if __name__ == "__main__":
    LAYOUT.write_text(layout_text(import_graph()) + "\n", encoding="utf-8")
    print(f"wrote {LAYOUT}")
