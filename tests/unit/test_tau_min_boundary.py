"""A row exactly at τ_min is kept (issue 40 item 10): docs/configuration.md and
docs/operations.md ("Calibrating tau_min") say rows with confidence ≥ τ_min are kept and only
those below it are flagged low_confidence; `calibrate` picks τ_min as one of the rows' own
confidences, so the row that sets it sits exactly at the threshold in the next run."""

import math

import numpy as np
import pytest

from specrag_batch.confidence.calibration import choose_tau, risk_coverage
from specrag_batch.config import RunConfig
from specrag_batch.core.records import Draft, QueryRow
from specrag_batch.stages.selection import Selection, select


def d(sd, sc=None, sr=None, tokens=None):
    return Draft(doc_ids=["x"], answer="a", rationale="r", valid=True, score_draft=sd,
                 score_self_consistency=sc, score_self_reflection=sr, tokens_draft=tokens,
                 tokens_answer=2 if sc is not None else None, tokens_rationale=2 if sc is not None else None)


@pytest.mark.parametrize("kw", [dict(use_sc=False, use_sr=False), dict()])
def test_a_row_exactly_at_tau_min_is_kept_and_one_just_below_is_flagged(kw):
    drafts = [d(-0.5, -0.25, -0.75)] if kw == {} else [d(-1.5)]  # log ρ = -1.5 exactly either way
    at = select(drafts, tau_min=-1.5, **kw)
    assert at.score == -1.5 and at.low_confidence is False
    assert select(drafts, tau_min=math.nextafter(-1.5, 0.0), **kw).low_confidence is True


def test_exactly_at_tau_min_under_mean_logprob():
    drafts = [d(-2.0, tokens=4)]  # -0.5 nats per token
    assert select(drafts, use_sc=False, use_sr=False, tau_min=-0.5, confidence="mean_logprob").low_confidence is False
    assert select(drafts, use_sc=False, use_sr=False, tau_min=math.nextafter(-0.5, 0.0),
                  confidence="mean_logprob").low_confidence is True


def test_selection_stage_keeps_the_row_at_its_task_threshold():
    cfg = RunConfig.model_validate({"selection": {"tau_min": {"qa": -1.5, "claim": -1.0}}})
    cases = [("qa", -1.5), ("qa", math.nextafter(-1.5, -2.0)), ("claim", -1.0), ("claim", math.nextafter(-1.0, -2.0))]
    rows = [QueryRow(i, f"q{i}", "Who?", task, consensus=None, drafts=[d(s)]) for i, (task, s) in enumerate(cases)]
    Selection(cfg)(rows)
    assert [r.selection.low_confidence for r in rows] == [False, True, False, True]


def test_the_tau_calibrate_picks_keeps_the_row_that_set_it():
    conf = np.array([-0.5, -1.0, -1.5, -2.0, -3.0])
    correct = np.array([True, True, True, False, False])
    curve = risk_coverage(conf, correct)
    i = choose_tau(curve, target_accuracy=1.0)
    tau = float(curve.taus[i])
    assert tau == -1.5 and curve.coverage[i] == pytest.approx(3 / 5)
    kept = [not select([d(c)], use_sc=False, use_sr=False, tau_min=tau).low_confidence for c in conf]
    assert sum(kept) == round(curve.coverage[i] * curve.n) == 3
