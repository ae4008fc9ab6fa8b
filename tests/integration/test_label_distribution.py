"""Label tasks answered from the drafter's distribution over their labels
(``selection.label_distribution``, issue 50), on the fake engine: every draft of a claim or
choice row gets a log-prob per label in one extra call per chunk, the row's answer is the
mixture's argmax (even a label no draft wrote), the hand-off through the intermediate Parquet
keeps them, the prior correction and ``tau_min`` on ``label_probability`` act on them, and
Standard RAG's label rows get theirs the same way."""

import math

import pytest

from specrag_batch.core import labels
from specrag_batch.run import pipeline
from specrag_batch.config import RunConfig

from ..fakes import FakeEngine
from ..pipeline_runs import INFO, config, disaggregated, fresh_rows, fused

ON = {"selection.label_distribution": True}


def _label_rows(records):
    return [r for r in records if r["task"] in ("claim", "choice") and r["error"] is None]


def test_each_draft_scores_every_label_and_the_row_answers_the_mixture_argmax():
    cfg = config(**ON)
    engine = FakeEngine()
    records = fused(cfg, engine)
    rows = _label_rows(records)
    assert {r["task"] for r in rows} == {"claim", "choice"}
    assert len(engine.calls_to("next_token_logprobs")) == 1  # one call per chunk (one chunk here)
    for r in rows:
        names = cfg.claim_labels if r["task"] == "claim" else ["A", "B", "C"]
        per_draft = [{e["label"]: e["logprob"] for e in d["label_logprobs"]} for d in r["drafts"]]
        assert all(list(d) == names and all(v < 0 for v in d.values()) for d in per_draft)
        want = labels.mixture(per_draft)  # equal weights over the drafts
        got = {e["label"]: e["probability"] for e in r["label_distribution"]}
        assert got == pytest.approx(want) and sum(got.values()) == pytest.approx(1.0)
        label, p = labels.argmax(want)
        assert r["label_probability"] == pytest.approx(p)
        assert r["answer"] == (label if r["task"] == "claim" else ["Paris", "Lyon", "Nice"][ord(label) - 65])
    for r in records:
        if r["task"] == "qa":
            assert r["label_distribution"] is None and all(d["label_logprobs"] is None for d in r["drafts"])


def test_off_by_default_no_call_and_no_columns():
    engine = FakeEngine()
    records = fused(config(), engine)
    assert engine.calls_to("next_token_logprobs") == []
    assert all(r["label_distribution"] is None and r["label_probability"] is None for r in records)


def test_fused_and_disaggregated_agree(tmp_path):
    cfg = config(**ON)
    assert fused(cfg) == disaggregated(cfg, tmp_path)


def test_batch_prior_correction_divides_out_the_chunk_mean():
    plain = {r["query_id"]: r for r in fused(config(**ON))}
    fixed = _label_rows(fused(config(**ON, **{"selection.label_prior": "batch"})))
    claims = [r for r in fixed if r["task"] == "claim"]
    prior = labels.batch_prior([{e["label"]: e["probability"] for e in plain[r["query_id"]]["label_distribution"]}
                                for r in claims])
    for r in claims:
        before = {e["label"]: e["probability"] for e in plain[r["query_id"]]["label_distribution"]}
        got = {e["label"]: e["probability"] for e in r["label_distribution"]}
        assert got == pytest.approx(labels.correct(before, prior))
    assert any(r["label_distribution"] != plain[r["query_id"]]["label_distribution"] for r in claims)


def test_tau_min_on_label_probability_flags_the_rows_below_it():
    probs = sorted(r["label_probability"] for r in _label_rows(fused(config(**ON))))
    tau = (probs[0] + probs[-1]) / 2
    records = fused(config(**ON, **{"selection.confidence": "label_probability", "selection.tau_min": tau}))
    for r in records:
        if r["task"] in ("claim", "choice") and r["error"] is None:
            assert r["low_confidence"] == (r["label_probability"] < tau)
        elif r["task"] == "qa" and r["error"] is None:
            assert r["low_confidence"] is False  # no label distribution: never flagged
    assert any(r["low_confidence"] for r in records) and not all(r["low_confidence"] for r in _label_rows(records))


def test_label_probability_needs_the_distribution():
    with pytest.raises(ValueError, match="label_distribution"):
        config(**{"selection.confidence": "label_probability"})


def test_standard_rag_label_rows_get_a_label_even_from_free_text():
    cfg = config(mode="standard", **ON)
    free = FakeEngine(reply=lambda text, h: " The claim is supported by the evidence, more or less.")
    rows = fresh_rows()
    records = pipeline.process_rows(rows, cfg, drafter=free, verifier=free, info=INFO)
    for r in _label_rows(records):
        assert len(r["drafts"]) == 1  # the written answer is no label or option: the distribution gives one
        assert {"answer_not_a_label", "answer_not_a_choice"} & set(r["drafts"][0]["flags"])
        assert r["answer"] in cfg.claim_labels + ["Paris", "Lyon", "Nice"]
        assert not math.isnan(r["label_probability"])


def _report(cfg, out):
    """The report of a fake-engine run of ``cfg`` written under ``out``."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from specrag_batch.run.report import write_report
    from specrag_batch.core.schema import OUTPUT_SCHEMA

    out.mkdir()
    pq.write_table(pa.Table.from_pylist(fused(cfg), schema=OUTPUT_SCHEMA), out / "a.parquet")
    (out / "_manifest.json").write_text(json.dumps({
        "shards": [{"status": "ok", "output": str(out / "a.parquet")}], "config": cfg.model_dump(mode="json")}))
    return write_report(str(out))


def test_the_report_shows_per_label_recall_before_and_after_the_prior_correction(tmp_path):
    plain = _report(config(**ON), tmp_path / "plain")["diagnostics"]["confusion"]["claim"]
    fixed = _report(config(**ON, **{"selection.label_prior": "batch"}), tmp_path / "fixed")
    claim = fixed["diagnostics"]["confusion"]["claim"]
    recall = [row[plain["answers"].index(g)] / sum(row) for g, row in zip(plain["labels"], plain["matrix"])]
    assert claim["labels"] == plain["labels"] and claim["recall_before_prior"] == pytest.approx(recall)
    assert "recall before prior correction |" in fixed["markdown"]
    assert "recall_before_prior" not in plain


def test_the_report_of_a_fake_engine_run_shows_confusion_matrix_and_reliability(tmp_path):
    out = tmp_path / "out"
    s = _report(config(**ON, **{"selection.confidence": "label_probability"}), out)
    assert set(s["diagnostics"]["confusion"]) == {"claim", "choice"}
    assert "label_probability" in s["diagnostics"]["reliability"]
    assert "## Confusion matrix: gold label (rows) against answer (columns)" in s["markdown"]
    assert "expected calibration error (ECE)" in s["markdown"]
    for name in ("confusion_matrix.png", "reliability.png"):
        assert (out / "_report" / name).stat().st_size > 1000
