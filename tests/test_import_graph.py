"""Import-graph guard (#19): sim/ never imports analysis/, sim modules import without cycles, and no
function in sim/ or analysis/ runs over 100 lines (argument tables excepted, by name, with why).

The checker reads source with `ast` only (nothing is imported), counting imports at module level
and inside functions alike: a lazy import still makes the importing module depend on the imported
one, so it still closes a cycle. It is exercised on a small synthetic module set too, so that a
checker that silently finds nothing fails.
"""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("sim", "analysis")
MAX_LINES = 100

# Functions allowed over MAX_LINES because they are argument tables: name -> why.
ARGUMENT_TABLES: dict[str, str] = {}

# Cycles and long functions allowed while a restructuring is in flight; empty since #19 merged.
EXPECTED_UNTIL_MERGE_CYCLES: set[frozenset[str]] = set()
EXPECTED_UNTIL_MERGE_LONG: dict[str, str] = {}


# -- the checker ------------------------------------------------------------------------------------
def collect_sources(root: str, packages=PACKAGES) -> dict[str, str]:
    """Module name -> source text for every .py file under root/<package>."""
    out = {}
    for pkg in packages:
        for d, dirs, files in os.walk(os.path.join(root, pkg)):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            for f in sorted(files):
                if not f.endswith(".py"):
                    continue
                rel = os.path.relpath(os.path.join(d, f), root)[:-3].split(os.sep)
                if rel[-1] == "__init__":
                    rel = rel[:-1]
                with open(os.path.join(d, f), encoding="utf-8") as fh:
                    out[".".join(rel)] = fh.read()
    return out


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    line: int


def _imports(name: str, tree: ast.Module, sources: dict[str, str]) -> list[Edge]:
    """Every import in a module (module level and nested), resolved to the modules it names."""
    pkg = name if any(m.startswith(name + ".") for m in sources) else name.rpartition(".")[0]
    edges = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            edges += [Edge(name, a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:  # `from pkg import submodule` depends on the submodule
                sub = f"{mod}.{a.name}"
                edges.append(Edge(name, sub if sub in sources else mod, node.lineno))
    return edges


def import_edges(sources: dict[str, str]) -> list[Edge]:
    """All import edges between modules of the given set (imports of other packages dropped)."""
    tops = {m.split(".")[0] for m in sources}
    edges = []
    for name, src in sources.items():
        for e in _imports(name, ast.parse(src, filename=name), sources):
            if e.dst.split(".")[0] in tops and e.dst != name:
                edges.append(e)
    return edges


def cycles(edges: list[Edge], prefix: str = "sim") -> list[list[str]]:
    """Strongly connected components of size > 1 among modules under `prefix` (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if e.src.split(".")[0] == prefix and e.dst.split(".")[0] == prefix:
            graph.setdefault(e.src, set()).add(e.dst)
            graph.setdefault(e.dst, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def cycle_path(comp: list[str], edges: list[Edge]) -> str:
    """One concrete cycle through a strongly connected component, with the import lines."""
    members = set(comp)
    nxt: dict[str, Edge] = {}
    for e in edges:
        if e.src in members and e.dst in members and e.src not in nxt:
            nxt[e.src] = e
    # Walk from the first member by breadth-first search back to it.
    start = comp[0]
    prev: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        nf = []
        for v in frontier:
            for e in edges:
                if e.src == v and e.dst in members and e.dst not in prev:
                    prev[e.dst] = e
                    nf.append(e.dst)
        if start in prev:
            break
        frontier = nf
    path, v = [], start
    while True:
        e = prev[v]
        path.append(f"{e.src}:{e.line}")
        v = e.src
        if v == start:
            break
    return " -> ".join(reversed(path)) + f" -> {start}"


def upward_imports(edges: list[Edge]) -> list[Edge]:
    """Imports from sim/ into analysis/ (data flows sim -> analysis only)."""
    return [e for e in edges if e.src.split(".")[0] == "sim" and e.dst.split(".")[0] == "analysis"]


def long_functions(sources: dict[str, str], limit: int = MAX_LINES) -> dict[str, int]:
    """Qualified name (module.Class.func, module.outer.inner) -> lines, for functions over limit."""
    out = {}

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                q = f"{prefix}.{child.name}"
                if not isinstance(child, ast.ClassDef):
                    start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                    n = child.end_lineno - start + 1
                    if n > limit:
                        out[q] = n
                visit(child, q)
            else:
                visit(child, prefix)

    for name, src in sources.items():
        visit(ast.parse(src, filename=name), name)
    return out


def problems(sources: dict[str, str], allowed_long=(), allowed_cycles=()) -> list[str]:
    """Every violation as one line; empty when the module set is clean."""
    edges = import_edges(sources)
    out = [f"{e.src}:{e.line} imports {e.dst} (sim/ must not import analysis/)"
           for e in upward_imports(edges)]
    for comp in cycles(edges):
        if frozenset(comp) not in allowed_cycles:
            out.append(f"import cycle among {', '.join(comp)}: {cycle_path(comp, edges)}")
    for q, n in sorted(long_functions(sources).items()):
        if q not in allowed_long:
            out.append(f"{q} is {n} lines (limit {MAX_LINES})")
    return out


# -- the tests --------------------------------------------------------------------------------------
def test_checker_finds_synthetic_violations():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    sources = {
        "sim": "",
        "sim.a": "from sim.b import f\n",
        "sim.b": "def f():\n    from sim import c\n",
        "sim.c": "import sim.a\n",
        "sim.d": "from . import e\n",  # relative, and not a cycle on its own
        "sim.e": "",
        "sim.up": "def g():\n    import analysis.plots\n",
        "sim.long": f"class K:\n    def m(self):\n{body.replace('    ', '        ')}\n",
        "sim.short": f"def ok():\n{chr(10).join(body.splitlines()[:MAX_LINES - 1])}\n",
        "analysis": "",
        "analysis.plots": "import sim.a\n",
    }
    got = problems(sources)
    assert any(p.startswith("import cycle among sim.a, sim.b, sim.c:") for p in got), got
    cyc = next(p for p in got if p.startswith("import cycle"))
    assert "sim.a:1 -> sim.b:2 -> sim.c:1 -> sim.a" in cyc, cyc
    assert "sim.up:2 imports analysis.plots (sim/ must not import analysis/)" in got
    assert f"sim.long.K.m is {MAX_LINES + 1} lines (limit {MAX_LINES})" in got
    assert not any("sim.short" in p or "sim.d" in p for p in got), got
    assert len(got) == 3, got
    # Allowlisted entries are not reported.
    assert problems(sources, allowed_long={"sim.long.K.m"},
                    allowed_cycles={frozenset({"sim.a", "sim.b", "sim.c"})}) == [got[0]]


def test_import_graph_and_function_lengths():
    sources = collect_sources(ROOT)
    assert "sim.cli" in sources and "analysis.report" in sources
    got = problems(sources, allowed_long=set(ARGUMENT_TABLES) | set(EXPECTED_UNTIL_MERGE_LONG),
                   allowed_cycles=EXPECTED_UNTIL_MERGE_CYCLES)
    assert not got, "\n".join(got)


def test_allowlists_are_not_stale():
    """An allowlisted function or cycle that is gone must leave the allowlist too."""
    sources = collect_sources(ROOT)
    longs = long_functions(sources)
    stale = [q for q in list(ARGUMENT_TABLES) + list(EXPECTED_UNTIL_MERGE_LONG) if q not in longs]
    comps = {frozenset(c) for c in cycles(import_edges(sources))}
    stale += [sorted(c) for c in EXPECTED_UNTIL_MERGE_CYCLES if c not in comps]
    assert not stale, stale
