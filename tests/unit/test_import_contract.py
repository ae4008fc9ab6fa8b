"""The package's import contract (ARCHITECTURE.md, "Layers"): the layers of pyproject.toml's
``[tool.importlinter]`` point one way, no package's modules import each other in a cycle, and
the installed package never reaches outside itself (benchmarks/, scripts/, tests/, examples/,
sys.path)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ..conftest import ROOT

pytestmark = pytest.mark.unit

PACKAGE = ROOT / "specrag_batch"
OUTSIDE = ("benchmarks", "scripts", "tests", "flows", "examples")


def test_the_import_contracts_are_kept(capsys):
    """import-linter over the package's real import graph (function-level imports included,
    ``TYPE_CHECKING`` imports excluded); a back-edge fails here with the offending chain."""
    from importlinter import configuration
    from importlinter.application.use_cases import lint_imports

    configuration.configure()
    kept = lint_imports(config_filename=str(ROOT / "pyproject.toml"), cache_dir=None, no_logo=True)
    out = capsys.readouterr().out
    assert kept, out
    assert "2 kept, 0 broken" in out, out


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.lineno, node.module


def test_the_package_imports_nothing_outside_itself_and_leaves_sys_path_alone():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT)
        for line, module in _imports(path):
            if module.split(".")[0] in OUTSIDE:
                found.append(f"{rel}:{line}: imports {module}")
        text = path.read_text(encoding="utf-8")
        if "sys.path.insert" in text or "sys.path.append" in text or "sys.path[" in text:
            found.append(f"{rel}: changes sys.path")
    assert not found, "\n".join(found)


def test_flows_only_re_export_the_package():
    """``flows/*.py`` (prefect.yaml's entrypoints) define nothing: every flow lives in the package."""
    for path in sorted((ROOT / "flows").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        assert not defined, f"{path.relative_to(ROOT)} defines {defined}: move it into specrag_batch/"


def test_no_product_module_is_over_the_size_limit():
    """A module a reader can hold in mind: at most 400 lines (ARCHITECTURE.md)."""
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
             for p in PACKAGE.rglob("*.py")}
    assert {p: n for p, n in sizes.items() if n > 400} == {}
