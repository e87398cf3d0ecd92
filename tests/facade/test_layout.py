"""The house (issue 24): the README's layout table and each package's docstring match the tree.

* every module and sub-package of the installed folders is named in the README's layout table,
  and every name there exists (a module moved or added without the table fails here);
* each package's ``__init__`` docstring names each of its modules (as ``:mod:`.x``` or ``x``);
* no module of the package is over 800 lines;
* ``tests/`` mirrors the package, and its ``kernels/`` folder does not shadow Hugging Face's
  ``kernels`` package during the test session (``tests/conftest.py``).
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: folder → import name (pyproject.toml's [tool.setuptools.package-dir] and its packages)
PACKAGES = {
    "fsa": "tractable.fsa",
    "fsa/regex": "tractable.fsa.regex",
    "fsa/json_schema": "tractable.fsa.json_schema",
    "fsa/grammar": "tractable.fsa.grammar",
    "kernels": "tractable.kernels",
    "hmm": "tractable.hmm",
    "decode": "tractable.decode",
    "tractable": "tractable",
    "tractable/commands": "tractable.commands",
    "tractable/testing": "tractable.testing",
}
MAX_LINES = 800


def _modules(folder: Path, private: bool) -> set[str]:
    """Module names (file stems) and sub-package names (``name/``) of one package folder."""
    names = {f.stem for f in folder.glob("*.py") if f.stem != "__init__"
             and f.stem != "__main__" and (private or not f.stem.startswith("_"))}
    names |= {d.name + "/" for d in folder.iterdir() if (d / "__init__.py").exists()}
    return names


def _layout_rows() -> dict[str, str]:
    """The README's layout table: folder (without the trailing ``/``) → its last column."""
    text = (ROOT / "README.md").read_text()
    table = text.split("## Layout", 1)[1].split("\n\n", 2)[1]
    rows = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0].strip("`").rstrip("/")] = cells[-1]
    return rows


def test_readme_layout_table_names_every_module():
    rows = _layout_rows()
    missing = [f for f in PACKAGES if f not in rows]
    assert not missing, f"README layout table has no row for {missing}"
    for folder in PACKAGES:
        named = set(re.findall(r"`([A-Za-z_][\w]*/?)`", rows[folder]))
        actual = _modules(ROOT / folder, private=False)
        assert named == actual, (
            f"README layout row `{folder}/`: not in the tree {sorted(named - actual)}, "
            f"not in the table {sorted(actual - named)}")


def test_package_docstrings_name_their_modules():
    for folder, name in PACKAGES.items():
        init = ROOT / folder / "__init__.py"
        doc = (compile(init.read_text(), str(init), "exec").co_consts[0] or "")
        assert isinstance(doc, str) and doc, f"{init} has no docstring"
        missing = []
        for m in sorted(_modules(ROOT / folder, private=True)):
            stem = m.rstrip("/")
            if not re.search(rf"(:mod:`[~.\w]*\.{stem}`|``{stem}/?``|`{stem}/?`)", doc):
                missing.append(stem)
        assert not missing, f"{name}.__init__ docstring does not name {missing}"


def test_no_module_over_800_lines():
    long = []
    for folder in PACKAGES:
        for f in (ROOT / folder).glob("*.py"):
            n = len(f.read_text().splitlines())
            if n > MAX_LINES:
                long.append(f"{f.relative_to(ROOT)}: {n}")
    assert not long, long


def test_tests_mirror_the_package():
    for folder in ("fsa", "fsa/json_schema", "fsa/grammar", "kernels", "hmm", "decode"):
        d = ROOT / "tests" / folder
        assert d.is_dir() and any(d.glob("test_*.py")), f"tests/{folder}/ has no tests"
    assert not list((ROOT / "tests").glob("test_*.py")), "test files belong in a package folder"


def test_tests_kernels_folder_does_not_shadow_hf_kernels():
    spec = importlib.util.find_spec("kernels")
    if spec is None:
        return
    where = list(spec.submodule_search_locations or []) + [spec.origin or ""]
    tests = str(ROOT / "tests")
    assert not any(str(p).startswith(tests) for p in where), where
    if spec.origin is None:  # a namespace package somewhere else: also a shadow
        pytest.fail(f"`kernels` resolves to a namespace package at {where}")


def test_every_required_dependency_is_imported_by_the_package():
    """pyproject's ``dependencies`` are each imported somewhere in the package's sources
    (test-only packages belong in extras)."""
    tomllib = pytest.importorskip("tomllib")
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    wanted = {re.split(r"[\s\[<>=!~;]", d, maxsplit=1)[0].lower().replace("-", "_") for d in deps}
    imported: set[str] = set()
    for folder in PACKAGES:
        for f in (ROOT / folder).glob("*.py"):
            for node in ast.walk(ast.parse(f.read_text(), str(f))):
                if isinstance(node, ast.Import):
                    imported |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    imported.add(node.module.split(".")[0])
    assert wanted <= imported, f"required but never imported: {sorted(wanted - imported)}"
