"""The package reads like its domain (issue 48): a short top level of subpackages, one home per
concept, old import paths that still resolve (naming the new one), no module reaching into
another's private names, and each config section declaring its own hash factors."""

import ast
import importlib
import sys
import warnings
from pathlib import Path

import pytest

from specrag_batch.config import RunConfig, Section
from specrag_batch.config.hashing import ADDED_FIELDS, SECTIONS, SWITCHED_FIELDS, UNHASHED_SECTIONS
from specrag_batch.core import moved

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[2] / "specrag_batch"


def test_the_top_level_shows_the_parts_of_the_product():
    entries = sorted(p.name for p in PACKAGE.iterdir() if p.name != "__pycache__")
    assert len(entries) <= 12, entries
    assert {"core", "config", "engines", "index", "confidence", "stages", "run", "cli"} <= set(entries)


def test_calibration_and_drift_each_live_in_one_package():
    confidence = {p.stem for p in (PACKAGE / "confidence").glob("*.py")}
    assert {"calibration", "cascade", "fit", "measures"} <= confidence
    drift = {p.stem for p in (PACKAGE / "run" / "drift").glob("*.py")}
    assert {"compare", "profile", "schema", "watch"} <= drift
    stray = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
             if any(w in p.stem for w in ("calibrat", "cascade", "confidence", "drift", "profile"))
             and p.parent.name not in ("confidence", "drift") and p.parent.name not in ("config", "cli")]
    assert stray == []  # outside them: only the config section and the command of each


@pytest.mark.parametrize("old", sorted(moved.MOVED))
def test_an_old_import_path_is_the_new_module_and_names_it(old):
    name = f"specrag_batch.{old}"
    new = moved.new_home(name)
    sys.modules.pop(name, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(name)
    assert module is importlib.import_module(new)
    assert any(new in str(w.message) and issubclass(w.category, DeprecationWarning) for w in caught)


def test_a_moved_package_s_submodule_follows_it():
    assert moved.new_home("specrag_batch.report.summary") == "specrag_batch.run.report.summary"
    assert moved.new_home("specrag_batch.scheduled.nightly") == "specrag_batch.run.scheduled.nightly"
    assert moved.new_home("specrag_batch.index.build") is None  # did not move
    assert moved.new_home("specrag_batch.engines") is None  # a package now; it re-exports the old names
    from specrag_batch.engines import Engine, GenerationResult  # noqa: F401
    from specrag_batch.confidence import features, probability  # noqa: F401


def test_no_module_imports_another_module_s_private_names():
    """Neither ``from .x import _name`` nor ``x._name`` where ``x`` is a module of the package
    this file imported (``from .. import x``, ``from ..y import x``)."""
    modules = {p.stem for p in PACKAGE.rglob("*.py")} | {p.name for p in PACKAGE.rglob("*") if p.is_dir()}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own = set()  # local names bound to a module of the package
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("specrag_batch")):
                found += [f"{path.relative_to(PACKAGE)}:{node.lineno} {a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
                own |= {a.asname or a.name for a in node.names if a.name in modules}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in own
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.value.id}.{node.attr}")
    assert found == []


def test_every_section_declares_its_hash_factors_beside_its_fields():
    sections = {name for name, f in RunConfig.model_fields.items()
                if isinstance(f.annotation, type) and issubclass(f.annotation, Section)}
    assert sections == set(SECTIONS)
    for name, section in SECTIONS.items():
        assert RunConfig.model_fields[name].annotation is section
        for field, _ in section.hash_added:
            assert field in section.model_fields, (name, field)
        for field, switch in section.hash_switched:
            assert {field, switch} <= set(section.model_fields), (name, field)
    assert ("verifier", "deduplicate_drafts", False) in ADDED_FIELDS
    assert ("selection", "label_prior", "label_distribution") in SWITCHED_FIELDS
    assert set(UNHASHED_SECTIONS) == {"drift", "reuse"}


def test_the_package_exports_what_users_call():
    import specrag_batch

    for name in specrag_batch.__all__:
        assert getattr(specrag_batch, name) is not None, name
    assert specrag_batch.nightly_flow.name == "specrag-nightly"
    assert specrag_batch.build_index.__module__ == "specrag_batch.index.build"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        specrag_batch.nope  # noqa: B018
