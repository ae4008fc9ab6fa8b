"""The label distribution's arithmetic (specrag_batch.core.labels, issue 50): normalising, the
equal-weight mixture over drafts, the batch prior and its correction, per-label recall."""

import math

import pytest

from specrag_batch.core import labels


def test_normalise_is_a_softmax_and_zeroes_non_finite():
    p = labels.normalise({"A": math.log(0.2), "B": math.log(0.6), "C": -math.inf})
    assert p == pytest.approx({"A": 0.25, "B": 0.75, "C": 0.0})
    assert labels.normalise({"A": math.nan, "B": math.nan}) == {"A": 0.5, "B": 0.5}


def test_mixture_weighs_drafts_equally_and_skips_drafts_without_scores():
    # draft 1 favours A (0.8), draft 2 favours B (0.9): the equal-weight mean, not the sharper one
    d1 = {"A": math.log(0.8), "B": math.log(0.2)}
    d2 = {"A": math.log(0.1), "B": math.log(0.9)}
    assert labels.mixture([d1, None, d2, {}]) == pytest.approx({"A": 0.45, "B": 0.55})
    assert labels.mixture([None, {}]) is None


def test_prior_correction_can_turn_a_label_the_drafter_over_says():
    # the drafter says SUPPORTS for everything: dividing out its mean shows the row leaning to REFUTES
    rows = [{"SUPPORTS": 0.9, "REFUTES": 0.1}, {"SUPPORTS": 0.7, "REFUTES": 0.3}]
    prior = labels.batch_prior(rows + [None])
    assert prior == pytest.approx({"SUPPORTS": 0.8, "REFUTES": 0.2})
    fixed = labels.correct(rows[1], prior)
    assert labels.argmax(rows[1])[0] == "SUPPORTS"
    assert labels.argmax(fixed)[0] == "REFUTES" and sum(fixed.values()) == pytest.approx(1.0)
    # (0.7/0.8) / (0.7/0.8 + 0.3/0.2)
    assert fixed["SUPPORTS"] == pytest.approx(0.875 / (0.875 + 1.5))


def test_labels_and_answers_of_each_task():
    assert labels.label_names("claim", None, ["S", "R"]) == ["S", "R"]
    assert labels.label_names("choice", ["x", "y", "z"], ["S"]) == ["A", "B", "C"]
    assert labels.label_names("qa", None, ["S"]) == []
    assert labels.canonical_answer("choice", "B", ["x", "y"]) == "y"
    assert labels.canonical_answer("claim", "S", None) == "S"


def test_argmax_keeps_the_first_of_equals_and_recall_per_gold_label():
    assert labels.argmax({"A": 0.5, "B": 0.5}) == ("A", 0.5)
    assert labels.argmax({}) is None
    rec = labels.per_label_recall(["S", "S", "R", "R"], ["S", "R", "S", None])
    assert rec == {"R": (0.0, 2), "S": (0.5, 2)}
