"""Run report on output shards written here (real Parquet, no engine): plots with nothing
labelled draw no legend (no matplotlib warning).
The report on a real run is tested in tests/flows/test_report.py."""

from __future__ import annotations

import json
import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specrag_batch.report import load_rows, plots
from specrag_batch.schema import OUTPUT_SCHEMA

PNG = b"\x89PNG\r\n\x1a\n"


def _row(i: int, **kw) -> dict:
    row = {"query_id": f"q{i}", "task": "qa", "answer": "x", "score": -float(i + 1),
           "score_draft": -float(i + 1), "low_confidence": False, "fast_path": False, "drafts": [],
           "flags": [], "mode": "speculative"}
    return {**row, **kw}


def _write_run(out, shards: dict[str, pa.Table]) -> str:
    """Shards under ``out`` listed ``ok`` in its manifest (what a finished run leaves)."""
    out.mkdir()
    for name, table in shards.items():
        pq.write_table(table, out / name)
    manifest = {"shards": [{"status": "ok", "output": str(out / n)} for n in shards],
                "stage_seconds": {"drafting": 1.0}, "seconds": 2.0, "rows_out": 0, "engines": {}}
    (out / "_manifest.json").write_text(json.dumps(manifest))
    return str(out)


@pytest.mark.parametrize("rows", [
    [_row(0), _row(1)],                                               # no gold: nothing graded
    [_row(0, correct=True, fast_path=True), _row(1, correct=False, fast_path=True)],  # τ_min applies to none
    [_row(0, correct=True, score=None), _row(1, correct=False, score=None)],          # no score to plot
], ids=["no_gold", "only_fast_path", "no_score"])
def test_plots_with_nothing_labelled_warn_nothing(tmp_path, rows):
    prefix = _write_run(tmp_path / "out", {"a.parquet": pa.Table.from_pylist(rows, schema=OUTPUT_SCHEMA)})
    data = load_rows(prefix)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = plots(data)
    assert set(out) == {"scores", "risk_coverage"} and all(png.startswith(PNG) for png in out.values())
