"""The ``drift`` section: how the nightly and backfill flows compare a night's run with the
nights before it (:mod:`specrag_batch.run.drift.compare`). It changes no row, so it is left out of the
config hash (:data:`~specrag_batch.config.hashing.UNHASHED_SECTIONS`): a changed threshold
keeps the baseline nights and resumes the same run."""

from __future__ import annotations

from typing import ClassVar

import fnmatch

from pydantic import Field, field_validator

from .base import Section

MEASURE_FAMILIES = ("low_confidence_rate", "fast_path_rate", "error_rate", "error_reason", "answer_source",
                    "accuracy", "answers", "score", "confidence", "answer_length", "draft_tokens",
                    "seconds_per_row", "tokens_per_row", "engine_seconds_per_row")
"""Names of the measures a night's profile is compared on; a measure is named
``<family>`` or ``<family>:<part>`` (``error_reason:no_documents``, ``answers:claim``,
``tokens_per_row:<model>:generated``), as :mod:`specrag_batch.run.drift.compare` writes them."""


def _check_patterns(patterns, what: str) -> None:
    """Raises ValueError for a pattern that can match no measure name of :data:`MEASURE_FAMILIES`."""
    for p in patterns:
        head = p.split(":", 1)[0]
        if not any(fnmatch.fnmatchcase(f, head) for f in MEASURE_FAMILIES):
            raise ValueError(f"{what} {p!r} matches no measure; measures are named "
                             f"<family>[:<part>], families: {', '.join(MEASURE_FAMILIES)}")


class DriftConfig(Section):
    """Night-over-night comparison (:mod:`specrag_batch.run.drift.compare`): thresholds per kind of
    measure, per-measure overrides, and which moved measures fail the flow run."""

    hashed: ClassVar[bool] = False  # read after the run: a changed threshold changes no row

    enabled: bool = Field(True, description="the nightly and backfill flows compare each night with the "
                          "nights before it and write `_report/drift.json` and the report's section")
    baseline_nights: int = Field(7, ge=1, description="K: the last K finished nights before this one that "
                                 "share its config hash make the baseline")
    p_value: float = Field(0.01, gt=0.0, lt=1.0, description="a measure moved only when its test's p-value "
                           "is below this (rates, label mixes, distributions)")
    min_rate_change: float = Field(0.05, ge=0.0, le=1.0, description="rates: and the rate moved by at least "
                                   "this much (absolute, 0.05 = 5 percentage points)")
    min_distance: float = Field(0.1, ge=0.0, le=1.0, description="distributions: and the two-sample "
                                "Kolmogorov-Smirnov statistic is at least this; label mixes: and Cramér's "
                                "V is at least this")
    max_relative_change: float = Field(0.5, gt=0.0, description="seconds and tokens per row: moved when "
                                       "tonight's value differs from the baseline nights' median by more "
                                       "than this fraction of it (no p-value: one value per night)")
    min_effect: dict[str, float] = Field(default_factory=dict, description="measure name or glob "
                                         "(`seconds_per_row`, `error_reason:*`) -> its effect threshold, in "
                                         "place of the kind's (min_rate_change, min_distance or "
                                         "max_relative_change)")
    fail_on: list[str] = Field(default_factory=list, description="measure names or globs (`error_rate`, "
                               "`error_reason:*`, `answers:*`): the nightly (or backfill) flow run fails, "
                               "naming them, when one of these moved; empty = never fails")
    require_baseline: bool = Field(False, description="fail the flow run when a night has no baseline "
                                   "(first night, other config hash, missing or unreadable profiles)")

    @field_validator("fail_on")
    @classmethod
    def _fail_on(cls, v: list[str]) -> list[str]:
        """Raises ValueError for a pattern that names no measure."""
        _check_patterns(v, "drift.fail_on:")
        return v

    @field_validator("min_effect")
    @classmethod
    def _min_effect(cls, v: dict[str, float]) -> dict[str, float]:
        """Raises ValueError for a pattern that names no measure or a negative threshold."""
        _check_patterns(v, "drift.min_effect:")
        for k, x in v.items():
            if not x >= 0:
                raise ValueError(f"drift.min_effect: {k!r}: must be >= 0, got {x}")
        return v

    def effect_threshold(self, measure: str, default: float) -> float:
        """The effect threshold of ``measure``: the first :attr:`min_effect` entry whose name or
        glob matches it, else ``default`` (its kind's)."""
        return next((x for p, x in self.min_effect.items() if fnmatch.fnmatchcase(measure, p)), default)

    def fails_on(self, measure: str) -> bool:
        """Whether a move of ``measure`` fails the flow run (:attr:`fail_on`)."""
        return any(fnmatch.fnmatchcase(measure, p) for p in self.fail_on)
