"""The package's import graph: modules, import edges, cycles, and imports hidden inside functions.

    python scripts/imports.py [--check]     # --check: exit 1 on a cycle (function-level imports count)
                                            # or a model module importing the sampling layer

Reads the source with `ast` (nothing is imported), so it runs without torch. Counts every `import`
and `from ... import` of a mulosd_core or nodes module, at module level and inside functions.
"""
from __future__ import annotations

import argparse
import ast
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("mulosd_core", "nodes")
SAMPLING_LAYER = ("mulosd_core.sampling", "mulosd_core.decode")   # what mulosd_core.models must not import


def modules() -> dict[str, str]:
    out = {}
    for pkg in PACKAGES:
        for d, _, files in os.walk(os.path.join(ROOT, pkg)):
            for f in files:
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(d, f), ROOT)[:-3].replace(os.sep, ".")
                    out[rel[:-9] if rel.endswith(".__init__") else rel] = os.path.join(d, f)
    return out


def _resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = mod.split(".")
    base = parts if is_pkg else parts[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def edges(mods: dict[str, str]) -> list[tuple[str, str, bool]]:
    """(importer, imported, inside a function) for every import of one of `mods`."""
    out = []
    for mod, path in mods.items():
        tree = ast.parse(open(path, encoding="utf-8").read())
        is_pkg = path.endswith("__init__.py")
        funcs = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for n in ast.walk(f)}
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, is_pkg, node)
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for n in names:
                while n and n not in mods:
                    n = n.rpartition(".")[0]
                if n and n != mod:
                    out.append((mod, n, id(node) in funcs))
    return sorted(set(out))


def cycles(es: list[tuple[str, str, bool]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), counting every import."""
    graph: dict[str, set[str]] = {}
    for a, b, _ in es:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(comps)


def report() -> dict:
    mods = modules()
    es = edges(mods)
    lines = {m: sum(1 for _ in open(p, encoding="utf-8")) for m, p in mods.items()}
    return {
        "modules": len(mods), "lines": sum(lines.values()), "imports": len(es),
        "inside_functions": [(a, b) for a, b, f in es if f and a.startswith("mulosd_core")],   # lazy imports: allowed
                                                                                                # unless in a cycle
        "cycles": cycles(es),
        "models_import_sampling": [(a, b) for a, b, _ in es if a.startswith("mulosd_core.models")
                                   and b.startswith(SAMPLING_LAYER)],
        "nodes_import_library": sorted({b for a, b, _ in es if a.startswith("nodes") and b.startswith("mulosd_core")}),
        "largest": sorted(lines.items(), key=lambda kv: -kv[1])[:5],
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    r = report()
    print(f"{r['modules']} modules, {r['lines']} lines, {r['imports']} import edges")
    print("largest: " + ", ".join(f"{m} ({n})" for m, n in r["largest"]))
    print(f"cycles ({len(r['cycles'])}):")
    for c in r["cycles"]:
        print("  " + " <-> ".join(c))
    print(f"imports inside functions in mulosd_core ({len(r['inside_functions'])}):")
    for a, b in r["inside_functions"]:
        print(f"  {a} -> {b}")
    print(f"model layer -> sampling layer ({len(r['models_import_sampling'])}):")
    for a, b in r["models_import_sampling"]:
        print(f"  {a} -> {b}")
    print(f"library modules the nodes import ({len(r['nodes_import_library'])}): " + ", ".join(r["nodes_import_library"]))
    bad = r["cycles"] or r["models_import_sampling"]
    sys.exit(1 if args.check and bad else 0)
