"""benchmarks/ is a project of its own: its pyproject names its dependencies and its test
configuration, its README stays a short page that links one page per study, and its tests
import nothing from the product's tests."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.docs

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
MAX_README_LINES = 300
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_benchmarks_have_their_own_pyproject_and_test_configuration():
    project = tomllib.loads((BENCH / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["name"] == "specrag-batch-benchmarks"
    deps = {re.split(r"[<>=\[ ]", d, maxsplit=1)[0] for d in project["project"]["dependencies"]}
    assert {"specrag-batch", "scipy", "matplotlib"} <= deps
    assert project["tool"]["pytest"]["ini_options"]["testpaths"] == ["tests"]


def test_the_readme_is_short_and_links_every_study_page():
    text = (BENCH / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_README_LINES
    links = [link.partition("#")[0] for link in LINK.findall(text) if not re.match(r"[a-z]+://", link)]
    missing = [link for link in links if link and not (BENCH / link).exists()]
    assert missing == [], f"benchmarks/README.md links to missing files: {missing}"
    pages = {f"studies/{p.name}" for p in (BENCH / "studies").glob("*.md")}
    assert pages and pages <= set(links), f"study pages not linked from the README: {sorted(pages - set(links))}"


def test_study_pages_link_only_to_files_that_exist():
    for page in (BENCH / "studies").glob("*.md"):
        for link in LINK.findall(page.read_text(encoding="utf-8")):
            path = link.partition("#")[0]
            if path and not re.match(r"[a-z]+://", path):
                assert (page.parent / path).exists(), f"{page.relative_to(ROOT)} links to a missing file: {link}"


def test_the_docs_name_only_study_pages_that_exist():
    named = set()
    for path in [ROOT / "Makefile", *ROOT.joinpath("docs").rglob("*.md"), *ROOT.joinpath("tests").rglob("*.py")]:
        named |= set(re.findall(r"benchmarks/studies/[a-z0-9_.-]+\.md", path.read_text(encoding="utf-8")))
    assert named, "no study page is named: the pattern is out of date"
    assert sorted(p for p in named if not (ROOT / p).is_file()) == []


def test_the_benchmark_tests_import_nothing_from_the_products_tests():
    hits = []
    for path in (BENCH / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            hits += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n.split(".")[0] == "tests"]
    assert hits == []
