"""The calibrated confidence (issue 39 item 2): the features of a row's drafts, the model's
fit and its refusals, the config keys (``selection.confidence: calibrated``,
``selection.calibration``) and the Selection stage's ``confidence`` and ``low_confidence``."""

import math

import numpy as np
import polars as pl
import pytest
from pydantic import ValidationError

from specrag_batch.config import RunConfig
from specrag_batch.config.calibration_model import CONFIDENCE_FEATURES
from specrag_batch.confidence.measures import FEATURES, features, probability, row_features, selected_index
from specrag_batch.confidence.fit import CalibrationInputError, fit, fit_task, fold_count, out_of_fold
from specrag_batch.core.records import Draft, QueryRow
from specrag_batch.stages.selection import Selection


def d(ans, sd, tokens=10):
    return Draft(doc_ids=["x"], answer=ans, rationale="r", score_draft=sd, score=sd, tokens_draft=tokens)


def f(x, name):
    return x[FEATURES.index(name)]


def test_the_config_layer_knows_every_feature():
    assert CONFIDENCE_FEATURES == FEATURES


def test_features_of_a_row_read_agreement_vote_margin_and_counts():
    drafts = [d("Paris", -1.0), d("paris.", -2.0), d("Lyon", -1.5), d("", -0.5)]
    x = features(drafts, 0, fast_path=False)
    assert f(x, "agreement") == pytest.approx(2 / 3)  # the empty answer does not vote
    w = np.exp([-1.0, -2.0, -1.5])
    assert f(x, "vote_share") == pytest.approx((w[0] + w[1]) / w.sum())
    assert f(x, "margin") == pytest.approx(0.5) and f(x, "distinct_answers") == 2 and f(x, "drafts") == 3
    assert f(x, "draft_per_token") == pytest.approx(-0.1) and f(x, "fast_path") == 0
    assert math.isnan(f(x, "score_self_consistency")) and f(x, "answer_words") == 1
    assert np.isnan(features(drafts, None, False)).all()


def test_an_output_row_gives_the_same_features_as_the_stage():
    drafts = [d("a b", -3.0), d("c", -1.0)]
    records = [{"answer": x.answer, "score": x.score, "score_draft": x.score_draft, "tokens_draft": 10}
               for x in drafts]
    assert selected_index(records, "c", -1.0) == 1 and selected_index(records, "zz", None) is None
    row = {"drafts": records, "answer": "c", "score": -1.0, "fast_path": True}
    np.testing.assert_array_equal(row_features(row), features(drafts, 1, True))


def _data(n=80, seed=0):
    rng = np.random.default_rng(seed)
    x = np.full((n, len(FEATURES)), np.nan)
    y = rng.random(n) < 0.5
    x[:, FEATURES.index("agreement")] = np.where(y, 0.8, 0.4) + rng.normal(0, 0.2, n)
    x[:, FEATURES.index("score")] = rng.normal(-5, 1, n)
    return x, y


def test_fit_learns_the_direction_and_folds_the_scaling_into_the_weights():
    x, y = _data()
    m = fit_task(x, y, task="qa", config_hash="0" * 16)
    assert m.features == ["score", "agreement"] and m.coefficients[1] > 0
    p = m.predict(x)
    assert ((0 <= p) & (p <= 1)).all() and p[y].mean() > p[~y].mean() + 0.2
    oof = out_of_fold(x, y)
    assert not np.isnan(oof).any()
    np.testing.assert_allclose(probability(x, m.features, m.coefficients, m.intercept, m.fill), p)


@pytest.mark.parametrize("case, message", [
    ("few", "task 'qa': 20 graded rows \\(\\d+ right, \\d+ wrong\\), fewer than the 30"),
    ("one_class", "task 'qa': 80 graded rows \\(80 right, 0 wrong\\): .* at least 5 right and 5 wrong"),
    ("equal", "equal or missing")])
def test_fit_refuses_data_no_model_should_rest_on(case, message):
    x, y = _data()
    if case == "few":
        x, y = x[:20], y[:20]
    elif case == "one_class":
        y = np.ones_like(y)
    else:
        x[:, FEATURES.index("agreement")] = 0.5
        x[:, FEATURES.index("score")] = -1.0
    with pytest.raises(CalibrationInputError, match=message):
        fit_task(x, y, task="qa")


@pytest.mark.parametrize("n, right", [(30, 15), (30, 5), (30, 25), (37, 6)])
def test_a_run_meeting_the_minimums_gets_a_model_and_its_out_of_fold_check(n, right):
    """Issue 47 item 4: the minimums (30 graded rows, 5 right and 5 wrong) hold for the run's
    task; the check's folds (fewer when a class is small) never refuse a run that meets them."""
    x, _ = _data(n)
    y = np.arange(n) < right
    x[:, FEATURES.index("agreement")] = np.where(y, 0.8, 0.4) + np.random.default_rng(1).normal(0, 0.2, n)
    assert fold_count(y) == min(5, right, n - right)
    m = fit_task(x, y, task="qa")
    p = out_of_fold(x, y)
    assert m.rows == n and not np.isnan(p).any() and p[y].mean() > p[~y].mean()
    if n == 30 or right == 5:  # one right row fewer: refused on the run's counts (a fold's are never named)
        with pytest.raises(CalibrationInputError, match=rf"task 'qa': {n - 1} graded rows \({right - 1} right"):
            fit_task(x[1:], y[1:], task="qa")


def test_fit_of_a_run_without_gold_is_refused():
    rows = pl.DataFrame({"task": ["qa"], "answer": ["a"], "error": [None], "correct": [None]},
                        schema_overrides={"correct": pl.Boolean, "error": pl.String})
    with pytest.raises(CalibrationInputError, match="labelled run"):
        fit(rows, "0" * 16)
    with pytest.raises(CalibrationInputError, match="no gold"):
        fit(rows.drop("correct"), "0" * 16)


def test_fit_refuses_positive_scores_naming_the_row_as_plain_calibrate_does():
    rows = pl.DataFrame({"query_id": ["q1", "q2"], "task": ["qa", "qa"], "answer": ["a", "b"],
                         "error": [None, None], "correct": [True, False], "score": [-1.0, 2.5]},
                        schema_overrides={"error": pl.String})
    with pytest.raises(CalibrationInputError, match=r"query_id='q2'.*field 'score'.*2.5 > 0"):
        fit(rows, "0" * 16)


def _model(config_hash, agreement_weight=4.0):
    return {"features": ["agreement"], "coefficients": [agreement_weight], "intercept": -2.0,
            "fill": [0.5], "config_hash": config_hash}


def test_config_keys_validate_and_leave_existing_hashes_alone():
    base = RunConfig()
    own = base.scoring_hash()
    assert RunConfig(selection={"tau_min": -3.0}).scoring_hash() == own  # flags only
    cfg = RunConfig(selection={"confidence": "calibrated", "tau_min": {"qa": 0.6},
                               "calibration": {"qa": _model(own)}})
    assert cfg.scoring_hash() == own and cfg.config_hash() != base.config_hash()
    with pytest.raises(ValidationError, match="outside \\[0, 1\\]"):
        RunConfig(selection={"confidence": "calibrated", "tau_min": 1.5, "calibration": {"qa": _model(own)}})
    with pytest.raises(ValidationError, match="is positive"):
        RunConfig(selection={"tau_min": 0.6})
    with pytest.raises(ValidationError, match="needs selection.calibration"):
        RunConfig(selection={"confidence": "calibrated"})
    with pytest.raises(ValidationError, match="unknown feature"):
        RunConfig(selection={"calibration": {"qa": {**_model(own), "features": ["bogus"]}}})


def test_a_model_fitted_on_another_config_is_refused_naming_both_hashes():
    own = RunConfig().scoring_hash()
    with pytest.raises(ValidationError) as e:
        RunConfig(selection={"confidence": "calibrated", "calibration": {"claim": _model("abcdef0123456789")}})
    assert "abcdef0123456789" in str(e.value) and own in str(e.value) and "calibration.claim" in str(e.value)


def test_selection_writes_the_probability_and_flags_below_tau_even_on_the_fast_path():
    own = RunConfig().scoring_hash()
    cfg = RunConfig(selection={"confidence": "calibrated", "tau_min": {"qa": 0.5},
                               "calibration": {"qa": _model(own)}})
    agree = QueryRow(0, "q1", "Who?", "qa", consensus=[0, 1], drafts=[d("a", -1.0), d("a", -2.0)])
    split = QueryRow(1, "q2", "Who?", "qa", consensus=None, drafts=[d("a", -1.0), d("b", -2.0), d("c", -3.0)])
    other = QueryRow(2, "q3", "Is it?", "claim", consensus=None, drafts=[d("SUPPORTS", -1.0)])
    Selection(cfg)([agree, split, other])
    assert agree.selection.fast_path and agree.selection.confidence == pytest.approx(1 / (1 + math.exp(-2.0)))
    assert not agree.selection.low_confidence
    p = 1 / (1 + math.exp(-(4 / 3 - 2.0)))
    assert split.selection.confidence == pytest.approx(p) and split.selection.low_confidence
    assert other.selection.confidence is None and not other.selection.low_confidence  # no claim model
