"""ARCHITECTURE.md's module tree is the one scripts/architecture_tree.py generates from the
package: every module and subpackage, found by walking the folders (so a module moved into a
subpackage shows up there), each with its docstring's summary."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("architecture_tree", ROOT / "scripts" / "architecture_tree.py")
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


def test_committed_tree_is_the_generated_one():
    doc = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert gen.render(doc, gen.tree()) == doc, "ARCHITECTURE.md's tree is stale: run python scripts/architecture_tree.py"


def test_every_module_of_the_package_is_in_the_tree():
    block = gen.tree()
    for path in (ROOT / "specrag_batch").rglob("*.py"):
        if "__pycache__" not in path.parts:
            depth = len(path.relative_to(ROOT).parts) - 1  # specrag_batch/x.py: depth 1
            name = path.parent.name + "/" if path.name == "__init__.py" else path.name
            shown = "  " * (depth - (path.name == "__init__.py")) + name
            assert f"\n{shown} " in block, f"{path.relative_to(ROOT)} is not in the tree"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_subpackages_nest_and_each_line_is_its_docstring_summary(tmp_path):
    pkg = tmp_path / "pkg"
    _write(pkg / "__init__.py", '"""The package (Wang et al. 2024). More."""\n')
    _write(pkg / "zeta.py", '"""Last module.\n\nDetails."""\n')
    _write(pkg / "confidence" / "__init__.py", '"""Calibrated confidence: one home."""\n')
    _write(pkg / "confidence" / "fit.py", '"""Fitting it per task with\n:func:`numpy.polyfit` and ``x``."""\n')
    _write(pkg / "confidence" / "__pycache__" / "fit.cpython-311.pyc", "")
    _write(pkg / "confidence" / "template.jinja", "{{ x }}")
    lines = gen.tree(pkg).splitlines()
    assert lines[0] == lines[-1] == "```"
    assert [line.split("  ")[0] if not line.startswith(" ") else line.strip().split(" ")[0] for line in lines[1:-1]] == \
        ["pkg/", "confidence/", "fit.py", "template.jinja", "zeta.py"]
    text = "\n".join(lines)
    assert "\n  confidence/" in text and "\n    fit.py" in text and "\n  zeta.py" in text
    assert "The package (Wang et al. 2024)." in text  # "al." ends no sentence
    assert "Fitting it per task with `numpy.polyfit` and `x`." in text
    assert "Details" not in text and "More" not in text


def test_a_module_without_a_docstring_is_refused_by_name(tmp_path):
    _write(tmp_path / "pkg" / "__init__.py", '"""P."""\n')
    _write(tmp_path / "pkg" / "bare.py", "x = 1\n")
    with pytest.raises(gen.TreeError, match="bare.py has no module docstring"):
        gen.tree(tmp_path / "pkg")


def test_a_long_summary_is_cut_at_a_clause_or_a_word():
    long = "Choosing the fallback share from labelled runs (issue 39 item 3): how many of the least confident rows a run re-answers."
    assert gen.summary(long) == "Choosing the fallback share from labelled runs (issue 39 item 3)"
    words = "word " * 40
    cut = gen.summary(words)
    assert cut.endswith("...") and len(cut) <= gen.MAX_SUMMARY


def test_the_markers_are_required():
    with pytest.raises(gen.TreeError, match="markers"):
        gen.render("# Architecture\n", "```\n```")
