"""Issue 50 item 6: the report's confusion matrix (gold label against answer, label tasks) and
reliability diagram with its ECE, on output shards written here (real Parquet, no engine)."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from specrag_batch.run.report import write_report
from specrag_batch.run.report.diagnostics import confusion, reliability
from specrag_batch.core.schema import OUTPUT_SCHEMA

from .test_report import PNG, _row, _write_run


def test_reliability_bins_and_expected_calibration_error():
    p = [0.05, 0.15, 0.9, 0.95, np.nan]
    r = reliability(p, [False, True, True, False, True])
    assert r["n"] == 4 and [b["n"] for b in r["bins"]] == [1, 1, 2]
    # ECE = Σ n_b/n |acc_b - mean p_b| = (0.05 + 0.85 + 2 * |0.5 - 0.925|) / 4
    assert r["ece"] == pytest.approx((0.05 + 0.85 + 2 * 0.425) / 4)
    assert reliability([np.nan], [True]) is None


def _claims(tmp_path, **manifest):
    gold = ["SUPPORTS", "SUPPORTS", "REFUTES", "REFUTES", "NOT_ENOUGH_INFO"]
    answers = ["SUPPORTS", "SUPPORTS", "SUPPORTS", "REFUTES", "free text"]
    rows = [_row(i, task="claim", answer=a, gold=[g], correct=a == g, label_probability=0.5 + i / 10)
            for i, (g, a) in enumerate(zip(gold, answers))]
    rows.append(_row(9, correct=True))  # a qa row: in the reliability, not in any matrix
    return _write_run(tmp_path / "out", {"a.parquet": pa.Table.from_pylist(rows, schema=OUTPUT_SCHEMA)}, **manifest)


def test_report_shows_the_confusion_matrix_and_reliability_of_a_label_run(tmp_path):
    prefix = _claims(tmp_path, config={"selection": {"confidence": "label_probability"}})
    s = write_report(prefix)
    c = s["diagnostics"]["confusion"]["claim"]
    assert c["labels"] == ["NOT_ENOUGH_INFO", "REFUTES", "SUPPORTS"]
    assert c["answers"] == ["NOT_ENOUGH_INFO", "REFUTES", "SUPPORTS", "(other)"]
    assert c["matrix"] == [[0, 0, 0, 1], [0, 1, 1, 0], [0, 0, 2, 0]]
    md = s["markdown"]
    assert "| gold \\ answer | NOT_ENOUGH_INFO | REFUTES | SUPPORTS | (other) | recall |" in md
    assert "| REFUTES | 0 | 1 | 1 | 0 | 0.500 |" in md
    rel = s["diagnostics"]["reliability"]
    assert set(rel) == {"label_probability"} and rel["label_probability"]["n"] == 5
    assert "label_probability: n = 5, expected calibration error (ECE)" in md
    assert "![confusion](confusion_matrix.png)" in md and "![reliability](reliability.png)" in md
    report = tmp_path / "out" / "_report"
    assert (report / "confusion_matrix.png").read_bytes().startswith(PNG)
    assert (report / "reliability.png").read_bytes().startswith(PNG)


def test_a_log_confidence_is_shown_as_the_probability_it_stands_for(tmp_path):
    prefix = _claims(tmp_path)  # the run compared τ_min with log ρ (score)
    rel = write_report(prefix)["diagnostics"]["reliability"]
    assert set(rel) == {"label_probability", "exp(score)"}
    # scores -1..-5 and -10: the first bin [0, 0.1) holds e^-3, e^-4, e^-5, e^-10
    assert rel["exp(score)"]["bins"][0]["mean_p"] == pytest.approx(np.mean([math.exp(-k) for k in (3, 4, 5, 10)]))


def test_option_texts_get_a_note_not_a_matrix():
    import polars as pl

    n = 13
    g = pl.DataFrame({"task": ["choice"] * n, "gold": [[f"option {i}"] for i in range(n)],
                      "answer": [f"option {i}" for i in range(n)], "correct": [True] * n})
    assert "no confusion matrix" in confusion(g)["choice"]["note"]
