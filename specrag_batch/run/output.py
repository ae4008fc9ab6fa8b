"""The output record of a row (:data:`specrag_batch.core.schema.OUTPUT_SCHEMA`), with evaluation
against ``gold`` (stage 6)."""

from __future__ import annotations

import dataclasses

from ..config import RunConfig
from ..stages.evaluation import score_row
from ..engines.models import model_id
from ..core.records import Draft, Flag, QueryRow, SelectedAnswer
from ..core.schema import DRAFT_TYPE
from ..stages.base import RunInfo

_DRAFT_FIELDS = tuple(DRAFT_TYPE.field(i).name for i in range(DRAFT_TYPE.num_fields))


def _add_flags(flags: list[str], more) -> None:
    flags += [flag for flag in more if flag not in flags]


def output_row(row: QueryRow, result: tuple[list[Draft], SelectedAnswer] | None, config: RunConfig,
               info: RunInfo) -> dict:
    """One output record (see :data:`schema.OUTPUT_SCHEMA`) from the row and its
    (drafts, selection), None when the row has none (it has an error, or was not selected)."""
    record = {"query_id": row.query_id, "task": row.task, "query": row.query, "answer": None,
              "rationale": None, "score": None, "score_draft": None, "score_self_consistency": None,
              "score_self_reflection": None, "low_confidence": None, "confidence": None, "fast_path": None,
              "num_documents": row.num_documents, "drafts": [], "flags": list(row.flags),
              "error": row.error, "error_reason": row.error_reason, "gold": row.gold, "correct": None, "exact_match": None,
              "f1": None, "draft_rounds": row.draft_rounds, "answer_source": None,
              "first_answer": None, "first_score": None, "first_correct": None,
              "fallback_error": None, "verifier_drafts_deduplicated": row.verifier_drafts_deduplicated,
              "label_distribution": None, "label_probability": None, "mode": config.mode_for(row.task),
              "drafter_model": model_id(config.drafter.model) if config.mode_for(row.task) == "speculative" else None,
              "verifier_model": model_id(config.verifier.model), "run_id": info.run_id,
              "source_file": info.source_file}
    if row.error is None and result is not None:
        drafts, selection = result
        record["drafts"] = [{k: v for k, v in d.to_record().items() if k in _DRAFT_FIELDS}
                            for d in drafts]
        record["low_confidence"] = selection.low_confidence
        record["confidence"] = selection.confidence
        record["fast_path"] = selection.fast_path
        record["answer_source"] = "first"
        _add_flags(record["flags"], selection.flags)
        if selection.index is not None:
            best = drafts[selection.index]
            record.update(answer=best.answer, rationale=best.rationale, score=selection.score,
                          score_draft=best.score_draft,
                          score_self_consistency=best.score_self_consistency,
                          score_self_reflection=best.score_self_reflection)
            _add_flags(record["flags"], best.flags)
        if selection.label_distribution is not None:
            record.update(label_distribution=[{"label": k, "probability": v}
                                              for k, v in selection.label_distribution.items()],
                          label_probability=selection.label_probability)
            if selection.answer is not None:
                record["answer"] = selection.answer
        if any(Flag.NON_FINITE_LOGPROB in d.flags for d in drafts):
            _add_flags(record["flags"], [Flag.NON_FINITE_LOGPROB])
    if row.error is None:
        metrics = score_row(row.task, record["answer"], row.gold, choices=row.choices,
                            labels=config.claim_labels)
        record.update(correct=metrics.correct, exact_match=metrics.exact_match, f1=metrics.f1)
        _add_flags(record["flags"], metrics.flags)
    return record


def output_record(row: QueryRow, config: RunConfig, info: RunInfo) -> dict:
    """:func:`output_row` from the row state the stages left.

    A row the fallback pass answered (``row.fallback``, stage ``fallback``) comes out with
    the fallback's answer: ``answer``, ``rationale``, the scores, ``drafts``, ``fast_path``,
    ``num_documents`` and ``correct``/``exact_match``/``f1`` are the fallback's,
    ``answer_source`` names it, ``first_answer``/``first_score``/``first_correct`` keep the
    first pass's, ``low_confidence`` stays true (why it was answered again) and ``flags``
    holds both passes' flags. When the fallback pass gave no answer (a row error, or no
    draft) the first answer is kept: flag ``fallback_failed``, the reason in
    ``fallback_error``."""
    result = (row.drafts, row.selection) if row.selection is not None else None
    record = output_row(row, result, config, info)
    if row.fallback is None:
        return record
    again = dataclasses.replace(row.fallback.row, gold=row.gold)
    if again.verifier_drafts_deduplicated is not None:  # verifier passes saved in both passes
        record["verifier_drafts_deduplicated"] = ((record["verifier_drafts_deduplicated"] or 0)
                                                  + again.verifier_drafts_deduplicated)
    if again.error is not None or again.selection is None or again.selection.index is None:
        _add_flags(record["flags"], [Flag.FALLBACK_FAILED])
        record["fallback_error"] = again.error or f"{row.fallback.source} selected no draft"
        return record
    answer = output_row(again, (again.drafts, again.selection), config, info)
    _add_flags(record["flags"], answer["flags"])
    record.update({key: answer[key] for key in _FALLBACK_KEYS},
                  answer_source=row.fallback.source, first_answer=record["answer"],
                  first_score=record["score"], first_correct=record["correct"])
    return record


_FALLBACK_KEYS = ("answer", "rationale", "score", "score_draft", "score_self_consistency",
                  "score_self_reflection", "fast_path", "num_documents", "drafts", "correct",
                  "exact_match", "f1", "label_distribution", "label_probability")
"""Output fields taken from the fallback pass for a row it answered."""
