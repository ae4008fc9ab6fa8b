"""``selection.label_distribution`` and ``selection.label_prior``: the answer of a claim or
choice row read from the drafter's distribution over its labels (issue 50;
:mod:`specrag_batch.core.labels`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class LabelSelection(BaseModel):
    """The label-distribution keys of ``selection`` (a base of ``SelectionConfig``)."""

    label_distribution: bool = Field(
        False, description="claim and choice rows: each draft gets the drafter's log-probability "
        "of every label after its rationale (one more batched drafter call per chunk; output "
        "column `drafts.label_logprobs`); the row's distribution is the equal-weight mixture of "
        "its drafts' distributions, its answer the most probable label (even one no draft "
        "wrote), `label_probability` that label's probability. Standard RAG's label rows too. "
        "qa rows are unchanged")
    label_prior: Literal["none", "batch"] = Field(
        "none", description="label-prior correction of the row distributions (contextual "
        "calibration, Zhao et al. 2021), read only with `label_distribution`: none = off; "
        "batch = each row's distribution divided by the mean distribution of the chunk's rows "
        "of its task (estimated without gold) and renormalised")
