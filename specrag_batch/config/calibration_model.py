"""``selection.calibration``: one fitted model of the calibrated confidence per task (the
probability that a row's selected answer is right, :mod:`specrag_batch.confidence.measures`), written by
``specrag-batch calibrate --confidence calibrated``."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, model_validator

CONFIDENCE_FEATURES = ("score", "score_draft", "score_self_consistency", "score_self_reflection",
                       "draft_per_token", "tokens_draft", "agreement", "vote_share", "margin",
                       "distinct_answers", "drafts", "fast_path", "answer_words")
"""The feature names a model may use (``specrag_batch.confidence.measures.FEATURES``; kept equal by a test,
the config layer does not import the confidence module)."""

SCORING_EXCLUDED = (("selection", "tau_min"), ("selection", "confidence"), ("selection", "calibration"),
                    ("selection", "fallback"), ("retrieval", "fallback_top_n"), (None, "chunk_rows"))
"""Keys left out of :meth:`RunConfig.scoring_hash`: they change which rows are flagged or
answered again, not the drafts and scores a calibrated model reads."""


class CalibrationModel(BaseModel):
    """A logistic regression over ``features``: P(right) = 1 / (1 + exp(-(intercept + Σ
    coefficients_i · x_i))), a NaN feature taking its ``fill`` value. ``config_hash``: the scoring
    hash (:meth:`RunConfig.scoring_hash`) of the labelled run it was fitted on; a config of
    another scoring hash refuses it. ``rows``: graded rows it was fitted on."""

    model_config = ConfigDict(extra="forbid")

    features: list[str] = Field(..., min_length=1)
    coefficients: list[float]
    intercept: float
    fill: list[float]
    config_hash: str = Field(..., pattern=r"^[0-9a-f]{16}$")
    rows: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _shape(self) -> "CalibrationModel":
        unknown = [f for f in self.features if f not in CONFIDENCE_FEATURES]
        if unknown:
            raise ValueError(f"unknown feature(s) {unknown}; features: {', '.join(CONFIDENCE_FEATURES)}")
        if not len(self.features) == len(self.coefficients) == len(self.fill):
            raise ValueError(f"{len(self.features)} features need as many coefficients and fill values, "
                             f"got {len(self.coefficients)} and {len(self.fill)}")
        if not all(math.isfinite(v) for v in [*self.coefficients, *self.fill, self.intercept]):
            raise ValueError("coefficients, fill and intercept must be finite")
        return self


def check_tau(tau: float, confidence: str | None, where: str = "") -> str | None:
    """Why ``tau`` cannot be a threshold on ``confidence`` (None when it can): a probability
    (``calibrated``, ``label_probability``) is in [0, 1]; the log-probability measures are <= 0."""
    if confidence in ("calibrated", "label_probability"):
        if not 0 <= tau <= 1:
            return (f"{where}{tau} is outside [0, 1], but selection.confidence {confidence!r} is a "
                    "probability")
        return None
    if 0 < tau < math.inf:
        return f"{where}{tau} is positive, but the confidence it is compared with is a log-probability (<= 0)"
    return None
