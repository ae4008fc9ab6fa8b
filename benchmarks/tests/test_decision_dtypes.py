"""The decision benchmark says when two cells it compares ran in different engine dtypes.

On CPU the engines' dtype is chosen per host (bfloat16 with native bf16 units, float32
otherwise) and is not in the config hash, so cells computed in different sessions can pair
rows of different numerics. Each shard's done marker records its ``engine_dtypes``; a
comparison whose paired shards differ carries ``dtypes_differ`` with a note in results.json and
tables.md; shards without the field (older markers) are unknown and never flagged. Cells are
run trees written with the product's writers (benchmarks/tests/product_runs.py) and analysed by
``decision.analyse``; no engine runs."""

from __future__ import annotations

import json

import pytest

import cell_archive
import decision
import decision_stats as ds

from .conftest import ROOT
from .product_runs import input_rows, write_cell, write_inputs

USE = {"m": (900, 120, 3)}


@pytest.fixture
def base():
    from specrag_batch.config import load_config

    return load_config(ROOT / "configs" / "test-smollm2.yaml")


def cells_with(runs, base, dtypes: dict[str, list]) -> list[decision.Cell]:
    """popqa's standard and speculative cells (20 rows, 4 shards of 5), each shard's
    ``engine_dtypes`` from ``dtypes[arm]`` (None: not recorded)."""
    write_inputs(runs / "popqa" / "input", input_rows(20, prefix="r"), 5)
    cells = [c for c in decision.plan_cells(["popqa"], decision.expand_arms("main"), base, runs, tuned_drafter=None,
                                            ablation_datasets=[], ablation_input={})[0]
             if c.arm in ("standard", "speculative")]
    for seed, c in enumerate(cells):
        write_cell(c.input_dir, c.output_dir, c.config, [USE] * 4, seconds=8.0 + seed,
                   fields=lambda i, r, s=seed: {"correct": (i + s) % 3 != 0}, dtypes=dtypes[c.arm])
    return cells


def analyse(cells, base, out):
    res = decision.analyse(cells, {"popqa": input_rows(20, prefix="r")}, base, out,
                           {"config_path": "c.yaml", "rows_per_dataset": {"popqa": 20}}, 200)
    return json.loads((out / "results.json").read_text()), (out / "tables.md").read_text()


F32, BF16 = {"m": "float32"}, {"m": "bfloat16"}


def test_cells_of_different_dtypes_are_flagged_in_results_and_tables(base, tmp_path):
    cells = cells_with(tmp_path / "runs", base, {"standard": [F32] * 4, "speculative": [BF16, BF16, BF16, F32]})
    res, tables = analyse(cells, base, tmp_path / "out")
    cmp = res["datasets"]["popqa"]["comparisons"]["speculative - standard"]
    note = "dtypes differ: bfloat16 vs float32 (3 of 4 shard pairs)"
    assert cmp["dtypes_differ"] == {"pairs": 4, "differ": 3, "a": ["bfloat16"], "b": ["float32"], "note": note}
    assert cmp["n"] == 20  # the accuracy comparison stands, with the note beside it
    assert res["pooled"]["comparisons"]["speculative - standard"]["dtypes_differ"]["note"] == note
    assert res["datasets"]["popqa"]["arms"]["speculative"]["engine_dtypes"] == ["bfloat16", "float32"]
    headline = next(x for x in tables.splitlines() if x.startswith("| popqa | 20 |"))
    assert note in headline.split("|")[5]  # the spec - std column
    assert f"discordant rows). **Caution: {note}**. Faster?" in tables  # the verdict
    assert "| popqa | standard | " in tables and "| float32 |" in tables  # the cell's dtypes, Machines table
    # re-selected ablations compare the speculative cell with itself: never flagged
    assert "dtypes_differ" not in res["datasets"]["popqa"]["comparisons"]["random_selection - speculative"]


def test_shards_of_unknown_dtype_are_not_flagged(base, tmp_path):
    """A cell whose markers predate the field (unknown) against a float32 cell: no note; a
    cell mixing known and unknown shards is compared on its known pairs only."""
    cells = cells_with(tmp_path / "runs", base, {"standard": [None] * 4, "speculative": [BF16] * 4})
    res, tables = analyse(cells, base, tmp_path / "out")
    assert "dtypes_differ" not in res["datasets"]["popqa"]["comparisons"]["speculative - standard"]
    assert "dtypes_differ" not in res["pooled"]["comparisons"]["speculative - standard"]
    assert "dtypes differ" not in tables
    assert res["datasets"]["popqa"]["arms"]["standard"]["engine_dtypes"] == [None]
    assert "| unknown |" in tables

    mixed = cells_with(tmp_path / "runs2", base, {"standard": [None, F32, None, None], "speculative": [F32] * 4})
    res2, _ = analyse(mixed, base, tmp_path / "out2")
    assert "dtypes_differ" not in res2["datasets"]["popqa"]["comparisons"]["speculative - standard"]


def test_a_restored_shard_keeps_its_dtype(base, tmp_path, monkeypatch):
    """The archive keeps the done marker's result, so a shard computed on a bfloat16 host in an
    earlier session is still bfloat16 after it is restored on a float32 host."""
    old, new, archive = tmp_path / "old", tmp_path / "new", tmp_path / "archive"
    for c in cells_with(old, base, {"standard": [F32] * 4, "speculative": [BF16] * 4}):
        cell_archive.archive_cell(c, archive)
    write_inputs(new / "popqa" / "input", input_rows(20, prefix="r"), 5)
    cells = [c for c in decision.plan_cells(["popqa"], decision.expand_arms("main"), base, new, tuned_drafter=None,
                                            ablation_datasets=[], ablation_input={})[0]
             if c.arm in ("standard", "speculative")]
    for c in cells:
        assert cell_archive.restore_cell(c, archive)["restored"] == 4
    res, _ = analyse(cells, base, tmp_path / "out")
    assert res["datasets"]["popqa"]["comparisons"]["speculative - standard"]["dtypes_differ"]["differ"] == 4


def test_shard_dtype_joins_a_shards_models_and_reads_absent_as_unknown():
    assert ds.shard_dtype({"engine_dtypes": {"d": "bfloat16", "v": "float32"}}) == "bfloat16+float32"
    assert ds.shard_dtype({"engine_dtypes": {"d": "float32+bfloat16", "v": "float32"}}) == "bfloat16+float32"
    assert ds.shard_dtype({}) is None and ds.shard_dtype({"engine_dtypes": {}}) is None
    assert ds.cell_dtypes([{"engine_dtypes": F32}, {}, {"engine_dtypes": BF16}]) == ["bfloat16", "float32", None]
    assert ds._dtypes(["bfloat16", "float32", None]) == "bfloat16, float32 + unknown"
    assert ds._dtypes([None]) == ds._dtypes(None) == "unknown" and ds._dtypes(["float32"]) == "float32"
