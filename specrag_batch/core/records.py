"""The typed records that flow through the pipeline, and the names of their flags.

* :class:`Document` - one retrieved passage.
* :class:`QueryRow` - the per-row state: the validated input row, then what each stage adds
  (top-N documents, subsets, drafts, consensus, selection). Stages read and write its fields
  by name (see :mod:`specrag_batch.stages`).
* :class:`Draft` - one (subset, draft) pair and its scores; :meth:`Draft.to_record` /
  :meth:`Draft.from_record` are the one conversion used by the output Parquet and by the
  intermediate draft Parquet.
* :class:`SelectedAnswer` - the selected draft of a row.
* :class:`FallbackAnswer` - a low-confidence row's second answer (``selection.fallback``).
* :class:`Flag` - every flag name a row or a draft can carry.
* :class:`ErrorReason` - the reason code of a row error (the output's ``error_reason``).

This module imports nothing from the package, so every other module can import it.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from enum import StrEnum


class Flag(StrEnum):
    """Flag names written to the ``flags`` lists of output rows and drafts. Members are
    ``str``, so ``"empty_draft" in draft.flags`` and Parquet/JSON writing work unchanged."""

    # row flags: retrieval and documents
    NO_DOCUMENTS = "no_documents"
    EMPTY_DOCUMENTS_REMOVED = "empty_documents_removed"
    DUPLICATE_DOCUMENTS_REMOVED = "duplicate_documents_removed"
    TRUNCATED_DOCUMENTS = "truncated_documents"
    # row flags: multi-perspective sampling
    FEWER_DOCUMENTS_THAN_K = "fewer_documents_than_k"
    TRUNCATED_QUERY_FOR_SAMPLING = "truncated_query_for_sampling"
    TRUNCATED_DOCUMENTS_FOR_SAMPLING = "truncated_documents_for_sampling"
    # draft flags: parsing the drafter's output
    NO_ANSWER_FIELD = "no_answer_field"
    EMPTY_DRAFT = "empty_draft"
    EMPTY_ANSWER = "empty_answer"
    EMPTY_RATIONALE = "empty_rationale"
    TRUNCATED_AT_MAX_TOKENS = "truncated_at_max_tokens"
    REPETITION = "repetition"
    ANSWER_NOT_A_LABEL = "answer_not_a_label"
    ANSWER_NOT_A_CHOICE = "answer_not_a_choice"
    DRAFT_PROCESSING_ERROR = "draft_processing_error"
    ANSWER_FORCED = "answer_forced"
    """The draft stopped at ``drafter.max_tokens`` before its answer line; ``"\\nAnswer:"`` was
    appended and α generated after it (``drafter.answer_on_truncation``,
    :func:`specrag_batch.stages.drafting.force_answers`). Always with ``truncated_at_max_tokens``."""
    # draft flags: scores
    NON_FINITE_LOGPROB = "non_finite_logprob"
    VERIFIER_INPUT_TOO_LONG = "verifier_input_too_long"
    VERIFIER_DOCUMENTS_TRUNCATED = "verifier_documents_truncated"
    """``verifier.evidence_aware``: the draft's documents were cut in its verifier input (to
    ``retrieval.max_doc_tokens`` verifier tokens each, shorter to fit ``verifier.max_model_len``)."""
    SELF_REFLECTION_UNAVAILABLE = "self_reflection_unavailable"
    SELF_REFLECTION_YES_NOT_IN_TOP_K = "self_reflection_yes_not_in_top_k"
    """Set by older versions only (a top-20 read); kept so their outputs read back."""
    SELF_REFLECTION_NO_NOT_IN_TOP_K = "self_reflection_no_not_in_top_k"
    """Set by older versions only (a top-20 read); kept so their outputs read back."""
    MISSING_SCORE_DRAFT = "missing_score_draft"
    MISSING_SCORE_SELF_CONSISTENCY = "missing_score_self_consistency"
    MISSING_SCORE_SELF_REFLECTION = "missing_score_self_reflection"
    # row flags: selection
    NO_DRAFTS = "no_drafts"
    NO_VALID_DRAFT = "no_valid_draft"
    SELECTED_DRAFT_MISSING_SCORE = "selected_draft_missing_score"
    # row flags: fallback pass (selection.fallback)
    FALLBACK_FAILED = "fallback_failed"
    # row flags: evaluation
    GOLD_NOT_A_LABEL = "gold_not_a_label"
    GOLD_NOT_AN_OPTION = "gold_not_an_option"
    GOLD_OPTION_AMBIGUOUS = "gold_option_ambiguous"


INVALID_DRAFT_FLAGS = frozenset({Flag.EMPTY_DRAFT, Flag.EMPTY_ANSWER, Flag.EMPTY_RATIONALE,
                                 Flag.ANSWER_NOT_A_LABEL, Flag.ANSWER_NOT_A_CHOICE})
"""Parse flags that make a draft unusable for selection: the paper's draft is the pair
(answer α, rationale β), so both must be there and α must be of the right kind."""


def is_valid_draft(flags) -> bool:
    """Whether a parsed draft with these flags is usable for selection (no flag of
    :data:`INVALID_DRAFT_FLAGS`)."""
    return not (INVALID_DRAFT_FLAGS & set(flags))


def add_flag(flags: list[str], flag: str) -> None:
    """Append ``flag`` to ``flags`` unless already there (flags are a set kept in order)."""
    if flag not in flags:
        flags.append(flag)


@dataclass
class Document:
    """One retrieved passage."""

    doc_id: str
    title: str
    text: str


class ErrorReason(StrEnum):
    """Why a row has an ``error`` and no answer: one code per kind of row error, written to
    the output's ``error_reason`` beside the message (``error``), so readers (the run report)
    count errors without parsing the message. Members are ``str``."""

    # validation (schema.validate_table)
    EMPTY_QUERY_ID = "empty_query_id"
    DUPLICATE_QUERY_ID = "duplicate_query_id"
    EMPTY_QUERY = "empty_query"
    UNKNOWN_TASK = "unknown_task"
    TASK_NOT_IN_RUN = "task_not_in_run"
    NO_CHOICES = "no_choices"
    # retrieval
    NO_RETRIEVAL_INDEX = "no_retrieval_index"
    NO_DOCUMENTS = "no_documents"
    # multi-perspective sampling
    NON_FINITE_EMBEDDING = "non_finite_embedding"
    # drafting
    PROMPT_TOO_LONG = "prompt_too_long"
    PROMPT_FAILED = "prompt_failed"
    DRAFT_PROCESSING_ERROR = "draft_processing_error"
    # verification
    VERIFIER_INPUT_FAILED = "verifier_input_failed"


def visible_text(text: str) -> str:
    """``text`` as a reader sees it, for comparing passages: NFKC-normalised, Unicode format
    characters (category Cf: zero-width space/joiners, BOM, invisible separators, soft hyphen)
    dropped, whitespace runs collapsed, lower case."""
    text = unicodedata.normalize("NFKC", text)
    return " ".join("".join(c for c in text if unicodedata.category(c) != "Cf").split()).lower()


def row_error(row_index: int, query_id: str | None, field_name: str, reason: str,
              where: str | None = None) -> str:
    """The one format of a row's error: ``[<where>: ]row <i> (query_id=<id>): field '<f>':
    <reason>`` (``where`` is the file, when known; no query id part when it is None)."""
    head = f"{where}: row {row_index}" if where else f"row {row_index}"
    if query_id is not None:
        head += f" (query_id={query_id!r})"
    return f"{head}: field '{field_name}': {reason}"


@dataclass
class QueryRow:
    """The state of one row through the pipeline. Input fields are set by validation
    (:func:`schema.validate_table`); ``error`` set means the row is not processed further and
    comes out with that reason. The later fields are written by the stages that declare them
    (:mod:`specrag_batch.stages`); None means "not reached"."""

    row_index: int
    query_id: str
    query: str
    task: str
    documents: list[Document] | None = None
    choices: list[str] | None = None
    gold: list[str] | None = None
    error: str | None = None
    error_reason: str | None = None
    """The :class:`ErrorReason` code of ``error`` (set together with it)."""
    flags: list[str] = field(default_factory=list)
    num_documents: int | None = None
    """N after retrieval: top-N documents without empty or duplicate passages."""
    top_documents: list[Document] | None = None
    """The N documents the row is answered from (retrieval)."""
    subsets: list[tuple[int, ...]] | None = None
    """m document subsets, indices into ``top_documents`` (multi-perspective sampling)."""
    drafts: list[Draft] | None = None
    """One draft per subset (drafting; verifier scores filled by verification)."""
    consensus: list[int] | None = None
    """Indices of drafts agreeing on one answer (the fast path), [] when none (verification)."""
    selection: SelectedAnswer | None = None
    """The selected draft (selection)."""
    draft_rounds: int | None = None
    """Adaptive drafting (``sampling.adaptive``): 1 when all the row's drafts came from the
    first round (they met the consensus rule, or no subset was left), 2 when it needed the
    second; None when drafting was not adaptive."""
    verifier_drafts_deduplicated: int | None = None
    """``verifier.deduplicate_drafts``: drafts of the row scored from another draft's verifier
    pass (same verifier input tokens), i.e. verifier forward passes saved; 0 when none was;
    None when the switch is off or the verifier scored none of the row's drafts (fast path,
    no valid draft)."""
    fallback: FallbackAnswer | None = None
    """The fallback pass's answer of a low-confidence row (``selection.fallback``)."""

    def fail(self, field_name: str, reason: str, *, code: ErrorReason) -> None:
        """Give the row its error: the message (:func:`row_error`, naming ``field_name`` and
        ``reason``) and its ``code``."""
        self.error = row_error(self.row_index, self.query_id, field_name, reason)
        self.error_reason = code


RowState = QueryRow


@dataclass
class Draft:
    """One (subset, draft) pair and its scores (natural-log probabilities, None = not computed).

    ``score_draft`` = log ρ_draft = log P(β|Q,δ) + log P(α|Q,δ,β) from the drafter's own
    tokens (paper §3.2, :mod:`drafting`); ``score_self_consistency`` = log ρ_SC = log P(α, β | Q)
    under the verifier; ``score_self_reflection`` = log ρ_SR, the verifier's "Yes" to R (both
    paper §3.3, see :mod:`verification`; ``logprob_yes`` / ``logprob_no`` are log P(Yes),
    log P(No) at that position); ``score`` = log ρ, the sum of the enabled terms
    (:mod:`selection`).
    ``answer`` is canonical (a label, an option text); ``written_answer`` is α as the drafter
    wrote it (what the verifier scores; empty = same as ``answer``). ``tokens_*`` count the
    tokens behind each score: drafter tokens of β+α, verifier tokens of α and of β."""

    doc_ids: list[str]
    answer: str
    rationale: str
    flags: list[str] = field(default_factory=list)
    valid: bool = True
    score_draft: float | None = None
    score_self_consistency: float | None = None
    score_self_reflection: float | None = None
    score: float | None = None
    written_answer: str = ""
    logprob_yes: float | None = None
    logprob_no: float | None = None
    tokens_draft: int | None = None
    tokens_answer: int | None = None
    tokens_rationale: int | None = None
    label_logprobs: dict[str, float] | None = None
    """``claim``/``choice`` rows under ``selection.label_distribution``: label -> the drafter's
    log P(label | Q, δ, β), nats (:mod:`specrag_batch.stages.label_scoring`); None otherwise."""

    def to_record(self) -> dict:
        """The draft as a record of :data:`schema.DRAFT_RECORD_TYPE` (``written_answer``
        always filled: the answer as written, else ``answer``)."""
        return {"doc_ids": self.doc_ids, "answer": self.answer,
                "written_answer": self.written_answer or self.answer, "rationale": self.rationale,
                "score": self.score, "score_draft": self.score_draft,
                "score_self_consistency": self.score_self_consistency,
                "score_self_reflection": self.score_self_reflection,
                "logprob_yes": self.logprob_yes, "logprob_no": self.logprob_no,
                "tokens_draft": self.tokens_draft, "tokens_answer": self.tokens_answer,
                "tokens_rationale": self.tokens_rationale, "flags": list(self.flags),
                "label_logprobs": None if self.label_logprobs is None else
                [{"label": k, "logprob": v} for k, v in self.label_logprobs.items()],
                "valid": self.valid}

    @classmethod
    def from_record(cls, record: dict) -> Draft:
        """Inverse of :meth:`to_record`. A ``written_answer`` equal to ``answer`` comes back
        empty (the same meaning); a record without ``valid`` (an output row's draft) is
        judged by its flags (:func:`is_valid_draft`)."""
        answer = record["answer"]
        flags = list(record.get("flags") or [])
        written = record.get("written_answer") or ""
        valid = record.get("valid")
        return cls(doc_ids=list(record.get("doc_ids") or []), answer=answer,
                   rationale=record["rationale"], flags=flags,
                   valid=is_valid_draft(flags) if valid is None else valid,
                   score_draft=record.get("score_draft"),
                   score_self_consistency=record.get("score_self_consistency"),
                   score_self_reflection=record.get("score_self_reflection"),
                   score=record.get("score"), written_answer="" if written == answer else written,
                   logprob_yes=record.get("logprob_yes"), logprob_no=record.get("logprob_no"),
                   tokens_draft=record.get("tokens_draft"), tokens_answer=record.get("tokens_answer"),
                   tokens_rationale=record.get("tokens_rationale"),
                   label_logprobs=None if record.get("label_logprobs") is None else
                   {e["label"]: e["logprob"] for e in record["label_logprobs"]})


@dataclass
class FallbackAnswer:
    """A low-confidence row answered again (``selection.fallback``, stage ``fallback``).

    ``source`` is ``fallback_standard`` or ``fallback_wider`` (the output's ``answer_source``
    when this answer is used); ``row`` is a copy of the row's input fields that went through
    the fallback's own stages: its ``top_documents``, ``drafts``, ``selection``, ``flags`` and
    ``error`` are the fallback pass's."""

    source: str
    row: QueryRow


@dataclass
class SelectedAnswer:
    """Outcome of selection for one row: ``index`` into the row's drafts (None only when it
    has none), its log ρ ``score`` (natural log, paper §3.3; on the fast path log ρ_draft
    alone; None when the selected draft misses an enabled term, or on the fast path with the
    draft score switched off), whether it is ``low_confidence``, whether it came from the
    consensus ``fast_path``, and row ``flags``."""

    index: int | None
    score: float | None
    low_confidence: bool
    fast_path: bool
    flags: list[str] = field(default_factory=list)
    confidence: float | None = None
    """The calibrated probability of being right (``selection.confidence: calibrated``,
    :mod:`specrag_batch.confidence.measures`), in [0, 1]; None under the other measures."""
    answer: str | None = None
    """``selection.label_distribution``: the label distribution's answer (canonical: a claim
    label, an option text), which may be one no draft wrote; None = the selected draft's."""
    label_distribution: dict[str, float] | None = None
    """The row's distribution over its labels (:mod:`specrag_batch.core.labels`; after the prior
    correction of ``selection.label_prior``); None when not computed."""
    label_probability: float | None = None
    """The probability of ``answer`` under ``label_distribution``, in [0, 1]."""
