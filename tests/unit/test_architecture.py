"""ARCHITECTURE.md shows the stage lists the code runs, with their declared reads/writes."""

from pathlib import Path

import pytest

from specrag_batch.config import RunConfig
from specrag_batch.run.pipeline import (SPLIT_AT, Pipeline, speculative_stages, stage_table, standard_stages)
from specrag_batch.stages import StageContractError

DOC = (Path(__file__).resolve().parents[2] / "ARCHITECTURE.md").read_text()
CONFIG = RunConfig()


OPTIONS = RunConfig.model_validate({"sampling": {"adaptive": True}, "selection": {"fallback": "standard"}})
"""Adaptive drafting and the fallback pass switched on (the stage list ARCHITECTURE.md shows
under "Options")."""


@pytest.mark.parametrize("stages", [speculative_stages(CONFIG, drafter=None, verifier=None),
                                    standard_stages(CONFIG, generator=None),
                                    speculative_stages(OPTIONS, drafter=None, verifier=None)],
                         ids=["speculative", "standard", "adaptive_with_fallback"])
def test_architecture_names_every_stage_with_its_reads_and_writes(stages):
    assert stage_table(stages) in DOC
    for stage in stages:
        assert f"`{type(stage).__name__}`" in DOC and stage.name in DOC
        assert all(name in DOC for name in (*stage.reads, *stage.writes))


def test_disaggregated_split_is_where_the_diagram_draws_it():
    stages = speculative_stages(CONFIG, drafter=None, verifier=None)
    first, second = Pipeline(stages, chunk_rows=4).split(SPLIT_AT)
    left = " -> ".join(type(s).__name__ for s in first.stages)
    right = " -> ".join(type(s).__name__ for s in second.stages)
    assert f"{left} | {right}" in DOC


def test_a_stage_reading_what_nothing_writes_is_refused():
    stages = speculative_stages(CONFIG, drafter=None, verifier=None)
    with pytest.raises(StageContractError, match="reads \\['subsets'\\]"):
        Pipeline([stages[0], stages[2]], chunk_rows=4)  # drafting without sampling


def test_architecture_shows_the_layers_of_the_import_contract():
    """The layer list in ARCHITECTURE.md is pyproject.toml's import-linter layers, top first."""
    import tomllib

    root = Path(__file__).resolve().parents[2]
    contracts = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")["layers"]
    shown = "\n".join(line.replace("specrag_batch.", "") for line in layers)
    assert f"```\n{shown}\n```" in DOC
