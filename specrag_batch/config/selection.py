"""The ``selection`` section (:class:`SelectionConfig`): combining draft scores, selecting the
answer, the low-confidence flag and the fallback (paper §3.3)."""

from __future__ import annotations

import math
import typing
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

from .base import YAML_BOOLEANS, Section, TauTask
from .calibration_model import CalibrationModel, check_tau
from .label_keys import LabelSelection


class SelectionConfig(Section, LabelSelection):
    """Stage 5: score combination and draft selection (paper §3.3, Eq. ρ_j)."""

    hash_added: ClassVar[tuple[tuple[str, Any], ...]] = (
        ("confidence", "score"), ("calibration", None), ("fallback", "none"), ("rule", "argmax"),
        ("label_distribution", False))
    hash_switched: ClassVar[tuple[tuple[str, str], ...]] = (("label_prior", "label_distribution"),)

    use_draft_score: bool = True
    use_self_consistency: bool = Field(
        False, description="add log ρ_SC (the verifier's log-probs of α and β, paper §3.3) to "
        "log ρ. Off by default (docs/decisions/007-selection-without-self-consistency.md). True = the paper's "
        "three terms (configs/production-gpu.yaml, configs/bench.yaml)")
    use_self_reflection: bool = Field(
        False, description="add log ρ_SR (log P(\"Yes\") from the verifier after the reflection "
        "question R, paper §3.3) to log ρ. Off by default: with ``use_self_consistency`` also "
        "off, log ρ = log ρ_draft alone and no verifier pass runs (the verifier engine is not "
        "loaded, ``RunConfig.uses_verifier``; docs/decisions/008-default-selection-draft-score-only.md). True = the paper's verifier (configs/production-gpu.yaml, "
        "configs/bench.yaml); a run naming another ``verifier.model`` while neither term is "
        "on warns that the verifier is unused (:meth:`RunConfig.idle_settings`)")
    self_reflection: Literal["paper", "contrast"] = Field(
        "paper", description="ρ_SR from the verifier's next token after R: paper = "
        "log P(Yes) (the paper's term); contrast = log P(Yes)/(P(Yes)+P(No)) (yes/no summed "
        "over the tokenizer's single-token spellings). The paper's term is the default "
        "(docs/results.md, \"Settings measured and kept\")")
    rule: Literal["argmax", "answer_vote", "length_normalised"] = Field(
        "argmax", description="how the fully scored valid drafts are ranked "
        "(:func:`specrag_batch.stages.selection.select`): argmax = the highest log ρ (the paper's "
        "rule, §3.3); answer_vote = drafts grouped by normalised answer, the group with the "
        "largest Σ ρ wins and its best-scored draft is returned; length_normalised = the "
        "highest log ρ per token (``mean_logprob``). answer_vote and length_normalised are "
        "this product's extensions; the selected draft's log ρ stays the row's score. The "
        "paper's rule is the default (docs/results.md, \"Settings measured and kept\")")
    random_selection: bool = Field(False, description="ablation: pick a draft at random")
    confidence: Literal["score", "mean_logprob", "calibrated", "label_probability"] = Field(
        "score", description="measure ``tau_min`` is compared with: score = log ρ (paper "
        "§3.3); mean_logprob = each enabled term per token (log ρ_draft / drafter tokens of "
        "β+α, log ρ_SC / verifier tokens of α+β, plus log ρ_SR), which does not fall with "
        "draft length (:func:`specrag_batch.stages.selection.mean_logprob`); calibrated = the probability of being right from ``calibration`` (tau_min then in [0, 1]); "
        "label_probability = the answer's probability under the label distribution (needs ``label_distribution``; in [0, 1]; qa rows get none and are never flagged)")
    calibration: dict[TauTask, CalibrationModel] | None = Field(
        None, description="task -> fitted model of the calibrated confidence (`specrag-batch "
        "calibrate --confidence calibrated` writes it; :mod:`specrag_batch.confidence.measures`); its rows' "
        "output column `confidence`; a task without one gets none and is never flagged")
    tau_min: float | dict[TauTask, float] | None = Field(
        None, description="threshold on the selected draft's confidence (``confidence``); "
        "below it the row is flagged `low_confidence`. One value for every task or a mapping "
        "task -> value (a task not in it is never flagged); None disables the flag. "
        "`specrag-batch calibrate` chooses it from a labelled run",
        json_schema_extra={"flag_help": (
            "threshold on the selected draft's confidence (a log-probability, <= 0; "
            "selection.confidence), one number for every task: a row below it is flagged "
            "low_confidence; `specrag-batch calibrate` chooses it from a labelled run. A "
            "per-task mapping is config-file only.")})

    @field_validator("tau_min", mode="before")
    @classmethod
    def _tau_tasks_known(cls, v: Any, info: ValidationInfo) -> Any:
        """Name an unknown task of a per-task ``tau_min`` mapping in one line (pydantic listed
        one error per member of the union, ``tau_min.dict[literal[...],float].bogus.[key]``).

        Every problem of the mapping is named in the one message, and a value that is neither a number, a mapping nor null is one message,
        not one per member of the union.

        Raises:
            ValueError: a mapping key that is not a task (``qa``, ``claim``, ``choice``), a
                boolean value (read as 0.0 or 1.0 otherwise), a value that is
                not a number (a date, a list, null inside the mapping), or NaN / ±inf."""
        def number(x: Any) -> bool:
            return isinstance(x, (int, float)) and not isinstance(x, bool)

        if isinstance(v, dict):
            tasks = typing.get_args(TauTask)
            problems = []
            for k, x in v.items():
                if k not in tasks:
                    problems.append(f"unknown task {k!r} in the per-task mapping; tasks: " + ", ".join(tasks))
                elif isinstance(x, bool):
                    problems.append(f"a number is needed for task {k!r}, got the boolean {x!r} {YAML_BOOLEANS}")
                elif not number(x):
                    problems.append(f"a number is needed for task {k!r}, got {x!r}")
                elif not math.isfinite(x):
                    problems.append(f"task {k!r}: must be finite, got {x}")
                elif why := check_tau(x, info.data.get("confidence"), f"task {k!r}: "):
                    problems.append(why)
            if problems:
                raise ValueError("; ".join(problems))
        elif v is not None and not (number(v) and math.isfinite(v)):  # NaN here: the error names its flag or file
            raise ValueError(f"must be finite or null, got {v}" if number(v) else "a number (<= 0), a mapping task "
                             f"-> number, or null is needed, got {v!r}" + (f" {YAML_BOOLEANS}" if isinstance(v, bool) else ""))
        return v

    @field_validator("tau_min")
    @classmethod
    def _tau_is_log(cls, v: float | dict | None, info: ValidationInfo) -> float | dict | None:
        """Raises ValueError for a positive value on a log-probability measure (every row would be flagged), or one outside [0, 1] on a probability."""
        for x in [] if v is None else v.values() if isinstance(v, dict) else [v]:
            if why := check_tau(x, info.data.get("confidence"), "tau_min "):
                raise ValueError(why + ("" if info.data.get("confidence") in ("calibrated", "label_probability")
                                        else ": every row would be flagged low_confidence"))
        return v
    consensus_min: int | None = Field(
        None, ge=1, description="c: when at least c' = max(2, min(c, valid drafts of the row)) "
        "drafts give the same normalised answer the verifier is skipped for that row (fast "
        "path); None = m (all valid drafts agree); one draft is never a consensus")
    consensus_enabled: bool = True
    fallback: Literal["none", "standard", "wider"] = Field(
        "none", description="second pass within the shard for rows selection flags "
        "`low_confidence`: standard = the verifier model answers from all N documents "
        "(Standard RAG, paper §4); wider = Speculative RAG again from N' = "
        "``retrieval.fallback_top_n`` documents (needs ``retrieval.index``); the fallback's "
        "answer replaces the first one (``answer_source``, ``first_answer``)")

    @property
    def verifier_scores_drafts(self) -> bool:
        """Whether log ρ holds a verifier term (``use_self_consistency`` or
        ``use_self_reflection``, paper §3.3), so Speculative RAG runs a verifier pass over drafts."""
        return self.use_self_consistency or self.use_self_reflection

    def tau_for(self, task: str) -> float | None:
        """``tau_min`` for rows of ``task`` (None: never flagged low-confidence)."""
        if isinstance(self.tau_min, dict):
            return self.tau_min.get(task)
        return self.tau_min
