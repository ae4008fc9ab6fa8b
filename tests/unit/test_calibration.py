"""Calibration of τ_min on a fixture with known scores and labels (thresholds computed by
hand), the length-normalised confidence, and the telemetry default."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import polars as pl
import pytest

from specrag_batch.confidence import calibration
from specrag_batch.config import RunConfig, load_config
from specrag_batch.run.report import with_mean_logprob
from specrag_batch.core.records import Draft
from specrag_batch.stages.selection import mean_logprob, select
from specrag_batch.core.quiet import apply_default


def _rows() -> pl.DataFrame:
    """8 graded qa rows: six thresholdable ones scored -1..-6 (correct T T F T F F), one
    fast-path row (always kept, correct), one row flagged no_valid_draft (never kept, correct);
    plus an errored row and an ungraded row (both ignored), and 3 claim rows all wrong."""
    qa = [(-1.0, True), (-2.0, True), (-3.0, False), (-4.0, True), (-5.0, False), (-6.0, False)]
    recs = [dict(task="qa", score=s, correct=c, fast_path=False, flags=[], error=None, answer="x")
            for s, c in qa]
    recs += [dict(task="qa", score=-10.0, correct=True, fast_path=True, flags=[], error=None, answer="x"),
             dict(task="qa", score=-0.5, correct=True, fast_path=False, flags=["no_valid_draft"],
                  error=None, answer="x"),
             dict(task="qa", score=None, correct=None, fast_path=None, flags=[], error="row 9: bad",
                  answer=None),
             dict(task="qa", score=-0.1, correct=None, fast_path=False, flags=[], error=None, answer="x")]
    recs += [dict(task="claim", score=s, correct=False, fast_path=False, flags=[], error=None,
                  answer="SUPPORTS") for s in (-1.0, -2.0, -3.0)]
    df = pl.DataFrame(recs, schema={"task": pl.String, "score": pl.Float64, "correct": pl.Boolean,
                                    "fast_path": pl.Boolean, "flags": pl.List(pl.String),
                                    "error": pl.String, "answer": pl.String})
    return df.with_columns(mean_logprob=pl.col("score") / 2)


# Worked by hand (n = 8 graded qa rows; the fast-path row is always kept and correct):
#   τ     kept  right  accuracy  coverage
#   -1    2     2      1.000     0.250
#   -2    3     3      1.000     0.375
#   -3    4     3      0.750     0.500
#   -4    5     4      0.800     0.625
#   -5    6     4      0.667     0.750
#   -6    7     4      0.571     0.875
def test_risk_coverage_by_hand():
    g = calibration.graded_rows(_rows()).filter(pl.col("task") == "qa")
    c = calibration.risk_coverage(calibration.measure_values(g, "score"), g["correct"], g["always"])
    assert c.n == 8
    assert c.taus.tolist() == [-1, -2, -3, -4, -5, -6]
    assert c.coverage.tolist() == pytest.approx([2 / 8, 3 / 8, 4 / 8, 5 / 8, 6 / 8, 7 / 8])
    assert c.accuracy.tolist() == pytest.approx([1, 1, 3 / 4, 4 / 5, 4 / 6, 4 / 7])


@pytest.mark.parametrize("kw, tau, cov, acc", [
    ({"target_accuracy": 0.8}, -4.0, 5 / 8, 0.8),
    ({"target_accuracy": 0.75}, -4.0, 5 / 8, 0.8),   # -4 keeps more than -3 and is still >= .75
    ({"target_accuracy": 1.0}, -2.0, 3 / 8, 1.0),
    ({"target_coverage": 0.7}, -5.0, 6 / 8, 4 / 6),
    ({"target_coverage": 0.25}, -1.0, 2 / 8, 1.0),
])
def test_threshold_by_hand(kw, tau, cov, acc):
    res = {r.task: r for r in calibration.calibrate(_rows(), n_boot=200, **kw)}
    qa = res["qa"]
    assert (qa.tau, qa.coverage, qa.accuracy) == (tau, pytest.approx(cov), pytest.approx(acc))
    assert qa.n == 8 and qa.interval is not None
    assert qa.interval[0] <= qa.interval[1]
    if "target_accuracy" in kw:  # all claim rows are wrong: no τ reaches an accuracy target
        assert res["claim"].tau is None and res["claim"].bootstrap_unreachable == 200


def test_mean_logprob_measure_and_auroc():
    res = calibration.calibrate(_rows(), measure="mean_logprob", target_accuracy=0.8, n_boot=50)
    qa = next(r for r in res if r.task == "qa")
    assert qa.tau == -2.0 and qa.measure == "mean_logprob"  # the same row, score / 2
    # correct rows (-1, -2, -4) vs wrong (-3, -5, -6): 8 of 9 pairs ordered right
    assert qa.auroc["score"] == pytest.approx(8 / 9)
    assert qa.auroc["mean_logprob"] == pytest.approx(8 / 9)


def test_bad_targets_and_measure():
    with pytest.raises(ValueError, match="exactly one"):
        calibration.calibrate(_rows())
    with pytest.raises(ValueError, match="exactly one"):
        calibration.calibrate(_rows(), target_accuracy=0.8, target_coverage=0.5)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        calibration.calibrate(_rows(), target_accuracy=1.5)
    with pytest.raises(ValueError, match="unknown confidence measure"):
        calibration.calibrate(_rows(), measure="entropy", target_accuracy=0.8)
    with pytest.raises(ValueError, match="labelled run"):
        calibration.calibrate(_rows().with_columns(correct=pl.lit(None, pl.Boolean)), target_accuracy=0.8)


def test_snippet_is_a_config(tmp_path):
    res = calibration.calibrate(_rows(), target_accuracy=0.8, n_boot=20)
    p = tmp_path / "tau.yaml"
    p.write_text(calibration.config_snippet(res, "calibrate out/ (accuracy >= 0.8)"))
    cfg = load_config(p)
    assert cfg.selection.tau_for("qa") == -4.0
    assert cfg.selection.tau_for("claim") is None  # target not met: never flagged
    assert "claim: target not met" in p.read_text()


def _draft(**kw) -> Draft:
    return Draft(doc_ids=["d"], answer=kw.pop("answer", "a"), rationale="r", **kw)


def test_mean_logprob_is_per_token():
    long = _draft(score_draft=-6.0, tokens_draft=60, score_self_consistency=-8.0,
                  tokens_answer=10, tokens_rationale=30, score_self_reflection=-0.1)
    assert mean_logprob(long, True, True, True) == pytest.approx(-0.1 - 0.2 - 0.1)
    assert mean_logprob(long, True, False, False) == pytest.approx(-0.1)
    assert mean_logprob(_draft(score_draft=-1.0, tokens_draft=0), True, False, False) is None
    # a long draft: log ρ = -14.1 is below τ = -5, its mean per token (-0.4) is not
    flagged = select([long], tau_min=-5.0)
    per_token = select([dataclasses.replace(long, flags=[])], tau_min=-5.0, confidence="mean_logprob")
    assert flagged.low_confidence and not per_token.low_confidence


def test_report_mean_logprob_equals_selection():
    """The polars column of the report is the same number as selection.mean_logprob."""
    ds = [_draft(answer="a", score_draft=-3.0, tokens_draft=12, score_self_consistency=-5.0,
                 tokens_answer=2, tokens_rationale=8, score_self_reflection=-0.3),
          _draft(answer="b", score_draft=-2.0, tokens_draft=4, score_self_consistency=-9.0,
                 tokens_answer=1, tokens_rationale=5, score_self_reflection=-0.2)]
    recs = []
    for fast in (False, True):
        s = select(ds, fast_path=[0, 1] if fast else None)
        best = ds[s.index]
        recs.append(dict(score=s.score, score_draft=best.score_draft, answer=best.answer,
                         score_self_consistency=best.score_self_consistency,
                         score_self_reflection=best.score_self_reflection, fast_path=fast,
                         mode="speculative",
                         drafts=[{k: getattr(d, k) for k in ("answer", "score_draft",
                                  "score_self_consistency", "score_self_reflection",
                                  "tokens_draft", "tokens_answer", "tokens_rationale")} for d in ds]))
    out = with_mean_logprob(pl.DataFrame(recs))["mean_logprob"].to_list()
    assert out[0] == pytest.approx(mean_logprob(ds[0], True, True, True))  # a: -10.1 > -11.2
    assert out[1] == pytest.approx(-2.0 / 4)  # fast path: draft term only, b has the best ρ_draft


def test_config_tau_per_task_and_hash():
    cfg = load_config(None, {"selection.tau_min": {"qa": -3.0}})
    assert (cfg.selection.tau_for("qa"), cfg.selection.tau_for("claim")) == (-3.0, None)
    base = RunConfig()
    assert load_config(None, {"selection.confidence": "score"}).config_hash() == base.config_hash()
    assert load_config(None, {"selection.confidence": "mean_logprob"}).config_hash() != base.config_hash()
    with pytest.raises(ValueError, match="finite"):
        load_config(None, {"selection.tau_min": {"qa": math.inf}})
    with pytest.raises(ValueError):
        load_config(None, {"selection.tau_min": {"qq": -1.0}})


def test_telemetry_off_by_default():
    env: dict = {}
    assert apply_default(env) == {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
    env = {"PREFECT_SERVER_ANALYTICS_ENABLED": "true"}  # the user's own choice is kept
    apply_default(env)
    assert env["PREFECT_SERVER_ANALYTICS_ENABLED"] == "true" and env["DO_NOT_TRACK"] == "1"
    env = {"SPECRAG_TELEMETRY": "1"}
    assert apply_default(env) == {} and env == {"SPECRAG_TELEMETRY": "1"}


def test_auroc_edge_cases():
    assert calibration.auroc([1.0, 2.0], [True, True]) is None
    assert calibration.auroc([np.nan, 1.0, 2.0], [False, False, True]) == 1.0


def test_a_tau_from_a_score_that_ranks_wrong_rows_first_is_warned_about(tmp_path):
    df = _rows().with_columns(score=-11.0 - pl.col("score")).with_columns(mean_logprob=pl.col("score") / 2)  # reversed
    res = {r.task: r for r in calibration.calibrate(df, target_coverage=0.5, n_boot=20)}
    qa = res["qa"]
    assert qa.tau is not None and qa.auroc["score"] < 0.5
    assert qa.no_ranking.startswith("qa: score ranks right rows no higher than wrong ones (AUROC")
    assert f"# WARNING {qa.no_ranking}" in calibration.config_snippet(list(res.values()), "calibrate out/")
    right = {r.task: r for r in calibration.calibrate(_rows(), target_coverage=0.5, n_boot=20)}
    assert right["qa"].auroc["score"] > 0.5 and right["qa"].no_ranking is None


def test_a_tau_over_rows_of_one_class_says_no_auroc_backs_it():
    res = {r.task: r for r in calibration.calibrate(_rows(), target_coverage=0.5, n_boot=20)}
    claim = res["claim"]  # three rows, all wrong: coverage is met, nothing is ranked
    assert claim.tau is not None and claim.auroc["score"] is None
    assert claim.no_ranking.startswith("claim: score has no AUROC here (the rows outside the fast path are all right or all wrong)")
    assert f"# WARNING {claim.no_ranking}" in calibration.config_snippet(list(res.values()), "calibrate out/")
