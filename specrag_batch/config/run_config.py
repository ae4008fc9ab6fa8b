"""The whole configuration of one batch run (:class:`RunConfig`): its sections, the checks that
span sections, and its hash, the identity of a run's results (resume, markers)."""

from __future__ import annotations

import hashlib
import json
import math
import re
import typing
from typing import Any, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from .calibration_model import SCORING_EXCLUDED
from .drift import DriftConfig
from .reuse import ReuseConfig
from .hashing import hashed_view
from .base import DEFAULT_CLAIM_LABELS, REFLECTION_QUESTION, Mode, Section, TauTask
from .drafter import DrafterConfig
from .model import DEFAULT_VERIFIER
from .retrieval import RetrievalConfig
from .sampling import SamplingConfig
from .selection import SelectionConfig
from .verifier import VerifierConfig

ModeKey = Literal["qa", "claim", "choice", "default"]
"""The keys a per-task ``mode`` mapping may name: the tasks, and ``default`` for the others."""

MAX_LABEL_CHARS = 64
"""Longest claim label (characters): a label is a short answer the drafter writes (SUPPORTS)."""


class RunConfig(Section):
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
        flag = flag_for(field, self._flagged)
        if flag:
            return flag
        if self._file is not None and field in self._file[1]:
            return self._file[0]
        return None

    mode: Mode | dict[ModeKey, Mode] = Field(
        "speculative", description="speculative (drafter + verifier) or standard (verifier answers "
        "from all N documents); or a mapping task -> mode ({claim: speculative, qa: standard}; "
        "`default` names the mode of the tasks left out, else speculative): each row is answered "
        "by its task's mode",
        json_schema_extra={"flag_help": (
            "speculative or standard, for every row; or one mode per task as "
            "task=mode pairs (claim=speculative,choice=speculative,qa=standard; "
            "default=<mode> for the tasks left out, else speculative)")})

    @field_validator("mode", mode="before")
    @classmethod
    def _mode_mapping(cls, v: Any) -> Any:
        """``task=mode`` pairs (``--mode claim=speculative,qa=standard``) as a mapping; every
        problem of a mapping in one line.

        Raises:
            ValueError: a value that is neither a mode nor a mapping, a pair without ``=``, a key that is not a task (``qa``, ``claim``,
                ``choice``) nor ``default``, a value that is not a mode, an empty mapping."""
        if not isinstance(v, (str, dict)) or (isinstance(v, str) and "=" not in v and v not in typing.get_args(Mode)):
            raise ValueError(f"mode must be speculative or standard, or a mapping task -> mode "
                             f"(flag: claim=speculative,qa=standard); got {v!r}")
        if isinstance(v, str) and "=" in v:
            pairs = [p.strip() for p in v.split(",") if p.strip()]
            bad = [p for p in pairs if "=" not in p]
            if bad:
                raise ValueError(f"{bad[0]!r} is not task=mode (e.g. claim=speculative,qa=standard)")
            v = {k.strip(): m.strip() for k, _, m in (p.partition("=") for p in pairs)}
        if isinstance(v, dict):
            keys, modes = typing.get_args(ModeKey), typing.get_args(Mode)
            problems = [f"unknown task {k!r} in the per-task mode mapping; keys: {', '.join(keys)}"
                        for k in v if k not in keys]
            problems += [f"task {k!r}: mode must be one of {', '.join(modes)}, got {m!r}"
                         for k, m in v.items() if k in keys and m not in modes]
            if not v:
                problems.append("an empty per-task mode mapping: give a mode or task -> mode")
            if problems:
                raise ValueError("; ".join(problems))
        return v

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
    claim_labels: list[str] = Field(default_factory=lambda: list(DEFAULT_CLAIM_LABELS))  # ≤ MAX_LABEL_CHARS each
    reflection_question: str = Field(REFLECTION_QUESTION, min_length=1)
    drift: DriftConfig = Field(default_factory=DriftConfig, description="night-over-night comparison "
                               "of the nightly and backfill flows; not in the config hash")
    reuse: ReuseConfig = Field(default_factory=ReuseConfig, description="rows answered by earlier "
                               "runs copied, not computed; not in the config hash")

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
        """Raises ValueError: an empty label, one over :data:`MAX_LABEL_CHARS` or holding a
        control character (a newline), two labels equal but for case, spaces, underscores
        or hyphens (``NOT ENOUGH INFO``, ``NOT_ENOUGH_INFO``), fewer than two labels."""
        v = [x.strip() for x in v]
        if any(not x for x in v):
            raise ValueError("claim_labels must not contain empty labels")
        for x in v:
            if len(x) > MAX_LABEL_CHARS:
                raise ValueError(f"a label of {len(x)} characters ({x[:30]!r}...); a label is a short answer the "
                                 f"drafter writes, at most {MAX_LABEL_CHARS} characters")
            if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in x):
                raise ValueError(f"the label {x!r} holds a control character (a newline?)")
        seen: dict[str, str] = {}
        for x in v:
            key = re.sub(r"[\s_-]+", "", x.casefold())  # NOT ENOUGH INFO = NOT_ENOUGH_INFO = not-enough-info
            if key in seen:
                raise ValueError(f"{seen[key]!r} and {x!r} are one label (labels are compared ignoring case, "
                                 "spaces, underscores and hyphens)")
            seen[key] = x
        if len(v) < 2:
            raise ValueError("claim_labels needs at least two distinct labels")
        return v

    @model_validator(mode="after")
    def _check(self) -> "RunConfig":
        if isinstance(self.mode, dict):  # one mode for every task the run can see: that mode
            default = self.mode.get("default", "speculative")
            full = {t: self.mode.get(t, default) for t in typing.get_args(TauTask)}
            seen = {full[self.task]} if self.task else set(full.values())
            self.mode = seen.pop() if len(seen) == 1 else full
        sel = self.selection
        taus = sel.tau_min.values() if isinstance(sel.tau_min, dict) else [sel.tau_min]
        if any(t is not None and not math.isfinite(t) for t in taus):
            raise ValueError("selection.tau_min must be finite or null")
        if sel.confidence == "calibrated" and not sel.calibration:
            raise ValueError("selection.confidence 'calibrated' needs selection.calibration (a model "
                             "per task; `specrag-batch calibrate --confidence calibrated` writes it)")
        if sel.confidence == "label_probability" and not sel.label_distribution:
            raise ValueError("selection.confidence 'label_probability' needs selection.label_distribution: true")
        for task, model in (sel.calibration or {}).items():
            if model.config_hash != (own := self.scoring_hash()):
                raise ValueError(f"selection.calibration.{task} was fitted on a run of scoring hash "
                                 f"{model.config_hash}, but this config's scoring hash is {own} "
                                 "(drafts and scores differ): calibrate on a labelled run of this config")
        if self.sampling.adaptive and not sel.consensus_enabled:
            raise ValueError("sampling.adaptive stops a row on the consensus rule; it needs "
                             "selection.consensus_enabled: true")
        if sel.fallback != "none" and not self.uses_speculative:
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

    def mode_for(self, task: str | None) -> str:
        """The mode that answers a row of ``task`` (``speculative`` or ``standard``): ``mode``
        itself, or its per-task mapping's entry (completed with ``default`` when the config
        loads). A task the mapping does not know (a row that failed validation) gets
        ``speculative`` when some task runs it, else ``standard``."""
        if isinstance(self.mode, str):
            return self.mode
        return self.mode.get(task or "", "speculative" if self.uses_speculative else "standard")

    @property
    def modes(self) -> frozenset[str]:
        """The modes some row of this config may be answered by (one, or both for a per-task mapping)."""
        return frozenset([self.mode] if isinstance(self.mode, str) else self.mode.values())

    @property
    def uses_speculative(self) -> bool:
        """Whether some task is answered by Speculative RAG (the drafter engine is needed)."""
        return "speculative" in self.modes

    @property
    def mixed_modes(self) -> bool:
        """Whether rows of one run are answered by both modes (a per-task ``mode`` mapping)."""
        return len(self.modes) > 1

    @property
    def consensus_threshold(self) -> int | None:
        """c of the consensus fast path (a number of drafts): ``selection.consensus_min``, else
        m (``sampling.num_drafts``); None when ``selection.consensus_enabled`` is false."""
        if not self.selection.consensus_enabled:
            return None
        return self.selection.consensus_min or self.sampling.num_drafts

    @property
    def adaptive_drafting(self) -> bool:
        """Whether rows are drafted in rounds (``sampling.adaptive``): as set, or, left out
        (None), only where it saves verifier passes: the consensus fast path on
        (``selection.consensus_enabled``) and the verifier scoring drafts
        (:attr:`SelectionConfig.verifier_scores_drafts`)."""
        if self.sampling.adaptive is not None:
            return self.sampling.adaptive
        return self.selection.consensus_enabled and self.selection.verifier_scores_drafts

    @property
    def uses_verifier(self) -> bool:
        """Whether a run of this config needs the verifier engine (``verifier.model``): Standard
        RAG answers with it; Speculative RAG scores drafts with it only when log ρ_SC or log ρ_SR
        is in log ρ (``selection.use_self_consistency`` / ``use_self_reflection``, paper §3.3)
        or a low-confidence fallback re-answers rows (``selection.fallback``, which runs on it).
        False only for Speculative RAG selecting by log ρ_draft alone: no verifier pass runs,
        so the engine is not loaded."""
        sel = self.selection
        return "standard" in self.modes or sel.verifier_scores_drafts or sel.fallback != "none"

    @property
    def verifier_reads_documents(self) -> bool:
        """Whether the verifier scores drafts over their own documents (``verifier.evidence_aware``,
        the paper's variant that adds the draft's documents to its rationale, Score(α|Q,β,δ)): Speculative RAG with the switch on and a
        verifier term in log ρ. Then verification reads each row's ``top_documents`` and
        ``subsets``, and a disaggregated run writes them to the intermediate draft Parquet."""
        return (self.uses_speculative and self.verifier.evidence_aware
                and self.selection.verifier_scores_drafts)

    def idle_settings(self) -> list[str]:
        """Settings that are valid but change nothing in this config, one sentence each (the
        flow logs each as a warning at the start of a run); empty when there are none. Now: a
        ``verifier.model`` other than the default in a Speculative RAG config that never uses the
        verifier (:attr:`uses_verifier`); ``verifier.temperature`` / ``top_p`` set away from their
        defaults where the verifier only scores drafts (Speculative RAG without the standard
        fallback); a ``sampling.first_round`` set away from its default while
        adaptive drafting is off (set so, or left out under the default selection); adaptive drafting
        (``sampling.adaptive``) whose explicitly set ``sampling.first_round``
        is at least ``sampling.num_drafts`` drafts every subset in its first round, as a
        non-adaptive run does (the default first round, 2, with m <= 2 is not named: a user
        who asked for few drafts did not ask for rounds); ``verifier.evidence_aware`` on where no
        verifier pass scores drafts (:attr:`verifier_reads_documents` false); no score term at all
        in log ρ (every draft scores 0); and, not idle but
        never meant, a ``sampling.num_drafts`` above the distinct subsets N documents give or
        above :data:`MAX_DRAFTS` (:func:`_draft_count_warnings`)."""
        smp, out = self.sampling, []
        if "standard" not in self.modes and self.selection.fallback != "standard":
            for key in ("temperature", "top_p"):
                value = getattr(self.verifier, key)
                if key in self.verifier.model_fields_set and value != type(self.verifier).model_fields[key].default:
                    out.append(f"verifier.{key} ({value}) is set, but the verifier generates nothing in this "
                               "config: it scores each draft in one forward pass (paper §3.3), whatever the "
                               "sampling settings; they apply in mode standard and to selection.fallback: standard")
        if self.uses_speculative and not self.uses_verifier and self.verifier.model != DEFAULT_VERIFIER:
            out.append(f"verifier.model ({self.verifier.model}) is set, but nothing uses the verifier: "
                       "log ρ = log ρ_draft alone (selection.use_self_consistency and use_self_reflection "
                       "are false, no fallback), so no verifier pass runs and the model is not loaded; "
                       "set selection.use_self_reflection: true to score drafts with it (paper §3.3)")
        if self.verifier.evidence_aware and not self.verifier_reads_documents:
            out.append("verifier.evidence_aware is on, but no verifier pass scores drafts in this config "
                       "(mode standard, or selection.use_self_consistency and use_self_reflection false): "
                       "the documents reach no verifier input")
        if (self.uses_speculative and not self.adaptive_drafting and "first_round" in smp.model_fields_set
                and smp.first_round != type(smp).model_fields["first_round"].default):
            # (a full config dump sets every field: its default first round is not named)
            why = ("it is set false" if smp.adaptive is not None else
                   "left out, it is on only where the verifier scores drafts (selection.use_self_consistency "
                   "or use_self_reflection) and the consensus fast path is on")
            out.append(f"sampling.first_round ({smp.first_round}) is set, but adaptive drafting (sampling.adaptive) "
                       f"is off ({why}): every row drafts its m subsets in one round; set sampling.adaptive: true "
                       "to draft in rounds")
        if (self.uses_speculative and self.adaptive_drafting and "first_round" in smp.model_fields_set
                and smp.first_round >= smp.num_drafts):
            out.append(f"sampling.first_round ({smp.first_round}) >= sampling.num_drafts ({smp.num_drafts}): "
                       "adaptive drafting drafts every subset in its first round, so it never stops a row early; "
                       f"set sampling.first_round below {smp.num_drafts} or sampling.adaptive: false")
        sel = self.selection
        if self.uses_speculative and not (sel.use_draft_score or sel.use_self_consistency
                                               or sel.use_self_reflection):
            out.append("selection.use_draft_score, use_self_consistency and use_self_reflection are all false: "
                       "every draft's log ρ is 0, so no score ranks the drafts (argmax takes one by order, like the paper's "
                       "random-draft ablation of Table 3) and selection.tau_min compares nothing; turn a term on")
        if self.uses_speculative:
            out += _draft_count_warnings(smp.num_drafts, self.retrieval.top_n, smp.num_clusters, smp.strategy)
        return out

    def config_hash(self) -> str:
        """sha256 (first 16 hex) of the canonical JSON of this config. Optional fields added
        after 0.1 (``task`` and :data:`ADDED_FIELDS`) count only when set away from the value
        the code had before they existed (for ``verifier.deduplicate_drafts`` that is False, not
        its default True), so earlier runs keep their hash; :data:`SWITCHED_FIELDS` count only
        while their switch is on."""
        blob = json.dumps(hashed_view(self.model_dump(mode="json")), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def scoring_hash(self) -> str:
        """:meth:`config_hash` without the keys that only flag or re-answer rows
        (:data:`SCORING_EXCLUDED`: ``selection.tau_min``, ``confidence``, ``calibration``,
        ``fallback``, ``retrieval.fallback_top_n``, ``chunk_rows``): equal for the labelled run
        a calibrated confidence was fitted on and a run that applies it."""
        data = hashed_view(self.model_dump(mode="json"))
        for section, key in SCORING_EXCLUDED:
            (data if section is None else data.get(section) or {}).pop(key, None)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


MAX_DRAFTS = 100
"""Drafts per row above which ``sampling.num_drafts`` is warned of as a likely typo: every
draft is one drafter generation (and verifier pass) per row, so cost grows with m."""


def distinct_subsets(n: int, k: int, strategy: str) -> int:
    """The most distinct document subsets multi-perspective sampling can draw from ``n``
    documents with ``k`` clusters (``stages.sampling.sample_subsets``): one document per
    cluster (``cluster``, ``cluster_cover``) gives at most the product of the cluster sizes,
    largest when the ``n`` documents split evenly, (n/k)^k; ``random`` and ``single_cluster``
    draw k of the n documents, at most C(n, k). ``k`` is clamped to [1, n]; 0 when n < 1."""
    if n < 1:
        return 0
    k = max(1, min(k, n))
    if strategy in ("random", "single_cluster"):
        return math.comb(n, k)
    q, r = divmod(n, k)
    return (q + 1) ** r * q ** (k - r)


def _draft_count_warnings(m: int, n: int, k: int, strategy: str) -> list[str]:
    """Warnings for a ``sampling.num_drafts`` ``m`` no user means: more drafts than the
    :func:`distinct_subsets` that N = ``n`` documents (``retrieval.top_n``, each row's most) give,
    which draws no more (a row gets at most that many drafts, subsets are never repeated), or
    more than :data:`MAX_DRAFTS`."""
    limit = distinct_subsets(n, k, strategy)
    if m > limit:
        return [f"sampling.num_drafts (m = {m}) exceeds the {limit} distinct document subsets that "
                f"retrieval.top_n = {n} documents give with sampling.num_clusters = {k} (strategy {strategy}; "
                "subsets are never repeated): a row gets at most that many drafts, fewer when it has fewer "
                f"documents; set sampling.num_drafts at most {limit}"]
    if m > MAX_DRAFTS:
        return [f"sampling.num_drafts (m = {m}) is above {MAX_DRAFTS}: every row is drafted m times, so "
                "drafting time and tokens grow m-fold (the default is 5); is it a typo?"]
    return []


def flags_given(overrides: dict[str, Any] | None, flags: dict[str, str] | None) -> dict[str, str]:
    """Dotted field -> the flag that set it (``flags``' name, else ``command line``) for each
    override with a value."""
    return {k: (flags or {}).get(k, "command line") for k, v in (overrides or {}).items() if v is not None}


def flag_for(field: str, flagged: dict[str, str]) -> str | None:
    """The flag of ``flagged`` (:func:`flags_given`) that set dotted ``field`` or a section holding it."""
    return next((flag for key, flag in flagged.items() if field == key or field.startswith(key + ".")), None)
