"""The module import graph of fsa/ + kernels/ + decode/ + hmm/ is acyclic (issue 24).

The graph is read with ``ast`` from the source files, so it counts imports inside functions and
under ``if TYPE_CHECKING`` alike: a function-level import does not hide a cycle.  An edge
``a → b`` means module ``a`` names module ``b`` in an import (``from .b import x``,
``from . import b``, ``import tractable.fsa.b``); ``from .pkg import name`` where ``name`` is
not a module is an edge to the package ``pkg`` (its ``__init__``).  The implicit import of a
parent package by its submodules is not an edge (Python runs it first, whatever the order).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("fsa", "kernels", "decode", "hmm")


def import_graph(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    """Module name (``fsa.regex.compile``; a package is named by its directory) → the set of
    modules of ``packages`` under ``root`` it imports anywhere in its source."""
    files: dict[str, Path] = {}
    for pkg in packages:
        for f in (root / pkg).rglob("*.py"):
            parts = list(f.relative_to(root).with_suffix("").parts)
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    graph: dict[str, set[str]] = {m: set() for m in files}
    for m, f in files.items():
        here = m.split(".") if f.name == "__init__.py" else m.split(".")[:-1]
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    up = here[: len(here) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                else:
                    base = (node.module or "").removeprefix("tractable.")
                names = set()
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    names.add(sub if sub in files else base)
            elif isinstance(node, ast.Import):
                names = {a.name.removeprefix("tractable.") for a in node.names}
            else:
                continue
            graph[m] |= {n for n in names if n in files and n != m}
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules reachable from ``start`` by one or more import edges."""
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph[m])
    return seen


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that reach each other through imports (brute force: a module is on
    a cycle iff it reaches itself), each sorted; self-imports are not edges of
    :func:`import_graph`."""
    reach = {m: _reachable(graph, m) for m in graph}
    on = sorted(m for m in graph if m in reach[m])
    out: list[list[str]] = []
    seen: set[str] = set()
    for m in on:
        if m not in seen:
            group = sorted(n for n in on if n in reach[m] and m in reach[n])
            seen.update(group)
            out.append(group)
    return out


def test_import_graph_has_no_cycle():
    """No module of fsa/ kernels/ decode/ hmm/ reaches itself through imports (the old
    nfa ⇄ nfa_automata_lib and json_schema ⇄ unique_compile ⇄ unique_items cycles are gone)."""
    g = import_graph(ROOT)
    # the graph sees what it must: module-level, function-level, package and sub-package edges
    assert "fsa.nfa" in g["fsa.nfa_automata_lib"]
    assert "fsa.regex.lookaround" in g["fsa.regex.compile"]
    assert "fsa.regex.compile" in g["fsa.regex"]
    assert "fsa.json_schema.unique_items" in g["fsa.json_schema"]  # inside a function
    assert {"fsa.json_schema._values", "fsa.json_schema._automata"} <= g[
        "fsa.json_schema.unique_compile"]  # inside functions
    assert "fsa.json_schema.scan" in g["fsa.json_schema.unique_items"]  # from . import scan
    assert "decode.unique_constraint" in g["fsa.json_schema.unique_items"]  # across packages
    assert "fsa.regex" in g["fsa.grammar.lark"]
    assert len(g) > 100
    found = cycles(g)
    assert not found, "import cycles: " + "; ".join(" ⇄ ".join(c) for c in found)


def test_cycle_finder_finds_cycles(tmp_path):
    """The check can fail: a two-module cycle made of a function-level import, and a longer
    one through a package ``__init__``, are both reported; an acyclic tree is not."""
    pkg = tmp_path / "fsa"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import x\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n    return a\nx = 1\n")
    (pkg / "sub" / "__init__.py").write_text("from .m import y\n")
    (pkg / "sub" / "m.py").write_text("from ..c import z\ny = 1\n")
    (pkg / "c.py").write_text("import tractable.fsa.sub\nz = 2\n")
    (pkg / "d.py").write_text("from .sub import y\nfrom . import c\n")
    g = import_graph(tmp_path, ("fsa",))
    assert g["fsa.b"] == {"fsa.a"} and g["fsa.d"] == {"fsa.sub", "fsa.c"}
    assert sorted(cycles(g)) == [["fsa.a", "fsa.b"], ["fsa.c", "fsa.sub", "fsa.sub.m"]]
    (pkg / "b.py").write_text("x = 1\n")
    (pkg / "c.py").write_text("z = 2\n")
    assert cycles(import_graph(tmp_path, ("fsa",))) == []


def test_fsa_layers():
    """fsa/ is three visible layers: the front ends are sub-packages, none of their modules
    is left flat beside the core, and ``tractable.fsa.regex`` keeps its public API."""
    import tractable.fsa.regex as R
    from tractable.fsa import nfa as N
    from tractable.fsa.regex import compile as C

    flat = {p.stem for p in (ROOT / "fsa").glob("*.py")}
    moved = {"regex", "regex_lookaround", "json_formats", "json_formats_regex",
             "json_formats_uri", "json_numbers", "json_strings", "json_refs", "json_scan",
             "unique_items", "unique_compile"}
    assert not flat & moved, flat & moved
    assert {"regex", "json_schema", "grammar"} <= {
        p.parent.name for p in (ROOT / "fsa").glob("*/__init__.py")}
    assert set(R.__all__) == {"regex_to_nfa", "compile_regex", "clear_regex_cache",
                              "MAX_NFA_STATES"}
    assert all(getattr(R, n) is getattr(C, n) for n in R.__all__)
    a = R.regex_to_nfa("a|bc")
    assert [w for w in (b"", b"a", b"b", b"bc", b"abc") if N.matches(a, w)] == [b"a", b"bc"]
