"""Old import paths of modules that moved into subpackages (issue 48), resolved to the new
module with a :class:`DeprecationWarning` naming it: ``import specrag_batch.storage`` gives
:mod:`specrag_batch.core.storage` (the same module object, so patches and ``isinstance`` agree).
Installed by ``specrag_batch/__init__.py``; ``specrag_batch.confidence``, ``.engines`` and ``.cli``
are packages now that re-export their old module's names."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

PACKAGE = "specrag_batch"
MOVED = {
    "calibration": "confidence.calibration",
    "cascade": "confidence.cascade",
    "chat_templates": "engines.chat_templates",
    "cli_calibrate": "cli.calibrate",
    "cli_drift": "cli.drift",
    "cli_index": "cli.index",
    "cli_options": "cli.options",
    "cli_tune": "cli.tune",
    "confidence_fit": "confidence.fit",
    "config.identity": "config.hashing",
    "config.sections": "config",
    "console": "cli.console",
    "datasets": "core.datasets",
    "drift": "run.drift.compare",
    "embeddings": "engines.embeddings",
    "engine_usage": "engines.usage",
    "evaluation": "stages.evaluation",
    "execution": "config.execution",
    "identity": "engines.weights",
    "intermediate": "run.intermediate",
    "labels": "core.labels",
    "lazy_engine": "engines.lazy",
    "lora": "engines.lora",
    "manifest": "run.manifest",
    "models": "engines.models",
    "orchestration": "run.orchestration",
    "parsing": "core.parsing",
    "pipeline": "run.pipeline",
    "planning": "run.planning",
    "prompts": "stages.prompts",
    "quiet": "core.quiet",
    "records": "core.records",
    "redaction": "core.redaction",
    "report": "run.report",
    "report.profile": "run.drift.profile",
    "report.rows": "run.results",
    "resume": "run.resume",
    "reuse": "run.reuse",
    "scheduled": "run.scheduled",
    "scheduled.claim_verification": "run.claim_verification",
    "scheduled.drift_schema": "run.drift.schema",
    "scheduled.drift_watch": "run.drift.watch",
    "scheduled.partitions": "run.partitions",
    "schema": "core.schema",
    "index.shards": "index.embed_shards",
    "shard": "run.shard_job",
    "stages.kmeans": "core.kmeans",
    "stages.output": "run.output",
    "stats": "core.stats",
    "stopping": "core.stopping",
    "storage": "core.storage",
    "storage_tasks": "run.storage_tasks",
    "testing": "run.testing",
    "tuning": "run.tuning",
}
"""Old module (below the package) -> its new home. A moved package's submodules follow it
(``report.summary`` -> ``run.report.summary``) unless listed themselves."""
MOVED_PACKAGES = ("chat_templates", "report", "reuse", "scheduled")


def new_home(fullname: str) -> str | None:
    """The new dotted name of old module ``fullname``, or None when it did not move."""
    if not fullname.startswith(PACKAGE + "."):
        return None
    rel = fullname[len(PACKAGE) + 1:]
    if rel in MOVED:
        return f"{PACKAGE}.{MOVED[rel]}"
    for pkg in MOVED_PACKAGES:
        if rel.startswith(pkg + "."):
            return f"{PACKAGE}.{MOVED[pkg]}{rel[len(pkg):]}"
    return None


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        warnings.warn(f"{module.__name__} moved to {self.new}; import it from there",
                      DeprecationWarning, stacklevel=2)
        # the import system returns what sys.modules holds under the old name after this call
        sys.modules[module.__name__] = importlib.import_module(self.new)


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds old module names (:data:`MOVED`) and loads them as aliases of their new home."""

    def find_spec(self, fullname, path=None, target=None):
        """A spec loading ``fullname`` as an alias of its new home, or None when it did not move
        (then the usual finders look for it)."""
        new = new_home(fullname)
        return importlib.util.spec_from_loader(fullname, _Alias(new)) if new else None


def install() -> None:
    """Put :class:`MovedFinder` first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedFinder())
