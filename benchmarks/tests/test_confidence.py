"""benchmarks/confidence.py (issue 39 items 2-3): the cascade frontier and its budget rule
hand-computed on a few rows, the AUROC interval, and a small archive analysed end to end."""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import confidence as bench


def test_cascade_re_answers_the_least_confident_rows_and_prices_them():
    spec = np.array([True, False, True, False])
    std = np.array([True, True, False, True])
    conf = np.array([0.9, 0.1, 0.8, 0.2])  # the two wrong rows are the least confident
    pts = {p["share"]: p for p in bench.cascade(spec, std, conf, 0.5, 1.0, shares=(0.0, 0.5, 1.0))}
    assert pts[0.0]["accuracy"] == 0.5 and pts[0.0]["seconds_ratio"] == 0.5
    assert pts[0.5]["accuracy"] == 1.0 and pts[0.5]["seconds_ratio"] == 1.0  # both fixed, 0.5 + 0.5 x 1.0
    assert pts[0.5]["diff"] == pytest.approx(0.25) and not pts[0.5]["non_inferior_at_budget"]
    assert pts[1.0]["accuracy"] == 0.75 and pts[1.0]["diff"] == 0.0


def test_risk_coverage_keeps_the_most_confident_rows_first():
    correct = np.array([True, False, True, False])
    conf = np.array([0.9, 0.1, np.nan, 0.8])  # NaN ranks lowest
    pts = {p["coverage"]: p for p in bench.risk_coverage(correct, conf, coverages=(0.25, 0.5, 0.75, 1.0))}
    assert [pts[c]["rows"] for c in (0.25, 0.5, 0.75, 1.0)] == [1, 2, 3, 4]
    assert pts[0.25]["risk"] == 0.0  # the 0.9 row is right
    assert pts[0.5]["risk"] == 0.5  # + the 0.8 row, wrong
    assert pts[0.75]["risk"] == pytest.approx(2 / 3)  # + the 0.1 row, wrong
    assert pts[1.0]["risk"] == 0.5  # + the NaN row, right
    assert bench.risk_coverage([], []) == []


def test_auroc_interval_brackets_the_estimate_and_one_class_has_none():
    rng = np.random.default_rng(0)
    y = rng.random(200) < 0.5
    s = y + rng.normal(0, 1, 200)
    a = bench.auroc_ci(y, s, n_boot=200)
    assert a["lo"] < a["auroc"] < a["hi"] and a["auroc"] > 0.6 and a["n"] == 200
    assert bench.auroc_ci(np.ones(5, bool), np.arange(5))["auroc"] is None


def _shard(dataset, arm, rows, seconds):
    t = pa.Table.from_pylist(rows)
    buf = io.BytesIO()
    pq.write_table(t, buf)
    stem = f"{dataset}/{arm}/0000000000000000/part-0000.x"
    return {stem + ".parquet": buf.getvalue(),
            stem + ".json": json.dumps({"result": {"stage_seconds": {"drafting": seconds}, "rows_out": len(rows)}}).encode()}


def test_analyse_a_small_archive_end_to_end(monkeypatch):
    """Two datasets of 40 rows: a right row's drafts agree; Standard RAG right on every row."""
    monkeypatch.setattr(bench, "DATASETS", ("popqa", "nq_open"))
    monkeypatch.setattr(bench, "ARMS", {"speculative-default": "defaults"})
    monkeypatch.setattr(bench, "SEEDS", 1)
    monkeypatch.setattr(bench, "N_BOOT", 100)
    members = {}
    rng = np.random.default_rng(1)
    for d in bench.DATASETS:
        spec, std = [], []
        for i in range(40):
            ok = bool(i % 2)
            s = float(rng.normal(-5, 1))
            drafts = [{"answer": a, "score": s - j, "score_draft": s - j, "tokens_draft": 10}
                      for j, a in enumerate(["x", "x", "x"] if ok else ["x", "y", "z"])]
            base = {"query_id": f"{d}{i}", "task": "qa", "answer": "x", "error": None, "fast_path": False}
            spec.append({**base, "score": s, "drafts": drafts, "correct": ok})
            std.append({**base, "score": -1.0, "drafts": drafts[:1], "correct": True})
        members.update(_shard(d, "speculative-default", spec, 20.0))
        members.update(_shard(d, "standard", std, 40.0))
    r = bench.analyse({"m": members}, "m")
    a = r["arms"]["speculative-default"]
    assert a["rows"] == 80 and a["auroc"]["pooled"]["calibrated_cv"]["auroc"] > 0.9
    c = a["cascade"]["popqa"]
    assert c["spec_seconds_per_row"] == 0.5 and c["standard_seconds_per_row"] == 1.0
    at_half = next(p for p in c["points"] if p["share"] == 0.5)
    assert at_half["accuracy"] == 1.0 and at_half["seconds_ratio"] == 1.0
    curve = a["risk_coverage"]["pooled"]  # the agreeing drafts rank the right rows first
    assert curve[-1]["coverage"] == 1.0 and curve[-1]["risk"] == 0.5 and curve[-1]["rows"] == 80
    assert next(p for p in curve if p["coverage"] == 0.5)["risk"] < 0.1
    assert set(a["risk_coverage"]) == {"pooled", "task qa"}
    assert "## `speculative-default`" in bench.markdown(r, "2026-12-05")
