"""Analysis of the decision benchmark (``benchmarks/decision.py``, issue 13): pure functions
over the cells' output rows and shard markers, so each figure is unit-tested
(``benchmarks/tests/test_decision_stats.py``).

What is computed, per dataset and pooled over datasets, every figure with its n:

* accuracy of each arm (the product's metric: match for QA, accuracy for claims and multiple
  choice; a row that came out with an error counts as wrong) with a bootstrap 95% interval;
* the **paired** difference of two arms on the same rows (speculative - standard,
  tuned - standard, tuned - speculative, tuned - the untuned arm of its base model
  (``same_base``), each ablation - speculative, each composed arm - its base arm) with a paired bootstrap
  95% interval and McNemar's exact p-value (two-sided binomial test on the discordant pairs);
* **oracle** accuracy (a row counts when any of its drafts is right, scored with the
  product's :func:`specrag_batch.stages.evaluation.score_row`) and the share of oracle rows the
  selection gets right;
* share of drafts that parse (no flag of :data:`PARSE_FLAGS`) and that selection may use
  (:func:`specrag_batch.core.records.is_valid_draft`);
* seconds per row (sum of the shards' recorded seconds, so a resumed cell keeps the time of
  its earlier attempts), tokens per row and prefix-cache hit rate per model, the ratio speculative / standard with a
  paired bootstrap interval over shards (the same rows in both arms) and a sign test; only
  over the shard pairs whose two shards ran on one and the same machine
  (:func:`_one_machine_pairs`; the pairs left out are counted): when none did, no ratio, but
  ``n/a (different machines)`` and the machines of each cell (:data:`DIFFERENT_MACHINES`,
  :func:`machines_table`); accuracy and token comparisons hold across machines;
* engine dtypes (:func:`shard_dtype`: what each shard's done marker records, bfloat16 or
  float32 on CPU depending on the host): a comparison whose paired shards ran in different
  dtypes says so (``dtypes_differ`` with a ``note``, :func:`dtype_pairs`; in tables.md beside
  the difference); shards without the field (older markers) are unknown, never flagged;
* the fast-path share;
* Table 3 selection ablations re-selected from the speculative cell's scored drafts with the
  product's :func:`specrag_batch.stages.selection.select` (no engine run: the drafts are the same);
* tuned vs untuned drafters (issue 12, :func:`tuned_table`): per tuned arm and baseline,
  paired accuracy, parse share, drafter tokens per row, seconds per row and their ratio;
* ablations on other drafters (:func:`composed_table`): each composed arm
  ``<base arm>+<ablation>`` (:data:`COMPOSE_SEP`) vs its base arm on the same rows: paired
  accuracy, parse / forced / valid shares, drafter tokens per row, seconds per row and their
  ratio;
* shorter drafts (:data:`DRAFT_LENGTH_ARMS`): generated tokens per row and per draft, share of
  drafts cut at the token budget and of those given a forced answer line (arm
  ``answer_on_truncation``), beside accuracy and seconds per row;
* repeated drafts (:func:`verifier_duplicates`, :func:`dedupe_table`): per cell, the verified
  drafts that repeat another draft of their row byte for byte (the verifier passes
  ``verifier.deduplicate_drafts`` would save, estimated from stored drafts, no engine run),
  and the measured passes saved, verifier tokens and seconds per row of ``speculative`` and the
  arm that flips ``verifier.deduplicate_drafts`` (:data:`DEDUPE_ARMS`: ``no_dedupe_verifier``
  now that it is on by default; ``dedupe_verifier`` in earlier results);
* the fallback pass (:data:`FALLBACK_ARMS`, :func:`fallback_figures`): the flagged rows'
  accuracy before/after with a paired bootstrap and McNemar, and the added cost vs speculative;
  the whole cell is compared with ``speculative`` and with ``standard`` (:data:`ARM_BASELINES`);
* post-hoc selection variants (:data:`POST_HOC`, :func:`variant_split`), each a re-selection
  of the stored drafts by the product's :func:`specrag_batch.stages.selection.select` (no engine
  run) compared with its baseline: selection accuracy paired with a bootstrap interval and
  McNemar, the rows where the picks differ, and the share of oracle rows answered right;
  chosen on the tuning cells only (:func:`verdict_variant_line`), the reported speculative
  cells shown beside. Three comparisons: the self-reflection variants
  (``selection.self_reflection``: ``paper`` vs ``contrast``, log ρ_SR recomputed from the
  stored log P(Yes), log P(No); also the AUROC of log ρ_SR for right vs wrong drafts), the
  selection rules (``selection.rule``: the paper's ``argmax`` vs this product's
  ``answer_vote`` and ``length_normalised``) and the score terms (``selection.use_*``: every
  term of log ρ vs one left out, the paper's Table 3 ablations).
* selection diagnosis (:func:`selection_diagnosis_rows`, :func:`selection_diagnosis`, not in
  the generated tables; ``benchmarks/selection_diagnosis.md``): AUROC of each term of log ρ
  pooled and within-row, one-term / two-term / per-token / majority-vote re-selections vs the
  paper's argmax, the expected accuracy of random selection, the per-answer bias of the terms
  (:func:`answer_bias`) and rationales that restate the query (:func:`restated_query`).

Bootstrap: ``reps`` resamples (default 2000) with a fixed seed; pooled figures resample rows
within each dataset (stratified), so every resample keeps each dataset's n.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from specrag_batch.engines.usage import EngineUsage, prefix_cache_hit_rate
from specrag_batch.stages.evaluation import score_row, token_f1
from specrag_batch.core.records import Draft, Flag, is_valid_draft
from specrag_batch.stages.sampling import row_seed
from specrag_batch.stages.selection import RULES, consensus, select
from specrag_batch.stages.verification import SELF_REFLECTION_MODES, self_reflection_score

PARSE_FLAGS = frozenset({Flag.NO_ANSWER_FIELD, Flag.EMPTY_DRAFT, Flag.EMPTY_ANSWER,
                         Flag.EMPTY_RATIONALE, Flag.TRUNCATED_AT_MAX_TOKENS, Flag.REPETITION,
                         Flag.ANSWER_NOT_A_LABEL, Flag.ANSWER_NOT_A_CHOICE,
                         Flag.DRAFT_PROCESSING_ERROR, Flag.ANSWER_FORCED})
"""Flags the parser puts on a draft whose output broke the format (``records.Flag``'s
"parsing the drafter's output" group): a draft without any of them parsed. ``answer_forced``
(an answer recovered after a budget cut, ``drafter.answer_on_truncation``) always comes with
``truncated_at_max_tokens``: such a draft is valid, not parsed."""

SELECTION_ABLATIONS = {
    "without_draft_score": {"use_draft": False},
    "without_self_consistency": {"use_sc": False},
    "without_self_reflection": {"use_sr": False},
    "random_selection": {"random": True},
}
"""Paper Table 3 selection ablations: switches of :func:`specrag_batch.stages.selection.select`."""

REPS = 2000


# --- resampling statistics ---------------------------------------------------------------

# the resampling statistics live in the product (``specrag-batch tune`` uses them); kept
# importable from here under their old names
from specrag_batch.core.stats import (_resample_index, bootstrap_ci, mcnemar_exact, paired_bootstrap,  # noqa: E402,F401
                                 ratio_bootstrap)


DIFFERENT_MACHINES = "n/a (different machines)"
"""What a time comparison between cells that did not run on one and the same machine prints
in place of a ratio (:func:`same_machine`)."""


def same_machine(a: dict, b: dict) -> bool | None:
    """Whether two cells (``{"machines": [machine id, ...]}``, ``decision.load_cell``; None =
    unknown) ran on one and the same known machine: True when each ran all its shards on one
    machine and it is the same id; False otherwise (two machines, a cell spread over several,
    a shard of unknown machine); None when a cell has no ``machines`` key (the caller gave no
    machine information: time ratios are computed as before)."""
    if "machines" not in a or "machines" not in b:
        return None
    ma, mb = list(a["machines"]), list(b["machines"])
    return len(ma) == 1 and ma == mb and ma[0] is not None


def withheld_ratio(machines_a: Sequence, machines_b: Sequence) -> dict:
    """The place of a :func:`ratio_bootstrap` result between cells of different machines:
    its keys with no value (``n`` 0, NaN ratio and interval and ``p_sign``) and
    ``"withheld": DIFFERENT_MACHINES``, ``"machines_a"``, ``"machines_b"``: each side's
    machine ids (None = unknown)."""
    return {"n": 0, "ratio": math.nan, "ci95": [math.nan, math.nan], "faster_units": 0, "slower_units": 0,
            "p_sign": math.nan, "withheld": DIFFERENT_MACHINES, "machines_a": list(machines_a),
            "machines_b": list(machines_b)}


def shard_dtype(shard: dict) -> str | None:
    """The dtype(s) a shard's engines computed in, from its done-marker result's
    ``engine_dtypes`` ({model: dtype}, ``ShardResult.engine_dtypes``): the distinct dtypes of
    its models, sorted and joined by ``+`` (``"float32"``, ``"bfloat16+float32"`` when drafter
    and verifier differed); None (unknown) when the shard records none (a marker written before
    the field existed)."""
    d = shard.get("engine_dtypes")
    if not isinstance(d, dict):
        return None
    return "+".join(sorted({p for v in d.values() if v for p in str(v).split("+")})) or None


def cell_dtypes(shards: Sequence[dict]) -> list[str | None]:
    """The distinct :func:`shard_dtype` of a cell's shards, sorted, None (unknown) last."""
    return sorted({shard_dtype(s) for s in shards}, key=lambda d: (d is None, d or ""))


def dtype_pairs(a: Sequence[dict], b: Sequence[dict]) -> dict:
    """Engine dtypes of the shard pairs of two cells (same name and row count: the same input
    rows, as :func:`_one_machine_pairs`, whatever machine): ``{"pairs": pairs whose two
    dtypes are known, "differ": those whose dtypes differ, "a": [a's dtypes in those],
    "b": [b's]}`` (sorted). A pair with a shard of unknown dtype (None) is not counted: an
    older marker is not taken for a difference."""
    kept, _ = _one_machine_pairs(a, b, check=False)
    out: dict = {"pairs": 0, "differ": 0, "a": set(), "b": set()}
    for s, t in kept:
        x, y = shard_dtype(s), shard_dtype(t)
        if x is None or y is None:
            continue
        out["pairs"] += 1
        if x != y:
            out["differ"] += 1
            out["a"].add(x)
            out["b"].add(y)
    return {**out, "a": sorted(out["a"]), "b": sorted(out["b"])}


def dtypes_differ(d: dict) -> dict | None:
    """A :func:`dtype_pairs` result as a comparison's ``dtypes_differ``: itself with ``note``
    (``"dtypes differ: bfloat16 vs float32 (3 of 10 shard pairs)"``) when some pair differs;
    None when none does (or none is known)."""
    if not d["differ"]:
        return None
    note = (f"dtypes differ: {' / '.join(d['a'])} vs {' / '.join(d['b'])} "
            f"({d['differ']} of {d['pairs']} shard pairs)")
    return {**d, "note": note}


# --- per-row outcomes --------------------------------------------------------------------

def row_correct(row: dict, choices: Sequence[str] | None, labels: Sequence[str]) -> bool | None:
    """Whether an output row is right: its ``correct`` column; a row with an ``error`` is
    scored as an empty answer (wrong when its gold is scorable). None: ungraded (no gold, or a
    gold the product flags as unscorable)."""
    if row.get("error") is None:
        return row.get("correct")
    return score_row(row["task"], None, row.get("gold"), choices=choices, labels=labels).correct


def draft_correct(row: dict, choices: Sequence[str] | None, labels: Sequence[str]) -> list[bool]:
    """Per draft of an output row: is its (canonical) answer right under the product's metric
    (:func:`~specrag_batch.stages.evaluation.score_row`). Empty when the row has no drafts."""
    return [bool(score_row(row["task"], d.get("answer"), row.get("gold"), choices=choices,
                           labels=labels).correct) for d in (row.get("drafts") or [])]


def oracle(rows: Sequence[dict], choices: dict, labels: Sequence[str]) -> dict:
    """Oracle accuracy (a graded row counts when any of its drafts is right) and the share of
    oracle rows the selection got right (``recovered``: of the rows a perfect selector could
    answer, how many the verifier's selection answered).

    ``choices``: query_id -> option texts (or None). Returns ``{"n", "oracle", "n_oracle",
    "recovered"}`` (fractions; None when undefined)."""
    graded = [(r, row_correct(r, choices.get(r["query_id"]), labels)) for r in rows]
    graded = [(r, c) for r, c in graded if c is not None]
    hits = [(any(draft_correct(r, choices.get(r["query_id"]), labels)), c) for r, c in graded]
    n_oracle = sum(h for h, _ in hits)
    return {"n": len(hits), "oracle": (n_oracle / len(hits)) if hits else None, "n_oracle": n_oracle,
            "recovered": (sum(c for h, c in hits if h) / n_oracle) if n_oracle else None}


def draft_shares(rows: Sequence[dict]) -> dict:
    """Share of all drafts that parse (no :data:`PARSE_FLAGS` flag) and that are valid for
    selection (:func:`~specrag_batch.core.records.is_valid_draft`). Returns ``{"n_drafts",
    "parsed", "valid", "by_flag": {flag: count}}``."""
    drafts = [d for r in rows for d in (r.get("drafts") or [])]
    by_flag: dict[str, int] = {}
    for d in drafts:
        for f in d.get("flags") or []:
            by_flag[f] = by_flag.get(f, 0) + 1
    n = len(drafts)
    return {"n_drafts": n,
            "parsed": (sum(not (PARSE_FLAGS & set(d.get("flags") or [])) for d in drafts) / n) if n else None,
            "valid": (sum(is_valid_draft(d.get("flags") or []) for d in drafts) / n) if n else None,
            "by_flag": dict(sorted(by_flag.items()))}


def tokens_per_draft(rows: Sequence[dict]) -> float | None:
    """Mean generated tokens per draft (``tokens_draft``: the drafter's tokens of β and α)
    over the drafts that record it; None when none does."""
    n = [d["tokens_draft"] for r in rows for d in (r.get("drafts") or []) if d.get("tokens_draft") is not None]
    return (sum(n) / len(n)) if n else None


def reselect_index(row: dict, *, seed: int, use_draft: bool = True, use_sc: bool = True,
                   use_sr: bool = True, random: bool = False, self_reflection: str | None = None,
                   rule: str = "argmax", consensus_min: int | None = None) -> int | None:
    """Index into ``row["drafts"]`` of the draft the product's selection picks when the row's
    scored drafts are selected again with other switches (paper Table 3: w/o ρ_draft, w/o
    ρ_SC, w/o ρ_SR, random; :func:`~specrag_batch.stages.selection.select` with the seed rule of its
    selection stage, ``row_seed(seed + 1, query_id)``), with the other self-reflection
    variant, or with another selection ``rule`` (``selection.rule``,
    :data:`~specrag_batch.stages.selection.RULES`; argmax is the paper's).

    ``self_reflection``: ``paper`` | ``contrast`` recomputes each draft's log ρ_SR from its
    stored ``logprob_yes`` / ``logprob_no`` by the product's
    :func:`~specrag_batch.stages.verification.self_reflection_score` before selecting, which is what
    the verification stage stores under ``selection.self_reflection`` (the selection stage
    only reads that score); a draft missing either log-prob gets no ρ_SR and ranks after
    every fully scored draft, as in a run. None keeps the stored scores.

    ``consensus_min``: a lower ``selection.consensus_min`` c than the run's: when
    :func:`~specrag_batch.stages.selection.consensus` finds at least c' valid drafts with one
    normalised answer, the row takes the fast path (that answer's draft with the highest
    log ρ_draft, no verifier term), as a run with that c would; otherwise it is selected as
    the other switches say.

    Returns None for rows that keep their outcome: with an error, without drafts, or taken by
    the consensus fast path (every valid draft gives the same normalised answer, so any
    selection rule returns it; the verifier never scored them).

    Raises:
        ValueError: unknown ``self_reflection`` or ``rule`` (raised on the first row selected
            again)."""
    if row.get("error") is not None or row.get("fast_path") or not row.get("drafts"):
        return None
    drafts = [Draft.from_record(d) for d in row["drafts"]]
    if self_reflection is not None:
        for d in drafts:
            d.score_self_reflection = self_reflection_score(d.logprob_yes, d.logprob_no, self_reflection)
    fast = consensus(drafts, consensus_min) if consensus_min else None
    return select(drafts, use_draft=use_draft, use_sc=use_sc, use_sr=use_sr, rule=rule, fast_path=fast,
                  random_seed=row_seed(seed + 1, row["query_id"]) if random else None).index


def reselect_correct(rows: Sequence[dict], choices: dict, labels: Sequence[str], *, seed: int,
                     **switches) -> list[bool | None]:
    """Per row, correctness of the draft :func:`reselect_index` picks with ``switches``
    (its keyword arguments); rows it leaves alone keep their outcome (:func:`row_correct`),
    ungraded rows are None."""
    out: list[bool | None] = []
    for r in rows:
        ch = choices.get(r["query_id"])
        base = row_correct(r, ch, labels)
        i = None if base is None else reselect_index(r, seed=seed, **switches)
        out.append(base if i is None else draft_correct(r, ch, labels)[i])
    return out


# --- post-hoc selection variants (selection.self_reflection, selection.rule) --------------

SELF_REFLECTION_VARIANTS = {m: {"self_reflection": m} for m in SELF_REFLECTION_MODES}
"""``selection.self_reflection`` variants as :func:`reselect_index` switches; the first,
``paper`` (the paper's term), is the baseline the others are compared with."""

RULE_VARIANTS = {r: {"rule": r} for r in RULES}
"""``selection.rule`` variants as :func:`reselect_index` switches; the first, ``argmax`` (the
paper's rule, §3.3), is the baseline; ``answer_vote`` and ``length_normalised`` are this
product's extensions."""


def graded_rows(rows: Sequence[dict], choices: dict, labels: Sequence[str]):
    """The graded rows of a cell as (row, its outcome :func:`row_correct`, per-draft
    correctness :func:`draft_correct`); ungraded rows are left out."""
    for r in rows:
        ch = choices.get(r["query_id"])
        base = row_correct(r, ch, labels)
        if base is not None:
            yield r, base, draft_correct(r, ch, labels)


def variant_rows(rows: Sequence[dict], choices: dict, labels: Sequence[str], *, seed: int,
                 variants: dict[str, dict]) -> list[dict]:
    """Per graded row of a speculative cell, what each post-hoc selection variant does with
    the row's stored drafts, with no engine run: ``variants`` maps a name to
    :func:`reselect_index` keyword arguments (:data:`SELF_REFLECTION_VARIANTS`,
    :data:`RULE_VARIANTS`; the first is the baseline).

    Returns one dict per graded row (ungraded rows are left out): ``{"query_id", name:
    correctness of the draft the variant picks (the row's own outcome for rows
    :func:`reselect_index` leaves alone: error, no drafts, consensus fast path), "picked":
    {name: draft index or None}, "reselected": whether the row was selected again,
    "different": whether any two variants pick different drafts, "oracle": whether any of
    the row's drafts is right (:func:`draft_correct`)}``.

    Raises:
        ValueError: a variant's switches are unknown to :func:`reselect_index`."""
    out = []
    for r, base, right in graded_rows(rows, choices, labels):
        picked = {name: reselect_index(r, seed=seed, **switches) for name, switches in variants.items()}
        out.append({"query_id": r["query_id"], **{m: base if i is None else right[i] for m, i in picked.items()},
                    "picked": picked, "reselected": next(iter(picked.values())) is not None,
                    "different": len(set(picked.values())) > 1, "oracle": any(right)})
    return out


def self_reflection_rows(rows: Sequence[dict], choices: dict, labels: Sequence[str], *,
                         seed: int) -> list[dict]:
    """:func:`variant_rows` of the self-reflection variants (:data:`SELF_REFLECTION_VARIANTS`),
    each unit with ``"drafts"``: [(log ρ_SR per mode in :data:`SELF_REFLECTION_MODES` order,
    right)] for each *verified* valid draft (valid by its flags and holding both
    ``logprob_yes`` and ``logprob_no``; log ρ_SR in nats by
    :func:`~specrag_batch.stages.verification.self_reflection_score`; right by
    :func:`draft_correct`), for :func:`self_reflection_auroc`."""
    units = variant_rows(rows, choices, labels, seed=seed, variants=SELF_REFLECTION_VARIANTS)
    by_id = {r["query_id"]: r for r in rows}
    for u in units:
        r = by_id[u["query_id"]]
        right = draft_correct(r, choices.get(u["query_id"]), labels)
        u["drafts"] = [(tuple(self_reflection_score(d["logprob_yes"], d["logprob_no"], m)
                              for m in SELF_REFLECTION_MODES), ok)
                       for d, ok in zip(r.get("drafts") or [], right)
                       if is_valid_draft(d.get("flags") or [])
                       and d.get("logprob_yes") is not None and d.get("logprob_no") is not None]
    return units


def auroc_resamples(scores: np.ndarray, right: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """AUROC of ``scores`` for ``right`` in each bootstrap resample given as draft weights
    (how often each draft was drawn), in the Mann-Whitney form scikit-learn's
    ``roc_auc_score`` computes for repeated samples: Σ w_i w_j [s_i > s_j] (ties 1/2) over
    right i, wrong j, divided by (Σ w right)(Σ w wrong); one matrix product for all resamples.

    Args:
        scores: (n_drafts,) float; right: (n_drafts,) bool; weights: (reps, n_drafts) counts.

    Returns:
        (reps,) AUROC, NaN for a resample without a right or without a wrong draft."""
    pos, neg = scores[right], scores[~right]
    beats = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
    wp, wn = weights[:, right].astype(float), weights[:, ~right].astype(float)
    den = wp.sum(axis=1) * wn.sum(axis=1)
    num = ((wp @ beats) * wn).sum(axis=1)
    return np.divide(num, den, out=np.full(len(den), math.nan), where=den > 0)


def _resample_counts(n: int, reps: int, seed: int, strata: Sequence | None = None) -> np.ndarray:
    """(reps, n) how often each of n units is drawn in each bootstrap resample
    (:func:`_resample_index`, stratified by ``strata``): weights for statistics that are
    sums over units (:func:`auroc_resamples`, :func:`selection_diagnosis_auroc`)."""
    idx = _resample_index(n, reps, np.random.default_rng(seed), strata)
    return np.bincount((np.arange(reps)[:, None] * n + idx).ravel(), minlength=reps * n).reshape(reps, n)


def self_reflection_auroc(units: Sequence[dict], *, reps: int = REPS, seed: int = 0,
                          strata: Sequence | None = None) -> dict:
    """AUROC of log ρ_SR alone as a score for a verified draft being right, per
    self-reflection variant, over the ``drafts`` of :func:`self_reflection_rows` units
    (0.5 = no separation; the product's :func:`specrag_batch.confidence.calibration.auroc`, i.e.
    scikit-learn's ``roc_auc_score``), with a percentile bootstrap 95% interval that resamples
    *rows* (a row's drafts share a question, so they are not independent; stratified by
    ``strata``, one label per unit; :func:`auroc_resamples`) and the paired difference
    contrast - paper on the same resamples. Resamples with one class only are skipped.

    Returns ``{"n_rows" (rows with a verified draft), "n_drafts", "n_right", mode: {"auroc",
    "ci95"} for each mode, "contrast - paper": {"diff", "ci95"}}``; AUROC None (interval
    [nan, nan]) when the drafts hold one class only."""
    from specrag_batch.confidence.calibration import auroc

    keep = [i for i, u in enumerate(units) if u["drafts"]]
    modes = len(SELF_REFLECTION_MODES)
    scores = np.asarray([s for i in keep for s, _ in units[i]["drafts"]], dtype=float).reshape(-1, modes)
    right = np.asarray([ok for i in keep for _, ok in units[i]["drafts"]], dtype=bool)
    row_of = np.repeat(np.arange(len(keep)), [len(units[i]["drafts"]) for i in keep])
    point = [auroc(scores[:, k], right) for k in range(modes)]
    b = np.empty((0, modes))
    if None not in point:
        counts = _resample_counts(len(keep), reps, seed, [strata[i] for i in keep] if strata is not None else None)
        b = np.stack([auroc_resamples(scores[:, k], right, counts[:, row_of]) for k in range(modes)], axis=1)
        b = b[~np.isnan(b).any(axis=1)]

    def ci(x):
        return [float(np.percentile(x, 2.5)), float(np.percentile(x, 97.5))] if len(x) else [math.nan, math.nan]
    out = {"n_rows": len(keep), "n_drafts": int(len(right)), "n_right": int(right.sum())}
    out.update({m: {"auroc": point[k], "ci95": ci(b[:, k])} for k, m in enumerate(SELF_REFLECTION_MODES)})
    p, c = SELF_REFLECTION_MODES.index("paper"), SELF_REFLECTION_MODES.index("contrast")
    out["contrast - paper"] = {"diff": None if None in point else point[c] - point[p], "ci95": ci(b[:, c] - b[:, p])}
    return out


def variant_figures(units: Sequence[dict], variants: Sequence[str], *, reps: int = REPS,
                    strata: Sequence | None = None) -> dict:
    """Selection accuracy of each post-hoc variant over the same rows (:func:`variant_rows`
    units; ``strata`` one label per unit for pooled figures), the share of oracle rows (some
    draft right) each answers right, and each variant against the baseline ``variants[0]``:
    the paired difference variant - baseline with its bootstrap 95% interval
    (:func:`paired_bootstrap`) and McNemar's exact test (:func:`mcnemar_exact`: b = rows right
    only with the variant, c = only with the baseline).

    Returns ``{"n", "n_reselected", "n_different" (rows where any two variants differ),
    "n_oracle", "baseline", "accuracy": {variant: fraction}, "recovered": {variant: fraction
    of oracle rows}, "vs_baseline": {variant: {"n", "diff", "ci95", "mcnemar", "n_different"
    (rows where it picks another draft than the baseline)}}}``; fractions None without rows."""
    base = variants[0]

    def share(xs):
        return (sum(xs) / len(xs)) if xs else None
    hits = [u for u in units if u["oracle"]]
    out = {"n": len(units), "n_reselected": sum(u["reselected"] for u in units),
           "n_different": sum(u["different"] for u in units), "n_oracle": len(hits), "baseline": base,
           "accuracy": {v: share([u[v] for u in units]) for v in variants},
           "recovered": {v: share([u[v] for u in hits]) for v in variants}, "vs_baseline": {}}
    b = [u[base] for u in units]
    for v in variants[1:]:
        a = [u[v] for u in units]
        out["vs_baseline"][v] = {**paired_bootstrap(a, b, reps=reps, strata=strata), "mcnemar": mcnemar_exact(a, b),
                                 "n_different": sum(u["picked"][v] != u["picked"][base] for u in units)}
    return out


def self_reflection_figures(units: Sequence[dict], *, reps: int = REPS, strata: Sequence | None = None) -> dict:
    """:func:`variant_figures` of ``paper`` (baseline) vs ``contrast`` self-reflection over
    :func:`self_reflection_rows` units, plus ``"auroc"``: :func:`self_reflection_auroc`."""
    return {**variant_figures(units, SELF_REFLECTION_MODES, reps=reps, strata=strata),
            "auroc": self_reflection_auroc(units, reps=reps, strata=strata)}


TERM_VARIANTS = {"paper": {}, **{k: v for k, v in SELECTION_ABLATIONS.items() if k.startswith("without_")}}
"""The terms of log ρ as :func:`reselect_index` switches: ``paper`` (every term: log ρ_draft +
log ρ_SC + log ρ_SR, §3.3) is the baseline; each other variant leaves one term out (the
selection ablations of the paper's Table 3, the config switches ``selection.use_draft_score``,
``use_self_consistency``, ``use_self_reflection``). Chosen like the rule: on the tuning cells
only (:func:`verdict_variant`)."""


def term_rows(rows: Sequence[dict], choices: dict, labels: Sequence[str], *, seed: int) -> list[dict]:
    """:func:`variant_rows` of the score terms (:data:`TERM_VARIANTS`)."""
    return variant_rows(rows, choices, labels, seed=seed, variants=TERM_VARIANTS)


def term_figures(units: Sequence[dict], *, reps: int = REPS, strata: Sequence | None = None) -> dict:
    """:func:`variant_figures` of the score terms (:data:`TERM_VARIANTS`, baseline ``paper``)
    over :func:`term_rows` units."""
    return variant_figures(units, tuple(TERM_VARIANTS), reps=reps, strata=strata)


def rule_rows(rows: Sequence[dict], choices: dict, labels: Sequence[str], *, seed: int) -> list[dict]:
    """:func:`variant_rows` of the selection rules (:data:`RULE_VARIANTS`)."""
    return variant_rows(rows, choices, labels, seed=seed, variants=RULE_VARIANTS)


def rule_figures(units: Sequence[dict], *, reps: int = REPS, strata: Sequence | None = None) -> dict:
    """:func:`variant_figures` of the selection rules (:data:`RULE_VARIANTS`, baseline
    ``argmax``) over :func:`rule_rows` units."""
    return variant_figures(units, tuple(RULE_VARIANTS), reps=reps, strata=strata)


# --- fewer drafts after the run: the m sweep and adaptive drafting, no engine run ----------

NUM_DRAFTS_VARIANTS = {"m5": {"num_drafts": 5}, "m4": {"num_drafts": 4}, "m3": {"num_drafts": 3},
                       "m2": {"num_drafts": 2}, "m1": {"num_drafts": 1},
                       "adaptive": {"num_drafts": 5, "first_round": 2}}
"""Runs with fewer drafts as :func:`nested_pick` switches: ``m<j>`` = ``sampling.num_drafts``
j, ``adaptive`` = ``sampling.adaptive`` with ``first_round`` 2 of m = 5 (this product's
adaptive drafting). ``m5``, the benchmark config's m, is the baseline; computed the same way,
it must reproduce the run's own selection (``n_mismatch`` of :func:`nested_figures`)."""


class NotReselectable(ValueError):
    """A row whose stored drafts :func:`nested_pick` cannot select again (valid drafts without
    verifier scores)."""


def nested_pick(row: dict, *, num_drafts: int, first_round: int | None = None,
                consensus_min: int | None = None) -> tuple[int | None, int, int]:
    """What a run with ``sampling.num_drafts`` = ``num_drafts`` (at most the row's drafts)
    would select, from the stored drafts of a run with more, with no engine run.

    The same choice as such a run, up to the engine's batch invariance: the j subsets of such a
    run are the first j of the longer run (:func:`specrag_batch.stages.sampling.sample_subsets` draws
    them one by one from the row's seeded generator, so a shorter draw is a prefix:
    ``benchmarks/tests/test_decision_nested.py``), each draft comes from its own greedy prompt, and
    the verifier scores each draft alone (paper §3.3). An engine that is not batch-invariant
    (vLLM on CPU in bf16, ``benchmarks/batch_invariance.py``) may write other tokens when a call
    holds fewer prompts; :func:`nested_agreement` measures how often that changes the answer. The consensus fast path takes c = ``consensus_min`` or ``num_drafts``
    (``RunConfig.consensus_threshold``) over the first ``num_drafts`` drafts; ``first_round``
    (adaptive drafting, :class:`specrag_batch.stages.drafting.AdaptiveDrafting`): a row whose
    first ``first_round`` drafts meet that rule stops there, the others draft the rest.

    Args:
        row: an output row of a non-adaptive speculative cell, its ``drafts`` in subset order.

    Returns:
        (index into ``row["drafts"]`` of the selected draft (when none of the drafts used is
        valid, the best invalid one, as :func:`~specrag_batch.stages.selection.select` returns it);
        drafts written; verifier passes: the distinct valid (α, β) of the row, 0 on the fast
        path).

    Raises:
        NotReselectable: the row needs verifier scores it does not hold (a run with the
            verifier off, or another consensus rule than ``consensus_min``)."""
    drafts = [Draft.from_record(d) for d in (row.get("drafts") or [])[:num_drafts]]
    c = consensus_min or num_drafts
    if first_round is not None and first_round < len(drafts):
        fast = consensus(drafts[:first_round], c)
        if fast is not None:
            return select(drafts[:first_round], fast_path=fast).index, first_round, 0
    fast = consensus(drafts, c)
    if fast is not None:
        return select(drafts, fast_path=fast).index, len(drafts), 0
    valid = [d for d in drafts if d.valid]
    if len(valid) > 1 and any(d.score_self_consistency is None for d in valid):
        raise NotReselectable(f"row {row['query_id']!r}: {len(valid)} valid drafts without a consensus lack "
                         "verifier scores; the run took the fast path by another consensus rule")
    return select(drafts).index, len(drafts), len({(d.written_answer or d.answer, d.rationale) for d in valid})


def nested_rows(rows: Sequence[dict], choices: dict, labels: Sequence[str], *, seed: int) -> list[dict]:
    """Per graded row of a non-adaptive speculative cell, what each of
    :data:`NUM_DRAFTS_VARIANTS` would answer (:func:`nested_pick`): the keys of
    :func:`variant_rows` (rows with an error or without drafts keep their outcome) plus ``"cost": {variant: (drafts
    written, drafter tokens generated (``tokens_draft`` of those drafts), verifier passes)}``
    and ``"run"``: the row's own outcome. ``seed`` is unused (no random selection). Empty for
    a cell drafted adaptively (a row with ``draft_rounds``): its stopped rows hold too few drafts
    to tell what a longer first round would have drafted, and for a cell whose drafts
    :func:`nested_pick` cannot select again (valid drafts without verifier scores: a run with
    the verifier off, or another consensus rule)."""
    if any(r.get("draft_rounds") is not None for r in rows):
        return []
    try:
        return _nested_units(rows, choices, labels)
    except NotReselectable:
        return []


def _nested_units(rows: Sequence[dict], choices: dict, labels: Sequence[str]) -> list[dict]:
    out = []
    for r, base, right in graded_rows(rows, choices, labels):
        picked, got, cost = {}, {}, {}
        for name, switches in NUM_DRAFTS_VARIANTS.items():
            if r.get("error") is not None or not r.get("drafts"):
                picked[name], got[name], cost[name] = None, base, (0, 0, 0)
                continue
            i, n, passes = nested_pick(r, **switches)
            picked[name], got[name] = i, right[i]
            cost[name] = (n, sum(d.get("tokens_draft") or 0 for d in r["drafts"][:n]), passes)
        out.append({"query_id": r["query_id"], **got, "picked": picked, "run": base, "cost": cost,
                    "reselected": r.get("error") is None and bool(r.get("drafts")),
                    "different": len({got[v] for v in got}) > 1 or len(set(picked.values())) > 1,
                    "oracle": any(right)})
    return out


NESTED_ARMS = {"adaptive": "adaptive", "m1": "m1", "m3": "m3"}
"""Arms that run what a :data:`NUM_DRAFTS_VARIANTS` variant computes after the run (arm ->
variant): where one ran beside ``speculative``, :func:`nested_agreement` checks the derivation
against it."""


def nested_agreement(spec_rows: Sequence[dict], run_rows: Sequence[dict], variant: str) -> dict:
    """How often ``variant`` of :data:`NUM_DRAFTS_VARIANTS`, computed from the m = 5 cell's
    drafts (:func:`nested_pick`), matches a cell that ran it, over the rows both answered
    without an error. Engines that are not batch-invariant (vLLM on CPU in bf16) may write
    other tokens when a call holds fewer prompts, so the check is empirical.

    Returns ``{"n", "same_answer" (the selected canonical answer), "same_drafts" (as many
    drafts, each with the same canonical answer; their rationales may differ)}`` (counts of
    rows)."""
    by_id = {r["query_id"]: r for r in spec_rows}
    out = {"n": 0, "same_answer": 0, "same_drafts": 0}
    for r in run_rows:
        s = by_id.get(r["query_id"])
        if s is None or s.get("error") is not None or r.get("error") is not None or not s.get("drafts"):
            continue
        i, n, _ = nested_pick(s, **NUM_DRAFTS_VARIANTS[variant])
        ran = [d["answer"] for d in (r.get("drafts") or [])]
        out["n"] += 1
        out["same_answer"] += s["drafts"][i]["answer"] == r.get("answer")
        out["same_drafts"] += [d["answer"] for d in s["drafts"][:n]] == ran
    return out


def nested_figures(units: Sequence[dict], *, reps: int = REPS, strata: Sequence | None = None) -> dict:
    """:func:`variant_figures` of :data:`NUM_DRAFTS_VARIANTS` (baseline ``m5``) over
    :func:`nested_rows` units, plus ``"cost"``: {variant: {"drafts", "tokens", "verifier"}},
    the mean drafts written, drafter tokens generated and verifier passes per row (counts, not
    seconds), and ``"n_mismatch"``: rows where ``m5`` computed after the run differs from the
    run's own outcome (0 when the re-selection is the run's; it checks the re-selection only, not
    the prefix or batch-invariance premises of m < 5, which :func:`nested_agreement` checks)."""
    names = tuple(NUM_DRAFTS_VARIANTS)
    out = variant_figures(units, names, reps=reps, strata=strata)
    n = len(units)
    out["cost"] = {v: dict(zip(("drafts", "tokens", "verifier"),
                               ((sum(u["cost"][v][k] for u in units) / n) if n else None for k in range(3))))
                   for v in names}
    out["n_mismatch"] = sum(u[names[0]] != u["run"] for u in units)
    return out


VERIFIER_VARIANTS = {"default": {"use_sc": False}, "draft_score_only": {"use_sc": False, "use_sr": False}}
"""The verifier's part in the product's default selection (log ρ = log ρ_draft + log ρ_SR since
2026-12-04, ``selection.use_self_consistency: false``) as :func:`reselect_index` switches:
``default`` is the baseline; ``draft_score_only`` leaves log ρ_SR out as well, log ρ = log
ρ_draft, which a run gets with ``use_self_consistency`` and ``use_self_reflection`` both false,
and which skips the verification stage (no verifier pass). The rule, declared 2026-12-04 after
the 360 selection-tuning rows had shown it (so they do not decide it): ``draft_score_only``
becomes the default when, on tuning rows not read before, its 95% interval against ``default``
lies above ``-NON_INFERIORITY_MARGIN`` (:func:`verdict_cheaper`). Applied 2026-12-04 on the 200
rows of ``decision.VERIFIER_TUNING_ARM`` alone: +0.0 points [+0.0, +0.0], so
``selection.use_self_reflection`` is false by default (benchmarks/studies/selection-rules.md)."""


def verifier_rows(rows: Sequence[dict], choices: dict, labels: Sequence[str], *, seed: int) -> list[dict]:
    """:func:`variant_rows` of :data:`VERIFIER_VARIANTS`, each unit with ``"verified"``: the
    row's drafts the verifier scored (``score_self_reflection`` or ``score_self_consistency``
    stored; with ``verifier.deduplicate_drafts`` duplicates share one pass), the passes that
    ``draft_score_only`` would not run."""
    units = variant_rows(rows, choices, labels, seed=seed, variants=VERIFIER_VARIANTS)
    by_id = {r["query_id"]: r for r in rows}
    for u in units:
        drafts = by_id[u["query_id"]].get("drafts") or []
        u["verified"] = sum(d.get("score_self_reflection") is not None or d.get("score_self_consistency") is not None
                            for d in drafts)
        u["drafts"] = len(drafts)
    return units


def verifier_figures(units: Sequence[dict], *, reps: int = REPS, strata: Sequence | None = None) -> dict:
    """:func:`variant_figures` of :data:`VERIFIER_VARIANTS` (baseline ``default``) over
    :func:`verifier_rows` units, plus ``"cost"``: {variant: {"drafts", "verifier"}}, the mean
    drafts and verified drafts per row (counts; 0 verified for ``draft_score_only``), the shape
    :func:`verdict_cheaper` reads."""
    out = variant_figures(units, tuple(VERIFIER_VARIANTS), reps=reps, strata=strata)
    n = len(units)
    drafts = sum(u["drafts"] for u in units) / n if n else None
    verified = sum(u["verified"] for u in units) / n if n else None
    out["cost"] = {"default": {"drafts": drafts, "verifier": verified},
                   "draft_score_only": {"drafts": drafts, "verifier": 0.0 if n else None}}
    return out


POST_HOC = {"self_reflection": (self_reflection_rows, self_reflection_figures),
            "selection_rule": (rule_rows, rule_figures),
            "score_terms": (term_rows, term_figures),
            "num_drafts": (nested_rows, nested_figures),
            "verifier_terms": (verifier_rows, verifier_figures)}
"""The post-hoc selection comparisons of :func:`summarise` (result key -> (units function,
figures function)): chosen on the tuning cells only, the reported cells shown beside."""


def variant_split(cells: dict, choices: dict, labels: Sequence[str], *, seed: int, comparison: str,
                  reps: int = REPS) -> dict:
    """One :data:`POST_HOC` comparison per dataset and pooled over datasets (rows resampled
    within each dataset) for one split's speculative cells. ``cells``: dataset -> ``{"rows":
    output rows}``; ``choices``: dataset -> query_id -> option texts.

    Returns ``{"datasets": {dataset: figures}, "pooled": figures + {"datasets": [...]}}``.

    Raises:
        KeyError: ``comparison`` is not in :data:`POST_HOC`."""
    units_of, figures_of = POST_HOC[comparison]
    out: dict = {"datasets": {}}
    units, strata = [], []
    for ds, cell in cells.items():
        got = units_of(cell["rows"], choices.get(ds, {}), labels, seed=seed)
        out["datasets"][ds] = figures_of(got, reps=reps)
        units += got
        strata += [ds] * len(got)
    out["pooled"] = {**figures_of(units, reps=reps, strata=strata or None), "datasets": list(cells)}
    return out


def verdict_variant(figures: dict) -> str:
    """Which variant a :func:`variant_figures` result favours (:func:`verdict_accuracy`'s rule
    on each variant - baseline): the variant whose 95% interval lies above 0 (the largest
    difference when several do), the baseline when every other variant's interval lies below
    0, ``undecided`` otherwise, ``not measured`` without rows."""
    said = {v: verdict_accuracy(c) for v, c in figures["vs_baseline"].items()}
    if not figures["n"] or "not measured" in said.values():
        return "not measured"
    better = [v for v, x in said.items() if x == "yes"]
    if better:
        return max(better, key=lambda v: figures["vs_baseline"][v]["diff"])
    if all(x == "no: less accurate" for x in said.values()):
        return figures["baseline"]
    return "undecided"


# --- selection diagnosis: which term of log ρ separates right from wrong drafts -----------

_NO_TERMS = {"use_draft": False, "use_sc": False, "use_sr": False}
DIAGNOSIS_VARIANTS = {
    "paper": {},
    "random": {"random": True},
    "first_draft": dict(_NO_TERMS),
    "majority_vote": {**_NO_TERMS, "rule": "answer_vote"},
    "draft": {"use_sc": False, "use_sr": False},
    "self_consistency": {"use_draft": False, "use_sr": False},
    "self_reflection": {"use_draft": False, "use_sc": False},
    "draft+self_consistency": {"use_sr": False},
    "draft+self_reflection": {"use_sc": False},
    "self_consistency+self_reflection": {"use_draft": False},
    "draft_per_token": {"use_sc": False, "use_sr": False, "rule": "length_normalised"},
    "self_consistency_per_token": {"use_draft": False, "use_sr": False, "rule": "length_normalised"},
    "length_normalised": {"rule": "length_normalised"},
    "answer_vote": {"rule": "answer_vote"},
    "contrast": {"self_reflection": "contrast"},
    "consensus_min_3": {"consensus_min": 3},
}
"""Post-hoc selections of :func:`selection_diagnosis_rows` as :func:`reselect_index`
switches, each the product's :func:`~specrag_batch.stages.selection.select` over the stored drafts:
``paper`` (argmax of log ρ = log ρ_draft + log ρ_SC + log ρ_SR, §3.3) is the baseline; one
term or two terms of log ρ (argmax); one term per token (``rule: length_normalised`` with
the other terms off: log ρ_draft / drafter tokens, log ρ_SC / verifier tokens of α and β);
``first_draft`` (every term off: ties, the first valid draft); ``majority_vote`` (every
term off and ``rule: answer_vote``: the most frequent normalised answer); ``random`` (the
seeded random selection of Table 3); the product's ``length_normalised``, ``answer_vote``
and ``contrast`` self-reflection; ``consensus_min_3`` (``selection.consensus_min: 3``: a
row where 3 valid drafts agree takes the consensus fast path, the others the paper's
argmax)."""

DIAGNOSIS_MEASURES = ("draft", "self_consistency", "self_reflection", "self_reflection_contrast",
                      "draft_per_token", "self_consistency_per_token", "draft+self_consistency",
                      "self_consistency+self_reflection", "draft+self_reflection", "log_rho",
                      "mean_logprob", "shorter", "rationale_not_query")
"""Per-draft measures of :func:`draft_measures` whose AUROC :func:`selection_diagnosis_auroc`
reports (higher = the draft looks better)."""

RESTATES_QUERY = 0.8
"""Token F1 (:func:`specrag_batch.stages.evaluation.token_f1`) of a rationale with the row's query
at or above which the rationale is counted as restating the query (:func:`restated_query`):
the verifier has just read Q, so copying it is likely under log ρ_SC, but it cites no
evidence."""


def draft_measures(d: dict, query: str) -> tuple[float, ...] | None:
    """The :data:`DIAGNOSIS_MEASURES` of one stored draft (an output row's ``drafts`` entry),
    natural log-probs: log ρ_draft, log ρ_SC, log ρ_SR (``paper``: log P(Yes)), log ρ_SR
    (``contrast``), log ρ_draft per drafter token (``tokens_draft``), log ρ_SC per verifier
    token of α and β (``tokens_answer + tokens_rationale``), the three sums of two terms, log ρ
    (all three, paper §3.3), :func:`~specrag_batch.stages.selection.mean_logprob` (each term per
    token), ``shorter`` = -(verifier tokens of α and β), the length alone, and
    ``rationale_not_query`` = 1 - token F1 of β with ``query`` (the row's query; 0: β
    restates it).

    Returns None for a draft that was not fully verified (a score, log P(Yes), log P(No) or a
    token count missing or zero)."""
    from specrag_batch.stages.selection import mean_logprob

    keys = ("score_draft", "score_self_consistency", "logprob_yes", "logprob_no", "tokens_draft",
            "tokens_answer", "tokens_rationale")
    if any(d.get(k) is None for k in keys) or not d["tokens_draft"] or not d["tokens_answer"] + d["tokens_rationale"]:
        return None
    dr, sc = float(d["score_draft"]), float(d["score_self_consistency"])
    sr = self_reflection_score(d["logprob_yes"], d["logprob_no"], "paper")
    verifier_tokens = d["tokens_answer"] + d["tokens_rationale"]
    draft = Draft.from_record({**d, "score_self_reflection": sr})
    return (dr, sc, sr, self_reflection_score(d["logprob_yes"], d["logprob_no"], "contrast"),
            dr / d["tokens_draft"], sc / verifier_tokens, dr + sc, sc + sr, dr + sr, dr + sc + sr,
            mean_logprob(draft, True, True, True), -float(verifier_tokens),
            1.0 - token_f1(d.get("rationale") or "", query or ""))


def selection_diagnosis_rows(rows: Sequence[dict], choices: dict, labels: Sequence[str], *,
                             seed: int) -> list[dict]:
    """:func:`variant_rows` of :data:`DIAGNOSIS_VARIANTS`, each unit also with
    ``"random_expected"`` (the expected correctness of a uniformly random valid draft: the
    share of the row's valid drafts that are right, for rows selected again; else the row's
    outcome) and ``"drafts"``: [(:func:`draft_measures`, right, answer, index into the row's drafts)] of each valid, fully
    verified draft of a row selected again (consensus fast-path rows have none: the verifier
    did not score them), for :func:`selection_diagnosis_auroc`."""
    units = variant_rows(rows, choices, labels, seed=seed, variants=DIAGNOSIS_VARIANTS)
    by_id = {r["query_id"]: r for r in rows}
    for u in units:
        r = by_id[u["query_id"]]
        right = draft_correct(r, choices.get(u["query_id"]), labels)
        valid = [ok for d, ok in zip(r.get("drafts") or [], right) if is_valid_draft(d.get("flags") or [])]
        u["random_expected"] = (sum(valid) / len(valid)) if u["reselected"] and valid else float(u["paper"])
        u["drafts"] = [] if not u["reselected"] else [
            (m, ok, d.get("answer"), i) for i, (d, ok) in enumerate(zip(r["drafts"], right))
            if is_valid_draft(d.get("flags") or []) and (m := draft_measures(d, r.get("query"))) is not None]
    return units


def selection_diagnosis_auroc(units: Sequence[dict], *, reps: int = REPS, seed: int = 0,
                              strata: Sequence | None = None,
                              measures: Sequence[str] = DIAGNOSIS_MEASURES) -> dict:
    """How well each of :data:`DIAGNOSIS_MEASURES` separates right from wrong verified drafts
    (:func:`selection_diagnosis_rows` units), two ways, each with a percentile bootstrap 95%
    interval over rows (stratified by ``strata``, one label per unit):

    * ``pooled``: AUROC over all drafts of all rows (scikit-learn's, via
      :func:`auroc_resamples`): a confidence measure across rows and questions;
    * ``within_row``: over the pairs (right draft, wrong draft) *of the same row*, the share
      the measure ranks right above wrong (ties 1/2): what selection needs, since it only
      compares a row's drafts with each other; rows whose drafts are all right or all wrong
      hold no pair. A pooled AUROC can fall below 0.5 from differences between rows (e.g.
      between datasets with different base rates and score levels) while the within-row one
      does not, and the reverse.

    Returns ``{"n_rows", "n_drafts", "n_right", "n_mixed_rows", "n_pairs", measure:
    {"pooled": {"auroc", "ci95"}, "within_row": {"auroc", "ci95"}}}``; AUROC None (interval
    [nan, nan]) without both classes / without a pair. ``measures`` names the entries of each
    draft's measure tuple (another tuple than :func:`draft_measures`', e.g. the verifier
    re-scorings of benchmarks/verifier_variants.py)."""
    from specrag_batch.confidence.calibration import auroc

    keep = [i for i, u in enumerate(units) if u["drafts"]]
    k = len(measures)
    scores = np.asarray([m for i in keep for m, *_ in units[i]["drafts"]], dtype=float).reshape(-1, k)
    right = np.asarray([ok for i in keep for _, ok, *_ in units[i]["drafts"]], dtype=bool)
    row_of = np.repeat(np.arange(len(keep)), [len(units[i]["drafts"]) for i in keep])
    # per row and measure: concordant (right above wrong, ties 1/2) and all (right, wrong) pairs
    conc, pairs = np.zeros((len(keep), k)), np.zeros(len(keep))
    for j in range(len(keep)):
        s, ok = scores[row_of == j], right[row_of == j]
        pos, neg = s[ok], s[~ok]
        pairs[j] = len(pos) * len(neg)
        conc[j] = ((pos[:, None, :] > neg[None, :, :]) + 0.5 * (pos[:, None, :] == neg[None, :, :])).sum(axis=(0, 1))
    counts = _resample_counts(len(keep), reps, seed, [strata[i] for i in keep] if strata is not None else None)

    def ci(x):
        x = x[~np.isnan(x)]
        return [float(np.percentile(x, 2.5)), float(np.percentile(x, 97.5))] if len(x) else [math.nan, math.nan]
    out = {"n_rows": len(keep), "n_drafts": int(len(right)), "n_right": int(right.sum()),
           "n_mixed_rows": int((pairs > 0).sum()), "n_pairs": int(pairs.sum())}
    within_b = (counts @ conc) / np.maximum(counts @ pairs, 1e-12)[:, None]
    within_b[(counts @ pairs) == 0] = math.nan
    for m, name in enumerate(measures):
        point = auroc(scores[:, m], right) if len(right) else None
        pooled = auroc_resamples(scores[:, m], right, counts[:, row_of]) if point is not None else np.array([])
        out[name] = {"pooled": {"auroc": point, "ci95": ci(pooled)},
                     "within_row": {"auroc": float(conc[:, m].sum() / pairs.sum()) if pairs.sum() else None,
                                    "ci95": ci(within_b[:, m]) if pairs.sum() else [math.nan, math.nan]}}
    return out


def selection_diagnosis(units: Sequence[dict], *, reps: int = REPS, strata: Sequence | None = None) -> dict:
    """Figures of :func:`selection_diagnosis_rows` units: :func:`variant_figures` of every
    :data:`DIAGNOSIS_VARIANTS` entry against ``paper``, the expected accuracy of random
    selection (``random_expected``, with its bootstrap interval and its paired difference to
    ``paper``), :func:`selection_diagnosis_auroc` (``auroc``), and the length dependence of
    each term (``length``: Spearman's ρ of log ρ_draft with drafter tokens, of log ρ_SC and of
    log ρ_SR with verifier tokens of α and β, over the verified drafts, with n)."""
    from scipy.stats import spearmanr

    out = variant_figures(units, tuple(DIAGNOSIS_VARIANTS), reps=reps, strata=strata)
    expected = [u["random_expected"] for u in units]
    out["random_expected"] = {"accuracy": (sum(expected) / len(expected)) if expected else None,
                              "ci95": bootstrap_ci(expected, reps=reps, strata=strata),
                              "vs_baseline": paired_bootstrap(expected, [float(u["paper"]) for u in units],
                                                              reps=reps, strata=strata)}
    out["auroc"] = selection_diagnosis_auroc(units, reps=reps, strata=strata)
    ms = [m for u in units for m, *_ in u["drafts"]]
    idx = {n: DIAGNOSIS_MEASURES.index(n) for n in ("draft", "self_consistency", "self_reflection",
                                                     "draft_per_token", "shorter")}
    # tokens_draft = log ρ_draft / (log ρ_draft per token); verifier tokens = -shorter
    drafter_tokens = [m[idx["draft"]] / m[idx["draft_per_token"]] if m[idx["draft_per_token"]] else math.nan
                      for m in ms]
    verifier_tokens = [-m[idx["shorter"]] for m in ms]

    def rho(x, y):
        ok = [(a, b) for a, b in zip(x, y) if math.isfinite(a) and math.isfinite(b)]
        r = spearmanr(*zip(*ok)).statistic if len(ok) > 2 else math.nan
        return {"n": len(ok), "spearman": float(r)}
    out["length"] = {"draft_vs_drafter_tokens": rho([m[idx["draft"]] for m in ms], drafter_tokens),
                     "self_consistency_vs_verifier_tokens": rho([m[idx["self_consistency"]] for m in ms], verifier_tokens),
                     "self_reflection_vs_verifier_tokens": rho([m[idx["self_reflection"]] for m in ms], verifier_tokens)}
    return out

def answer_bias(units: Sequence[dict], variant: str = "paper") -> dict:
    """Per answer (as the drafts give it, e.g. a claim label) over the verified drafts of
    :func:`selection_diagnosis_rows` units: how many drafts give it and how many of those are
    right, the mean log ρ_draft, log ρ_SC, log ρ_SR (nats) and verifier tokens of α and β, and
    how often ``variant`` selects it (rows selected again). Shows a term that prefers one
    answer whatever the gold (e.g. ρ_SR after "does the explanation support ..." preferring
    ``SUPPORTS``). Meant for claim rows (few distinct answers).

    Returns ``{answer: {"drafts", "right", "selected", "selected_right", "mean": {term:
    value}}}``, answers by number of drafts (descending)."""
    names = ("draft", "self_consistency", "self_reflection", "shorter")
    cols = [DIAGNOSIS_MEASURES.index(n) for n in names]
    out: dict = {}
    for u in units:
        picked = u["picked"].get(variant)
        for m, ok, answer, i in u["drafts"]:
            a = out.setdefault(answer, {"drafts": 0, "right": 0, "selected": 0, "selected_right": 0, "sums": [0.0] * 4})
            a["drafts"] += 1
            a["right"] += bool(ok)
            a["selected"] += i == picked
            a["selected_right"] += bool(i == picked and ok)
            a["sums"] = [t + m[c] for t, c in zip(a["sums"], cols)]
    for a in out.values():
        sums = a.pop("sums")
        a["mean"] = {n: t / a["drafts"] for n, t in zip(names[:3], sums)}
        a["mean"]["verifier_tokens"] = -sums[3] / a["drafts"]
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["drafts"]))

def restated_query(units: Sequence[dict], variant: str = "paper", threshold: float = RESTATES_QUERY) -> dict:
    """Verified drafts whose rationale restates the query (token F1 with it >= ``threshold``,
    :data:`RESTATES_QUERY`) vs the others, over :func:`selection_diagnosis_rows` units: drafts,
    right drafts, rows where ``variant`` selects one, of which right, and the mean log ρ_SC
    per verifier token (nats). Returns ``{"restates": {...}, "other": {...}}`` with keys
    ``"drafts", "right", "selected", "selected_right", "self_consistency_per_token"``."""
    f1 = DIAGNOSIS_MEASURES.index("rationale_not_query")
    per_token = DIAGNOSIS_MEASURES.index("self_consistency_per_token")
    out = {k: {"drafts": 0, "right": 0, "selected": 0, "selected_right": 0, "sum": 0.0} for k in ("restates", "other")}
    for u in units:
        for m, ok, _, i in u["drafts"]:
            g = out["restates" if 1.0 - m[f1] >= threshold else "other"]
            g["drafts"] += 1
            g["right"] += bool(ok)
            g["selected"] += i == u["picked"].get(variant)
            g["selected_right"] += bool(ok and i == u["picked"].get(variant))
            g["sum"] += m[per_token]
    for g in out.values():
        total = g.pop("sum")
        g["self_consistency_per_token"] = (total / g["drafts"]) if g["drafts"] else None
    return out

# --- cells -------------------------------------------------------------------------------

def cell_cost(shards: Sequence[dict], roles: dict[str, str]) -> dict:
    """Compute per row of a cell from its shards' done-marker results (``rows_out``,
    ``seconds``, ``stage_seconds``, ``engines``: model -> seconds/prompt_tokens/
    cached_prompt_tokens/generated_tokens), summed over shards
    (:meth:`specrag_batch.engines.engine.EngineUsage.total`). ``roles``: model name -> role label.

    Returns ``{"rows", "shards", "seconds", "s_per_row", "stage_s", "models": {model: {"role",
    "engine_s_per_row", "prompt_tokens_per_row", "generated_tokens_per_row",
    "tokens_per_row", "prefix_cache_hit_rate"}}, "tokens_per_row"}``; the hit rate (cached /
    prompt tokens) is None when a shard's marker predates the cached-token count."""
    rows = sum(int(s.get("rows_out", 0)) for s in shards)
    seconds = sum(float(s.get("seconds", 0.0)) for s in shards)
    stage: dict[str, float] = {}
    for s in shards:
        for k, v in (s.get("stage_seconds") or {}).items():
            stage[k] = stage.get(k, 0.0) + float(v)
    models = EngineUsage.total([s.get("engines") or {} for s in shards]).by_engine
    per = max(rows, 1)
    out_models = {name: {"role": roles.get(name, "?"), "engine_s_per_row": (m.get("seconds") or 0.0) / per,
                         "prompt_tokens_per_row": (m.get("prompt_tokens") or 0) / per,
                         "generated_tokens_per_row": (m.get("generated_tokens") or 0) / per,
                         "tokens_per_row": ((m.get("prompt_tokens") or 0) + (m.get("generated_tokens") or 0)) / per,
                         "prefix_cache_hit_rate": prefix_cache_hit_rate(m)}
                  for name, m in models.items() if m.get("prompt_tokens") or m.get("generated_tokens")}
    return {"rows": rows, "shards": len(shards), "seconds": seconds, "s_per_row": seconds / per,
            "stage_s": {k: round(v, 3) for k, v in stage.items()}, "models": out_models,
            "tokens_per_row": sum(m["tokens_per_row"] for m in out_models.values())}


def cell_figures(rows: Sequence[dict], shards: Sequence[dict], choices: dict, labels: Sequence[str],
                 roles: dict[str, str], *, reps: int = REPS) -> dict:
    """Every figure of one cell (dataset x arm): accuracy with its interval and n, errors,
    ungraded rows, fast-path share, drafts (parse/valid shares, oracle, mean tokens per draft),
    cost per row and ``engine_dtypes`` (:func:`cell_dtypes`; None = unknown)."""
    correct = [row_correct(r, choices.get(r["query_id"]), labels) for r in rows]
    graded = [c for c in correct if c is not None]
    out = {"n_rows": len(rows), "n": len(graded),
           "accuracy": (sum(graded) / len(graded)) if graded else None,
           "ci95": bootstrap_ci([float(c) for c in graded], reps=reps),
           "errors": sum(r.get("error") is not None for r in rows),
           "ungraded": len(rows) - len(graded),
           "fast_path": {"n": len(rows), "share": (sum(bool(r.get("fast_path")) for r in rows) / len(rows))
                         if rows else None},
           "drafts": draft_shares(rows), "oracle": oracle(rows, choices, labels),
           "tokens_per_draft": tokens_per_draft(rows),
           "verifier_duplicates": verifier_duplicates(rows),
           "verifier_passes_saved": sum(r.get("verifier_drafts_deduplicated") or 0 for r in rows),
           "cost": cell_cost(shards, roles), "engine_dtypes": cell_dtypes(shards)}
    return out


def paired(a_rows: Sequence[dict], b_rows: Sequence[dict], choices: dict, labels: Sequence[str], *,
           a_correct: Sequence[bool | None] | None = None, strata: dict | None = None,
           reps: int = REPS) -> dict:
    """Arm a vs arm b on the rows both graded (matched by ``query_id``): the paired
    difference of accuracy with its bootstrap interval and McNemar's exact test.
    ``a_correct``: a's per-row outcomes when they are not the rows' own (re-selection
    ablations). ``strata``: query_id -> dataset (pooled comparisons resample per dataset)."""
    if a_correct is None:
        a_correct = [row_correct(r, choices.get(r["query_id"]), labels) for r in a_rows]
    a_map = {r["query_id"]: c for r, c in zip(a_rows, a_correct)}
    b_map = {r["query_id"]: row_correct(r, choices.get(r["query_id"]), labels) for r in b_rows}
    ids = [q for q in a_map if q in b_map and a_map[q] is not None and b_map[q] is not None]
    a, b = [bool(a_map[q]) for q in ids], [bool(b_map[q]) for q in ids]
    st = [strata[q] for q in ids] if strata else None
    boot = paired_bootstrap(a, b, reps=reps, strata=st)
    return {**boot, "accuracy_a": (sum(a) / len(a)) if a else None,
            "accuracy_b": (sum(b) / len(b)) if b else None, "mcnemar": mcnemar_exact(a, b)}


def verdict_accuracy(cmp: dict) -> str:
    """"yes" / "no: less accurate" / "no difference shown" from a :func:`paired` result: yes
    when the 95% interval of the difference lies above 0, less accurate when below."""
    lo, hi = cmp["ci95"]
    if cmp["n"] == 0 or lo != lo:
        return "not measured"
    if lo > 0:
        return "yes"
    if hi < 0:
        return "no: less accurate"
    return "no difference shown"


def verdict_speed(ratio: dict) -> str:
    """"yes" / "no: slower" / "no difference shown" from a :func:`ratio_bootstrap` of seconds
    (arm / baseline): yes when the whole 95% interval of the ratio is below 1."""
    if ratio.get("withheld"):
        return "not measured (different machines)"
    lo, hi = ratio["ci95"]
    if ratio["n"] == 0 or lo != lo:
        return "not measured"
    if hi < 1:
        return "yes"
    if lo > 1:
        return "no: slower"
    return "no difference shown"


# --- the fallback pass (selection.fallback, issue 14 item 3) ------------------------------

FALLBACK_ARMS = ("fallback_standard",)
"""Arms run with ``selection.fallback`` on; :func:`fallback_figures` compares each with
``speculative`` (the same config without the fallback and without τ_min)."""


def first_correct(row: dict, choices: Sequence[str] | None, labels: Sequence[str]) -> bool | None:
    """Correctness of a row's *first* answer (before the fallback pass): ``first_correct`` when
    the fallback answered the row (``answer_source`` ``fallback_*``), else the row's own outcome
    (:func:`row_correct`: a row the fallback did not answer, or answered without result, flag
    ``fallback_failed``, keeps its first answer)."""
    if (row.get("answer_source") or "").startswith("fallback"):
        return row.get("first_correct")
    return row_correct(row, choices, labels)


def fallback_figures(rows: Sequence[dict], shards: Sequence[dict], base: dict | None, choices: dict,
                     labels: Sequence[str], *, reps: int = REPS, machines_match: bool | None = None) -> dict:
    """What the fallback pass did in one cell: the rows selection flagged ``low_confidence``
    (the rows the pass answers again), their accuracy before (the first answer,
    :func:`first_correct`) and after (the answer given, :func:`row_correct`), the paired
    difference after - before with a paired bootstrap 95% interval and McNemar's exact p
    (rows of the same cell, so pairing is exact), and the added cost against ``base``, the
    ``speculative`` cell on the same rows (``{"rows", "shards"}`` or None).

    Returns ``{"n_rows", "n_flagged", "share_flagged", "answered_again", "fallback_failed",
    "n" (graded flagged rows), "accuracy_before", "accuracy_after", "diff", "ci95",
    "mcnemar", "first_pass_same_answer": {"n", "share"} (rows whose first answer equals the
    speculative cell's answer: how far the whole-cell comparison is the fallback's alone),
    "cost": {"fallback_stage_s_per_row", "added_s_per_row", "added_tokens_per_row",
    "added_tokens_per_flagged_row"}}``. Per-row figures divide by the cell's rows; cost
    figures are None without ``base``. ``machines_match``: :func:`same_machine` of this cell
    and ``base``; False takes ``added_s_per_row`` over the shard pairs that ran on one machine
    only (:func:`_one_machine_pairs`; ``"time"`` says how many pairs and rows, and how many
    pairs were left out), or leaves it None with ``"time": DIFFERENT_MACHINES`` when no pair
    did (the token figures stay over every pair)."""
    flagged = [r for r in rows if r.get("error") is None and r.get("low_confidence")]
    aft, bef = flagged_outcomes(flagged, choices, labels)
    out = {"n_rows": len(rows), "n_flagged": len(flagged),
           "share_flagged": (len(flagged) / len(rows)) if rows else None,
           "answered_again": sum((r.get("answer_source") or "").startswith("fallback") for r in flagged),
           "fallback_failed": sum(r.get("fallback_error") is not None for r in flagged),
           **paired_bootstrap(aft, bef, reps=reps),
           "accuracy_before": (sum(bef) / len(bef)) if bef else None,
           "accuracy_after": (sum(aft) / len(aft)) if aft else None,
           "mcnemar": mcnemar_exact(aft, bef)}
    rows_n = max(sum(int(s.get("rows_out", 0)) for s in shards), 1)
    cost = {"fallback_stage_s_per_row": sum(float((s.get("stage_seconds") or {}).get("fallback", 0.0))
                                            for s in shards) / rows_n,
            "paired_rows": 0, "added_s_per_row": None, "added_tokens_per_row": None,
            "added_tokens_per_flagged_row": None}
    same = {"n": 0, "share": None}
    if base is not None:
        # over the shards both cells finished with the same rows (as the time ratio)
        theirs = {s["name"]: s.get("rows_out") for s in base["shards"]}
        n_paired = sum(int(s.get("rows_out", 0)) for s in shards if theirs.get(s["name"]) == s.get("rows_out"))
        sec, tok = _shard_pairs(shards, base["shards"], "seconds"), _shard_pairs(shards, base["shards"], "tokens")
        if n_paired:
            cost.update(paired_rows=n_paired, added_s_per_row=(sum(sec[0]) - sum(sec[1])) / n_paired,
                        added_tokens_per_row=(sum(tok[0]) - sum(tok[1])) / n_paired)
            if machines_match is False:  # seconds only of the shard pairs run on one machine
                kept, dropped = _one_machine_pairs(shards, base["shards"])
                rows_kept = sum(int(s.get("rows_out", 0)) for s, _ in kept)
                if rows_kept:
                    cost.update(added_s_per_row=sum(_shard_value(s, "seconds") - _shard_value(t, "seconds")
                                                    for s, t in kept) / rows_kept,
                                time=f"over {len(kept)} shard pairs on one machine ({rows_kept} rows); "
                                     f"{dropped} pairs across machines left out")
                else:
                    cost.update(added_s_per_row=None, time=DIFFERENT_MACHINES)
            if flagged and n_paired == len(rows):  # every flagged row is in a paired shard
                cost["added_tokens_per_flagged_row"] = (sum(tok[0]) - sum(tok[1])) / len(flagged)
        spec = {r["query_id"]: r.get("answer") for r in base["rows"]}
        firsts = [(r.get("first_answer") if (r.get("answer_source") or "").startswith("fallback")
                   else r.get("answer"), spec[r["query_id"]]) for r in rows if r["query_id"] in spec]
        same = {"n": len(firsts), "share": (sum(x == y for x, y in firsts) / len(firsts)) if firsts else None}
    out["cost"], out["first_pass_same_answer"] = cost, same
    return out


def flagged_outcomes(flagged: Sequence[dict], choices: dict, labels: Sequence[str]
                     ) -> tuple[list[bool], list[bool]]:
    """(after, before) correctness of the graded flagged rows, paired by position: the answer
    given (:func:`row_correct`) and the first answer (:func:`first_correct`)."""
    pairs = [(row_correct(r, choices.get(r["query_id"]), labels), first_correct(r, choices.get(r["query_id"]), labels))
             for r in flagged]
    pairs = [(bool(a), bool(b)) for a, b in pairs if a is not None and b is not None]
    return [a for a, _ in pairs], [b for _, b in pairs]


# --- the whole benchmark -----------------------------------------------------------------

DEFAULT_ARM = "speculative-default"
"""The arm of the product's defaults (``benchmarks/decision.py``, ``DEFAULT_ARM``): compared
with ``standard`` in :func:`verdicts` and :data:`ARM_BASELINES`."""

ONE_ROUND_ARM = "speculative-default-one-round"
"""The product's defaults of :data:`DEFAULT_ARM` with ``sampling.adaptive`` false: every row's m
drafts in one round (``benchmarks/decision.py``). Added 2026-12-04 to decide adaptive drafting
under the default selection (log ρ_draft alone, no verifier pass; :data:`ADAPTIVE_RULE`):
compared with ``standard``, ``speculative`` and :data:`DEFAULT_ARM` (:data:`BASELINES`)."""

LARGE_DRAFTER_ARM = "speculative-default-large-drafter"
""":data:`ONE_ROUND_ARM` with the verifier model as the drafter (``benchmarks/decision.py``):
compared with ``standard`` and :data:`ONE_ROUND_ARM` (:data:`BASELINES`), so the gap to
Standard RAG splits into the drafter's size and the rest of the method. Added 2026-12-04."""

BASELINES = (("speculative", "standard"), ("speculative-smol", "standard"), ("speculative-smol", "speculative"),
             (ONE_ROUND_ARM, "standard"), (ONE_ROUND_ARM, "speculative"), (ONE_ROUND_ARM, DEFAULT_ARM),
             (LARGE_DRAFTER_ARM, "standard"), (LARGE_DRAFTER_ARM, ONE_ROUND_ARM))
"""The headline comparisons (arm a - arm b); tuned arms: :func:`baselines_of`; every other arm
is compared with ``speculative``."""

TUNED_PREFIX = "speculative-tuned"
"""Arms running a tuned drafter: ``speculative-tuned`` and ``speculative-tuned-<label>``
(``benchmarks/decision.py``)."""

UNTUNED_ARMS = ("speculative", "speculative-smol")
"""Arms running an untuned drafter (the config's, the untuned SmolLM2-135M): the baselines of
the tuned arms besides ``standard`` (:func:`tuned_table`)."""


DEFAULTS_ON_TOP = "defaults"
"""Suffix of a composed arm ``<drafter arm>+defaults``: that arm's drafter under the product's
defaults (the overrides of :data:`ONE_ROUND_ARM`, ``benchmarks/decision.py``); compared with
:data:`ONE_ROUND_ARM` (the untuned drafter the same way) and ``standard`` besides its base arm
(:func:`baselines_of`). Added for issue 40's tuned-drafter re-measurement."""

COMPOSE_SEP = "+"
"""Separator of a composed arm ``<base arm>+<ablation arm>`` (``benchmarks/decision.py``): the
base arm's config (``speculative``, ``speculative-smol`` or a tuned drafter) with the
ablation's overrides on top. Arm labels and ablation names never hold it, so the name splits
at its first ``+`` unambiguously."""


def composed_parts(arm: str) -> tuple[str, str] | None:
    """``(base arm, ablation arm)`` of a composed arm ``<base>+<ablation>``
    (:data:`COMPOSE_SEP`), split at the first ``+``; None for any other arm. Names are not
    checked here (``decision.composed_arm`` does)."""
    base, sep, ablation = arm.partition(COMPOSE_SEP)
    return (base, ablation) if sep else None


def composed_baseline(arm: str) -> str | None:
    """The arm a composed arm is tabled against: its base arm, or for ``<drafter arm>+defaults``
    :data:`ONE_ROUND_ARM` (the config's drafter under the same defaults); None for any other arm."""
    parts = composed_parts(arm)
    if parts is None:
        return None
    return ONE_ROUND_ARM if parts[1] == DEFAULTS_ON_TOP else parts[0]


def baselines_of(arm: str, same_base: dict[str, str | None] | None = None) -> list[tuple[str, str]]:
    """The comparisons (arm, baseline) of ``arm``: a composed arm (:func:`composed_parts`) vs
    its base arm only (``<drafter arm>+defaults``: vs :data:`ONE_ROUND_ARM`, ``standard``, then its
    base arm); its :data:`BASELINES`; a tuned arm
    (:data:`TUNED_PREFIX`) vs ``standard``, ``speculative`` and ``same_base[arm]`` (the untuned
    arm of its base model, when known and not ``speculative``); any other arm but
    ``speculative``/``standard`` vs ``speculative``; plus :data:`ARM_BASELINES`."""
    parts = composed_parts(arm)
    if parts and parts[1] == DEFAULTS_ON_TOP:
        return [(arm, ONE_ROUND_ARM), (arm, "standard"), (arm, parts[0])]
    if parts:
        return [(arm, parts[0])]
    if arm.startswith(TUNED_PREFIX):
        own = (same_base or {}).get(arm)
        pairs = [(arm, "standard"), (arm, "speculative")] + ([(arm, own)] if own and own != "speculative" else [])
    else:
        pairs = [(x, y) for x, y in BASELINES if x == arm] or (
            [(arm, "speculative")] if arm not in ("speculative", "standard") else [])
    return pairs + ([(arm, ARM_BASELINES[arm])] if arm in ARM_BASELINES else [])

ARM_BASELINES = {"question_first_block32": "block32", "fallback_standard": "standard",
                 DEFAULT_ARM: "standard"}
"""Arms also compared with another arm than ``speculative``: the prompt layout at the same
KV block size (``benchmarks/decision.py``), so the layout's effect is not the block size's;
the fallback pass with Standard RAG alone (a user's choice is between the two: the fallback
costs a speculative pass plus Standard RAG on the flagged rows); the product's defaults
(``speculative-default``, ``benchmarks/decision.py``) with Standard RAG, the choice a user has."""


def _shard_pairs(a: Sequence[dict], b: Sequence[dict], key: str) -> tuple[list[float], list[float]]:
    """Per-shard values of ``key`` (``seconds`` or ``tokens``) of shards both cells hold
    with the same rows (same name and row count: the same input rows), whatever machine."""
    kept, _ = _one_machine_pairs(a, b, check=False)
    return [_shard_value(s, key) for s, _ in kept], [_shard_value(t, key) for _, t in kept]


def _seconds_pairs(a: dict, b: dict) -> tuple[list[float], list[float], int]:
    """Per-shard seconds of the shard pairs of cells ``a`` and ``b`` (:func:`_shard_pairs`)
    whose two shards ran on one and the same known machine (:func:`_one_machine_pairs`), and
    how many pairs were left out. Cells without machine information (no ``machines`` key,
    :func:`same_machine` None) keep every pair, as before."""
    kept, dropped = _one_machine_pairs(a["shards"], b["shards"], check=same_machine(a, b) is not None)
    return [_shard_value(s, "seconds") for s, _ in kept], [_shard_value(t, "seconds") for _, t in kept], dropped


def _one_machine_pairs(a: Sequence[dict], b: Sequence[dict], *, check: bool = True
                       ) -> tuple[list[tuple[dict, dict]], int]:
    """The shard pairs of ``a`` and ``b`` with the same name and row count (the same input
    rows, as :func:`_shard_pairs`) whose two shards ran on one and the same known machine
    (their ``machine["id"]``, equal and not None; every pair when not ``check``), and how
    many pairs were left out for running on two machines or an unknown one. A cell of the
    archive often mixes sessions (rows 0-49 on one machine, 50-99 on another), yet each of
    its shard pairs may still have run on one machine."""
    bm = {s["name"]: s for s in b}
    kept, dropped = [], 0
    for s in a:
        t = bm.get(s["name"])
        if t is None or t.get("rows_out") != s.get("rows_out"):
            continue
        ma, mb = (s.get("machine") or {}).get("id"), (t.get("machine") or {}).get("id")
        if check and (ma is None or ma != mb):
            dropped += 1
        else:
            kept.append((s, t))
    return kept, dropped


def seconds_ratio(xs: Sequence[float], ys: Sequence[float], dropped: int, machines_a: Sequence,
                  machines_b: Sequence, *, reps: int = REPS, strata: Sequence | None = None) -> dict:
    """The seconds ratio over the shard pairs run on one machine (:func:`_seconds_pairs`):
    :func:`ratio_bootstrap` with ``"pairs_across_machines": dropped`` when pairs were left
    out; :func:`withheld_ratio` (``machines_a``/``machines_b``: each side's machine ids) when
    every pair was left out."""
    if dropped and not xs:
        return withheld_ratio(machines_a, machines_b)
    r = ratio_bootstrap(xs, ys, reps=reps, strata=strata)
    return {**r, "pairs_across_machines": dropped} if dropped else r


def _shard_value(shard: dict, key: str) -> float:
    if key == "tokens":
        return float(sum(e.get("prompt_tokens", 0) + e.get("generated_tokens", 0)
                         for e in (shard.get("engines") or {}).values()))
    return float(shard.get(key, 0.0))


def compare_cells(a: dict, b: dict, choices: dict, labels: Sequence[str], *, reps: int = REPS,
                  a_correct: Sequence[bool | None] | None = None) -> dict:
    """Two cells of one dataset: :func:`paired` accuracy, and the ratios a / b of seconds and
    of tokens over the shards both hold (:func:`ratio_bootstrap`; absent for re-selected arms,
    which cost nothing beyond their source cell). The seconds ratio is over the shard pairs
    that ran on one and the same machine (:func:`seconds_ratio`: the pairs left out counted,
    withheld when none is left); tokens do not depend on the machine. When paired shards ran in
    different engine dtypes, ``dtypes_differ`` says so (:func:`dtypes_differ`; absent otherwise,
    and for shards of unknown dtype)."""
    out = paired(a["rows"], b["rows"], choices, labels, a_correct=a_correct, reps=reps)
    flag = dtypes_differ(dtype_pairs(a["shards"], b["shards"]))
    if flag:
        out["dtypes_differ"] = flag
    if a_correct is None:
        out["seconds"] = seconds_ratio(*_seconds_pairs(a, b), a.get("machines"), b.get("machines"), reps=reps)
        out["tokens"] = ratio_bootstrap(*_shard_pairs(a["shards"], b["shards"], "tokens"), reps=reps)
    return out


def summarise(cells: dict, choices: dict, labels: Sequence[str], *, seed: int = 0,
              reps: int = REPS, tuning: dict | None = None, same_base: dict[str, str | None] | None = None) -> dict:
    """All figures of the benchmark.

    Args:
        cells: dataset -> arm -> ``{"rows": output rows (dicts), "shards": done-marker
            results with ``name``, "roles": model -> role, "complete": bool}`` and optionally
            ``"deduplicate_drafts"``: the cell's ``verifier.deduplicate_drafts`` (kept in its
            figures, :func:`dedupe_table`), and ``"machines"``: the machine ids its shards ran
            on (None = unknown); seconds of
            cells that did not run on one and the same machine are not divided
            (:func:`same_machine`; pooled: a seconds ratio only when every dataset's pair of
            cells ran on one machine each, the same for both).
        choices: dataset -> query_id -> option texts (None for non-choice rows).
        labels: the run's ``claim_labels``.
        seed: the run config's seed (random-selection ablation, as the product's).
        tuning: dataset -> the speculative cell on its tuning split (``{"rows", ...}``;
            its choices in ``choices``): used only for the choice of
            ``selection.self_reflection``, ``selection.rule`` and the score terms
            (``selection.use_*``), never reported as an arm.
        same_base: tuned arm -> the arm of its untuned base model (:func:`baselines_of`).

    Returns ``{"datasets": {dataset: {"arms": {arm: cell_figures}, "comparisons":
    {"a - b": compare_cells}, "fallback": {arm: fallback_figures}}}, "pooled": {"arms":
    {arm: {"n", "accuracy", "ci95", "datasets"}}, "comparisons": {"a - b": paired + seconds
    ratio + ``dtypes_differ`` over every dataset's shard pairs when some differ}, "fallback":
    {arm: flagged rows before/after, stratified}}}``, and when a composed
    arm ran, ``"composed_arms": {arm: {"base", "ablation"}}`` (its comparison with its base
    arm is ``"<arm> - <base>"`` in ``comparisons``, :func:`composed_table`). Re-selected Table 3
    arms (:data:`SELECTION_ABLATIONS`) appear beside the cells run, derived from
    ``speculative``; ``fallback`` only for the :data:`FALLBACK_ARMS` run (their whole-cell
    comparison with ``speculative`` is in ``comparisons``). Each :data:`POST_HOC` key
    (``self_reflection``, ``selection_rule``, ``score_terms``): ``{"tuning": ..., "reported": ...}``,
    :func:`variant_split` of the tuning cells (what the default is chosen on) and of the
    reported ``speculative`` cells (shown, not used for choosing)."""
    res: dict = {"datasets": {}, "pooled": {"arms": {}, "comparisons": {}}}
    pooled_rows: dict[str, list] = {}
    pooled_correct: dict[str, list] = {}
    pooled_pairs: dict[str, dict] = {}
    pooled_fallback: dict[str, dict] = {}
    for ds, arms in cells.items():
        ch = choices.get(ds, {})
        entry = res["datasets"][ds] = {"arms": {}, "comparisons": {}}
        outcomes: dict[str, list] = {}
        for arm, cell in arms.items():
            fig = cell_figures(cell["rows"], cell["shards"], ch, labels, cell.get("roles", {}), reps=reps)
            fig["complete"] = cell.get("complete", True)
            if "machines" in cell:
                fig["machines"] = list(cell["machines"])
            if cell.get("deduplicate_drafts") is not None:  # the cell's verifier.deduplicate_drafts
                fig["deduplicate_drafts"] = bool(cell["deduplicate_drafts"])
            entry["arms"][arm] = fig
            outcomes[arm] = [row_correct(r, ch.get(r["query_id"]), labels) for r in cell["rows"]]
        derived = {}
        if "speculative" in arms:
            spec = arms["speculative"]
            for name, switches in SELECTION_ABLATIONS.items():
                corr = reselect_correct(spec["rows"], ch, labels, seed=seed, **switches)
                graded = [c for c in corr if c is not None]
                derived[name] = corr
                entry["arms"][name] = {"n": len(graded), "accuracy": (sum(graded) / len(graded)) if graded else None,
                                       "ci95": bootstrap_ci([float(c) for c in graded], reps=reps),
                                       "derived_from": "speculative"}
        for arm, variant in NESTED_ARMS.items():
            if arm in arms and "speculative" in arms:
                entry.setdefault("nested_check", {})[arm] = {
                    **nested_agreement(arms["speculative"]["rows"], arms[arm]["rows"], variant),
                    "same_machine": same_machine(arms["speculative"], arms[arm])}
        for a_name in list(entry["arms"]):
            for x, y in baselines_of(a_name, same_base):
                if y not in arms:
                    continue
                if x in derived:
                    cmp = compare_cells(arms["speculative"], arms[y], ch, labels, reps=reps, a_correct=derived[x])
                elif x in arms:
                    cmp = compare_cells(arms[x], arms[y], ch, labels, reps=reps)
                else:
                    continue
                entry["comparisons"][f"{x} - {y}"] = cmp
                key = f"{x} - {y}"
                a_src = arms["speculative"] if x in derived else arms[x]
                a_out = derived[x] if x in derived else outcomes[x]
                pp = pooled_pairs.setdefault(key, {"a": {}, "b": {}, "sa": [], "sb": [], "strata": [],
                                                   "machines_a": set(), "machines_b": set(), "dropped": 0,
                                                   "dtypes": {"pairs": 0, "differ": 0, "a": set(), "b": set()}})
                dt = dtype_pairs(a_src["shards"], arms[y]["shards"])
                for k in ("pairs", "differ"):
                    pp["dtypes"][k] += dt[k]
                pp["dtypes"]["a"].update(dt["a"])
                pp["dtypes"]["b"].update(dt["b"])
                pp["a"].update({(ds, r["query_id"]): c for r, c in zip(a_src["rows"], a_out)})
                pp["b"].update({(ds, r["query_id"]): c for r, c in zip(arms[y]["rows"], outcomes[y])})
                if x not in derived:
                    pp["machines_a"].update(arms[x].get("machines") or [])
                    pp["machines_b"].update(arms[y].get("machines") or [])
                    xs, ys, dropped = _seconds_pairs(arms[x], arms[y])
                    pp["dropped"] += dropped
                    pp["sa"] += xs
                    pp["sb"] += ys
                    pp["strata"] += [ds] * len(xs)
        for arm in (a for a in FALLBACK_ARMS if a in arms):
            fb = entry.setdefault("fallback", {})[arm] = fallback_figures(
                arms[arm]["rows"], arms[arm]["shards"], arms.get("speculative"), ch, labels, reps=reps,
                machines_match=same_machine(arms[arm], arms["speculative"]) if "speculative" in arms else None)
            flagged = [r for r in arms[arm]["rows"] if r.get("error") is None and r.get("low_confidence")]
            aft, bef = flagged_outcomes(flagged, ch, labels)
            pf = pooled_fallback.setdefault(arm, {"after": [], "before": [], "strata": [], "n_flagged": 0, "n_rows": 0})
            pf["after"] += aft
            pf["before"] += bef
            pf["strata"] += [ds] * len(aft)
            pf["n_flagged"] += fb["n_flagged"]
            pf["n_rows"] += fb["n_rows"]
        for arm in entry["arms"]:
            corr = derived.get(arm, outcomes.get(arm))
            pooled_rows.setdefault(arm, []).append(ds)
            pooled_correct.setdefault(arm, []).extend((ds, c) for c in corr if c is not None)
    for arm, vals in pooled_correct.items():
        xs, st = [float(c) for _, c in vals], [d for d, _ in vals]
        res["pooled"]["arms"][arm] = {"n": len(xs), "accuracy": (sum(xs) / len(xs)) if xs else None,
                                      "ci95": bootstrap_ci(xs, reps=reps, strata=st),
                                      "datasets": pooled_rows[arm]}
    for key, pp in pooled_pairs.items():
        ids = [k for k in pp["a"] if k in pp["b"] and pp["a"][k] is not None and pp["b"][k] is not None]
        a, b, st = [bool(pp["a"][k]) for k in ids], [bool(pp["b"][k]) for k in ids], [k[0] for k in ids]
        cmp = {**paired_bootstrap(a, b, reps=reps, strata=st or None),
               "accuracy_a": (sum(a) / len(a)) if a else None, "accuracy_b": (sum(b) / len(b)) if b else None,
               "mcnemar": mcnemar_exact(a, b), "datasets": sorted(set(st))}
        flag = dtypes_differ({**pp["dtypes"], "a": sorted(pp["dtypes"]["a"]), "b": sorted(pp["dtypes"]["b"])})
        if flag:
            cmp["dtypes_differ"] = flag
        if pp["sa"] or pp["dropped"]:
            key_m = lambda m: (m is None, m or "")  # noqa: E731 - None (unknown) last
            cmp["seconds"] = seconds_ratio(pp["sa"], pp["sb"], pp["dropped"], sorted(pp["machines_a"], key=key_m),
                                           sorted(pp["machines_b"], key=key_m), reps=reps, strata=pp["strata"])
        res["pooled"]["comparisons"][key] = cmp
    composed = sorted({a for arms in cells.values() for a in arms if composed_parts(a)})
    if composed:
        res["composed_arms"] = {a: dict(zip(("base", "ablation"), composed_parts(a))) for a in composed}
    reported = {ds: arms["speculative"] for ds, arms in cells.items() if "speculative" in arms}
    for key in POST_HOC:
        res[key] = {split: variant_split(part, choices, labels, seed=seed, comparison=key, reps=reps)
                    for split, part in (("tuning", tuning or {}), ("reported", reported))}
    for arm, pf in pooled_fallback.items():
        a, b = pf["after"], pf["before"]
        res["pooled"].setdefault("fallback", {})[arm] = {
            "n_rows": pf["n_rows"], "n_flagged": pf["n_flagged"],
            "share_flagged": (pf["n_flagged"] / pf["n_rows"]) if pf["n_rows"] else None,
            **paired_bootstrap(a, b, reps=reps, strata=pf["strata"] or None),
            "accuracy_before": (sum(b) / len(b)) if b else None, "accuracy_after": (sum(a) / len(a)) if a else None,
            "mcnemar": mcnemar_exact(a, b)}
    return res


# --- Markdown ----------------------------------------------------------------------------

def _pct(x) -> str:
    return "n/a" if x is None or x != x else f"{100 * x:.1f}"


def _hits(rate) -> str:
    return "unknown" if rate is None else f"{100 * rate:.1f}%"


def _ci(c) -> str:
    return "" if not c or c[0] != c[0] else f" [{100 * c[0]:.1f}, {100 * c[1]:.1f}]"


def _diff(cmp: dict | None) -> str:
    """A paired difference for a table cell, with the comparison's dtype note
    (:func:`dtypes_differ`) when its paired shards ran in different engine dtypes."""
    if not cmp or not cmp.get("n"):
        return "n/a"
    m = cmp["mcnemar"]
    note = f"; **{cmp['dtypes_differ']['note']}**" if cmp.get("dtypes_differ") else ""
    return (f"{100 * cmp['diff']:+.1f} [{100 * cmp['ci95'][0]:+.1f}, {100 * cmp['ci95'][1]:+.1f}], "
            f"p = {m['p']:.3g} ({m['b']}/{m['c']}){note}")


def _ratio(r: dict | None) -> str:
    if r and r.get("withheld"):
        return r["withheld"]
    if not r or not r.get("n") or r["ratio"] != r["ratio"]:
        return "n/a"
    if r.get("pairs_across_machines"):
        return (f"{r['ratio']:.2f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] (n = {r['n']} shard pairs on one "
                f"machine; {r['pairs_across_machines']} pairs across machines left out)")
    return f"{r['ratio']:.2f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] (n = {r['n']} shards)"


def tables(res: dict) -> str:
    """Markdown tables of a :func:`summarise` result: headline, drafts (oracle, parsing),
    cost per row per model, other arms vs speculative."""
    out = ["Accuracy in % [bootstrap 95% interval]; differences in points [paired bootstrap 95% "
           "interval], McNemar exact p (discordant pairs a-right/b-right); time ratios with a "
           "paired bootstrap interval over shards.", "",
           "| dataset | n | Standard RAG | Speculative RAG | spec - std | tuned drafter | tuned - std | "
           "tuned - untuned | s/row spec / std (ratio [95% CI]) |", "|---|---|---|---|---|---|---|---|---|"]
    rows = list(res["datasets"].items()) + [("pooled", res["pooled"])]
    for ds, e in rows:
        arms, cmps = e["arms"], e["comparisons"]

        def acc(a):
            x = arms.get(a)
            return f"{_pct(x['accuracy'])}{_ci(x['ci95'])}" if x else "n/a"
        n = max((arms[a]["n"] for a in ("standard", "speculative") if a in arms), default=0)
        sec = cmps.get("speculative - standard", {}).get("seconds")
        if ds != "pooled" and "speculative" in arms and "standard" in arms:
            spr = f"{arms['speculative']['cost']['s_per_row']:.1f} / {arms['standard']['cost']['s_per_row']:.1f} ({_ratio(sec)})"
        else:
            spr = _ratio(sec)
        out.append(f"| {ds} | {n} | {acc('standard')} | {acc('speculative')} | "
                   f"{_diff(cmps.get('speculative - standard'))} | {acc('speculative-tuned')} | "
                   f"{_diff(cmps.get('speculative-tuned - standard'))} | "
                   f"{_diff(cmps.get('speculative-tuned - speculative'))} | {spr} |")
    out += ["", "Drafts: oracle accuracy (a row counts when any draft is right), share of oracle "
            "rows the selection answers right, share of drafts that parse / are valid for "
            "selection, fast-path share.", "",
            "| dataset | arm | n rows | oracle % | recovered % (n oracle rows) | drafts | parsed % | valid % | fast path % |",
            "|---|---|---|---|---|---|---|---|---|"]
    for ds, e in res["datasets"].items():
        for arm, f in e["arms"].items():
            if "drafts" not in f or arm == "standard":
                continue
            o, d = f["oracle"], f["drafts"]
            out.append(f"| {ds} | {arm} | {o['n']} | {_pct(o['oracle'])} | {_pct(o['recovered'])} ({o['n_oracle']}) | "
                       f"{d['n_drafts']} | {_pct(d['parsed'])} | {_pct(d['valid'])} | {_pct(f['fast_path']['share'])} |")
    out += ["", "Cost per row (sum over the cell's shards, across resumes): seconds, and per model "
            "engine seconds, tokens (prompt + generated) and vLLM prefix-cache hits (share of prompt "
            "tokens read from the cache; unknown for shards recorded before they were counted).", "",
            "| dataset | arm | rows | s/row | model (role): engine s/row, tokens/row |", "|---|---|---|---|---|"]
    for ds, e in res["datasets"].items():
        for arm, f in e["arms"].items():
            if "cost" not in f:
                continue
            c = f["cost"]
            models = "; ".join(f"{m} ({v['role']}): {v['engine_s_per_row']:.2f} s, {v['tokens_per_row']:.0f}, "
                               f"cache hits {_hits(v.get('prefix_cache_hit_rate'))}"
                               for m, v in c["models"].items())
            out.append(f"| {ds} | {arm} | {c['rows']} | {c['s_per_row']:.2f} | {models} |")
    extra = {f"{a} - {b}" for a, b in [*ARM_BASELINES.items(),
                                       *((x, y) for x, y in BASELINES if x in (ONE_ROUND_ARM, LARGE_DRAFTER_ARM))]}

    def other(k: str) -> bool:
        return (((k.endswith("- speculative") and not k.startswith("speculative-tuned")) or k in extra)
                and not composed_parts(k.partition(" - ")[0]))
    others = [(ds, k, v) for ds, e in res["datasets"].items() for k, v in e["comparisons"].items() if other(k)]
    # pooled rows: an arm that ran on more than one dataset, its rows resampled within each dataset
    others += [("pooled", k, v) for k, v in res["pooled"]["comparisons"].items()
               if other(k) and len(v.get("datasets") or []) > 1]
    if others:
        out += ["", "Other arms vs Speculative RAG (or the baseline named) on the same rows (Table 3 "
                "selection ablations are re-selected from the speculative cell's drafts; sampling, "
                "layout and m/k arms are runs). Pooled rows: every dataset where both ran, rows "
                "resampled within each dataset (datasets listed).", "",
                "| dataset | arm - baseline | n | accuracy % (arm) | difference | s/row ratio arm / baseline |",
                "|---|---|---|---|---|---|"]
        for ds, k, v in others:
            name = f"pooled ({', '.join(v['datasets'])})" if ds == "pooled" else ds
            out.append(f"| {name} | {k} | {v['n']} | {_pct(v['accuracy_a'])} | {_diff(v)} | {_ratio(v.get('seconds'))} |")
    out += tuned_table(res)
    out += composed_table(res)
    out += draft_length_table(res)
    out += dedupe_table(res)
    out += fallback_table(res)
    out += self_reflection_table(res)
    out += rule_table(res)
    out += terms_table(res)
    out += verifier_table(res)
    out += nested_table(res)
    out += machines_table(res)
    return "\n".join(out) + "\n"


def _machines(ids: Sequence) -> str:
    """Machine ids for a sentence: ``a1b2c3d4e5f6``, ``a1b2c3d4e5f6 + unknown``."""
    return " + ".join("unknown" if m is None else str(m) for m in ids) or "unknown"


def _dtypes(dts: Sequence | None) -> str:
    """Engine dtypes of a cell for a table cell (:func:`cell_dtypes`): ``float32``,
    ``bfloat16, float32 + unknown``; ``unknown`` when none is known or not given."""
    dts = list(dts or [None])
    known = [d for d in dts if d is not None]
    return " + ".join([", ".join(known)] * bool(known) + ["unknown"] * (None in dts))


def machines_table(res: dict) -> list[str]:
    """Markdown lines "Machines": each machine of ``res["machines"]`` (id -> ``{"cpu_model",
    "cpus", "platform", "dates"}``, put there by ``decision.analyse``) and the machine(s)
    and engine dtype(s) (:func:`cell_dtypes`) each cell ran on (``arms[arm]["machines"]``,
    ``arms[arm]["engine_dtypes"]``); empty when no cell has machines."""
    cells = [(ds, arm, f["machines"], f.get("engine_dtypes")) for ds, e in res["datasets"].items()
             for arm, f in e["arms"].items() if "machines" in f]
    if not cells:
        return []
    out = ["", "Machines: seconds are compared (ratios, added s/row) only between shards that ran on one and the "
           "same machine (shard pairs across machines are left out and counted); when no pair did, "
           f"`{DIFFERENT_MACHINES}`. Accuracy and tokens compare across machines. "
           "Machine id: sha256 of /etc/machine-id and the boot id (each session's machine is a new id). "
           "Engine dtype(s): what the cell's shards recorded (bfloat16 or float32 on CPU, by host, unless "
           "the config pins it; unknown: shards recorded before the field existed); a comparison whose "
           "paired shards ran in different dtypes says so beside its difference.", "",
           "| machine | CPU | cpus | platform | dates (UTC) |", "|---|---|---|---|---|"]
    for mid, m in sorted((res.get("machines") or {}).items()):
        out.append(f"| {mid} | {m.get('cpu_model')} | {m.get('cpus')} | {m.get('platform')} | "
                   f"{', '.join(m.get('dates') or [])} |")
    out += ["", "| dataset | arm | machine(s) | engine dtype(s) |", "|---|---|---|---|"]
    out += [f"| {ds} | {arm} | {_machines(ms)} | {_dtypes(dts)} |" for ds, arm, ms, dts in cells]
    return out


def drafter_generated_tokens(f: dict) -> float | None:
    """Generated tokens per row of a cell's models whose role includes the drafter (from
    :func:`cell_cost`; a model serving drafter and verifier counts the verifier's generated
    tokens too); None when no model drafted (Standard RAG)."""
    got = [v["generated_tokens_per_row"] for v in f["cost"]["models"].values() if "drafter" in v["role"]]
    return sum(got) if got else None


def flag_share(f: dict, flag: str) -> float | None:
    """Share of a cell's drafts (``cell_figures``) that carry ``flag``; None without drafts."""
    d = f["drafts"]
    return (d["by_flag"].get(flag, 0) / d["n_drafts"]) if d["n_drafts"] else None


def _tokens(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0f}"


def comparison_lines(res: dict, keep, columns: Sequence) -> list[str]:
    """Markdown table rows of the comparisons ``"a - b"`` of each dataset, then pooled, for
    which ``keep(a, b)`` is true: dataset, a, b, n paired rows, the accuracy of each on them,
    the paired difference [bootstrap 95%] with McNemar p, one cell ``"<a> / <b>"`` per
    function of ``columns`` (cell figures -> text; empty on pooled rows, whose per-cell
    figures are in the dataset rows) and the seconds ratio a / b over the shards both
    finished. Used by :func:`tuned_table` and :func:`composed_table`."""
    lines = []
    for ds, e in list(res["datasets"].items()) + [("pooled", res["pooled"])]:
        for key, cmp in e["comparisons"].items():
            a, _, b = key.partition(" - ")
            if not keep(a, b):
                continue
            if ds == "pooled":  # per-cell figures are in the dataset rows
                cells = " ".join(["|"] * (len(columns) - 1))
            else:
                fa, fb = e["arms"][a], e["arms"][b]
                cells = " | ".join(f"{col(fa)} / {col(fb)}" for col in columns)
            lines.append(f"| {ds} | {a} | {b} | {cmp['n']} | {_pct(cmp['accuracy_a'])} | {_pct(cmp['accuracy_b'])} | "
                         f"{_diff(cmp)} | {cells} | {_ratio(cmp.get('seconds'))} |")
    return lines


def tuned_table(res: dict) -> list[str]:
    """Markdown lines "Tuned vs untuned drafter" (issue 12): per dataset, each comparison of a
    tuned arm (:data:`TUNED_PREFIX`, not composed) with ``standard`` or an untuned drafter arm
    (:data:`UNTUNED_ARMS`) that ran: n paired rows, the accuracy of each on them, the paired
    difference [bootstrap 95%] with McNemar p, the share of drafts that parse, drafter
    generated tokens per row (:func:`drafter_generated_tokens`), seconds per row of each and
    the seconds ratio tuned / baseline over the shards both finished; then the pooled rows
    (stratified by dataset; accuracy, difference and time ratio only). Empty when no tuned arm
    was compared."""
    lines = comparison_lines(
        res, lambda a, b: a.startswith(TUNED_PREFIX) and not composed_parts(a) and b in ("standard", *UNTUNED_ARMS),
        (lambda f: _pct(f["drafts"]["parsed"]), lambda f: _tokens(drafter_generated_tokens(f)),
         lambda f: f"{f['cost']['s_per_row']:.2f}"))
    if not lines:
        return []
    return ["", "Tuned vs untuned drafter (issue 12), the same verifier: each tuned arm vs Standard RAG, vs "
            "`speculative` (the config's drafter, untuned) and vs the untuned arm of its own base model "
            "(`speculative-smol` for a tuned SmolLM2-135M), on the same rows. Accuracy of each on the "
            "paired rows; difference tuned - baseline in points [paired bootstrap 95%], McNemar p "
            "(discordant pairs); parsed: share of drafts without a parse flag; drafted tokens: the "
            "drafter's generated tokens per row; s/row of each (all shards) and the ratio tuned / "
            "baseline over the shards both finished. Pooled: rows of every dataset where both ran, "
            "resampled within each dataset.", "",
            "| dataset | tuned arm | baseline | n | accuracy % tuned | accuracy % baseline | tuned - baseline | "
            "parsed % tuned / baseline | drafted tokens/row tuned / baseline | s/row tuned / baseline | "
            "s/row ratio tuned / baseline |", "|---|---|---|---|---|---|---|---|---|---|---|", *lines]


def composed_table(res: dict) -> list[str]:
    """Markdown lines "Ablations on other drafters": per dataset, then pooled, each composed
    arm ``<base>+<ablation>`` (:func:`composed_parts`) vs its base arm (``<base>+defaults``: vs
    :data:`ONE_ROUND_ARM`, :func:`composed_baseline`) on the same rows
    (:func:`baselines_of`): n paired rows, the accuracy of each, the paired difference
    [bootstrap 95%] with McNemar p, then arm / base: the share of drafts that parse, that
    carry ``answer_forced`` (answer written after a forced ``Answer:`` line) and that are valid
    for selection, the drafter's generated tokens per row (:func:`drafter_generated_tokens`),
    seconds per row, and the seconds ratio arm / base over the shards both finished (pooled:
    accuracy, difference and ratio only). Empty when no composed arm was compared."""
    lines = comparison_lines(
        res, lambda a, b: composed_baseline(a) == b,
        (lambda f: _pct(f["drafts"]["parsed"]), lambda f: _pct(flag_share(f, Flag.ANSWER_FORCED)),
         lambda f: _pct(f["drafts"]["valid"]), lambda f: _tokens(drafter_generated_tokens(f)),
         lambda f: f"{f['cost']['s_per_row']:.2f}"))
    if not lines:
        return []
    return ["", "Ablations on other drafters: each composed arm `<base arm>+<ablation>` (the base arm's config, "
            "e.g. a tuned drafter, with the ablation's overrides on top) vs its base arm on the same rows "
            f"(`<base arm>+{DEFAULTS_ON_TOP}`, a drafter under the product's defaults: vs `{ONE_ROUND_ARM}`, the "
            "config's drafter under the same defaults). "
            "Accuracy of each on the paired rows; difference arm - base in points [paired bootstrap 95%], "
            "McNemar p (discordant pairs); parsed: drafts without a parse flag; forced: drafts flagged "
            "`answer_forced`; valid: drafts selection may use; drafted tokens: the drafter's generated "
            "tokens per row; s/row of each (all shards) and the ratio arm / base over the shards both "
            "finished. Pooled: rows of every dataset where both ran, resampled within each dataset.", "",
            "| dataset | arm | base arm | n | accuracy % arm | accuracy % base | arm - base | "
            "parsed % arm / base | forced % arm / base | valid % arm / base | drafted tokens/row arm / base | "
            "s/row arm / base | s/row ratio arm / base |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|", *lines]


DRAFT_LENGTH_ARMS = ("speculative", "draft48", "draft160", "one_sentence", "answer_on_truncation")
"""Arms of the drafter's token budget, rationale instruction (issue 13 item 4) and answer
recovery after a budget cut (``drafter.answer_on_truncation``), shown side by side by
:func:`draft_length_table` so the defaults can be chosen from the figures."""


def draft_length_table(res: dict) -> list[str]:
    """Markdown lines: per dataset, each arm of :data:`DRAFT_LENGTH_ARMS` that ran (besides
    ``speculative``): accuracy, seconds per row, generated tokens per row (every model of the
    cell), mean generated tokens per draft (``tokens_draft``), share of drafts cut at
    ``max_tokens`` (flag ``truncated_at_max_tokens``), share of drafts whose answer was written
    after a forced ``Answer:`` line (flag ``answer_forced``), share of drafts valid for
    selection, and the paired difference / seconds ratio vs ``speculative``. Empty when none
    of these arms ran."""
    lines = []
    for ds, e in res["datasets"].items():
        arms = [a for a in DRAFT_LENGTH_ARMS if a in e["arms"] and "cost" in e["arms"][a]]
        if not any(a != "speculative" for a in arms):
            continue
        for arm in arms:
            f = e["arms"][arm]
            d = f["drafts"]
            gen = sum(m["generated_tokens_per_row"] for m in f["cost"]["models"].values())
            cut, forced = (flag_share(f, flag) for flag in (Flag.TRUNCATED_AT_MAX_TOKENS, Flag.ANSWER_FORCED))
            cmp = e["comparisons"].get(f"{arm} - speculative")
            per_draft = f.get("tokens_per_draft")
            lines.append(f"| {ds} | {arm} | {f['n']} | {_pct(f['accuracy'])}{_ci(f['ci95'])} | "
                         f"{f['cost']['s_per_row']:.2f} | {gen:.0f} | "
                         f"{'n/a' if per_draft is None else f'{per_draft:.1f}'} | {_pct(cut)} | {_pct(forced)} | "
                         f"{_pct(d['valid'])} | "
                         f"{_diff(cmp) if cmp else ''} | {_ratio(cmp.get('seconds')) if cmp else ''} |")
    if not lines:
        return []
    return ["", "Shorter drafts (issue 13 item 4): the drafter's token budget (`draft48`, `draft160`; "
            "`speculative` is the config's), the one-sentence rationale instruction (`one_sentence`) and "
            "answers recovered after the budget cut (`answer_on_truncation`). "
            "Generated tokens per row: every model of the cell; tokens per draft: mean `tokens_draft`; "
            "cut: drafts flagged `truncated_at_max_tokens`; forced: drafts flagged `answer_forced` (cut "
            "before their answer line, answer written after a forced `Answer:`); valid: drafts selection may "
            "use; difference and time ratio vs speculative on the same rows.", "",
            "| dataset | arm | n | accuracy % | s/row | generated tokens/row | tokens/draft | cut % | forced % | "
            "valid % | arm - speculative | s/row ratio |", "|---|---|---|---|---|---|---|---|---|---|---|---|",
            *lines]


VERIFIED_KEYS = ("tokens_answer", "score_self_consistency", "logprob_yes")
"""Draft fields the verifier fills: a stored draft with any of them set was verified."""


def verifier_duplicates(rows: Sequence[dict]) -> dict:
    """Verified drafts that repeat another verified draft of their row: same ``written_answer``
    (α as written; an older output without it: ``answer``) and ``rationale``, so the same
    verifier input [Q, α, β, R] (the question is the row's). Counted from stored output rows,
    no engine run: the verifier passes ``verifier.deduplicate_drafts`` saves on these rows.
    Rows with an error or on the fast path had no verifier pass.

    Returns ``{"rows": rows with a verified draft, "verified": drafts, "duplicates": drafts,
    "share": duplicates / verified (None when nothing was verified), "ab_tokens_share":
    the duplicates' share of the verified drafts' α and β verifier tokens
    (``tokens_answer`` + ``tokens_rationale``; None when a verified draft lacks them)}``.
    The Q and R tokens of each pass are not stored, so the share of the verifier's whole
    prompt tokens is not given here (the :data:`DEDUPE_ARMS` measure it)."""
    n_rows = verified = duplicates = 0
    ab_all = ab_dup = 0
    ab_known = True
    for r in rows:
        if r.get("error") is not None or r.get("fast_path"):
            continue
        seen: set = set()
        drafts = [d for d in r.get("drafts") or [] if any(d.get(k) is not None for k in VERIFIED_KEYS)]
        n_rows += bool(drafts)
        for d in drafts:
            key = (d.get("written_answer") or d.get("answer"), d.get("rationale"))
            ab = None if d.get("tokens_answer") is None or d.get("tokens_rationale") is None else (
                d["tokens_answer"] + d["tokens_rationale"])
            ab_known &= ab is not None
            verified += 1
            ab_all += ab or 0
            if key in seen:
                duplicates += 1
                ab_dup += ab or 0
            seen.add(key)
    return {"rows": n_rows, "verified": verified, "duplicates": duplicates,
            "share": (duplicates / verified) if verified else None,
            "ab_tokens_share": (ab_dup / ab_all) if ab_known and ab_all else None}


DEDUPE_ARMS = {"no_dedupe_verifier": False, "dedupe_verifier": True}
"""The decision arms that set ``verifier.deduplicate_drafts`` (arm -> value;
``benchmarks/decision.py``): ``no_dedupe_verifier`` turns it off now that it is on by
default; ``dedupe_verifier`` turned it on when it was off (benchmarks/decision/results.json
of the measurement holds that arm)."""


def dedupe_setting(res: dict, arm: str, f: dict) -> bool | None:
    """``verifier.deduplicate_drafts`` of a cell: as its figures record it (``summarise`` of a
    cell that ``decision.load_cell`` read), else by the arm (:data:`DEDUPE_ARMS`), else for
    any other arm the benchmark config's (``res["config"]``, false when it predates the
    field: the behaviour then); None when none of these is known."""
    if f.get("deduplicate_drafts") is not None:
        return f["deduplicate_drafts"]
    if arm in DEDUPE_ARMS:
        return DEDUPE_ARMS[arm]
    if isinstance(res.get("config"), dict):
        return bool(res["config"].get("verifier", {}).get("deduplicate_drafts", False))
    return None


def _verifier_prompt_tokens(f: dict) -> str:
    """Prompt tokens per row of a cell's models whose role includes the verifier."""
    return "; ".join(f"{v['prompt_tokens_per_row']:.0f} ({v['role']})" for v in f["cost"]["models"].values()
                     if "verifier" in v["role"]) or "n/a"


def dedupe_table(res: dict) -> list[str]:
    """Markdown lines of repeated drafts, per dataset: for ``speculative`` and each of
    :data:`DEDUPE_ARMS` (the cells that ran): the cell's ``verifier.deduplicate_drafts``
    (:func:`dedupe_setting`), accuracy, seconds per row, verifier prompt tokens per row,
    verified drafts and the repeated ones (:func:`verifier_duplicates`, from the stored
    drafts), verifier passes the cell saved (its rows' ``verifier_drafts_deduplicated``: 0 with
    the switch off), and the paired difference and seconds / tokens ratios arm / ``speculative``
    (below 1 when the arm has the switch on and speculative off, as ``dedupe_verifier`` in
    earlier results; above 1 for ``no_dedupe_verifier`` against a speculative with it on).
    Empty when no cell has verified drafts."""
    lines = []
    for ds, e in res["datasets"].items():
        for arm in ("speculative", *DEDUPE_ARMS):
            f = e["arms"].get(arm)
            if not f or "cost" not in f or not f["verifier_duplicates"]["verified"]:
                continue
            v = f["verifier_duplicates"]
            on = dedupe_setting(res, arm, f)
            cmp = e["comparisons"].get(f"{arm} - speculative")
            lines.append(f"| {ds} | {arm} | {'n/a' if on is None else ('on' if on else 'off')} | {f['n']} | "
                         f"{_pct(f['accuracy'])}{_ci(f['ci95'])} | "
                         f"{f['cost']['s_per_row']:.2f} | {_verifier_prompt_tokens(f)} | {v['verified']} | "
                         f"{v['duplicates']} ({_hits(v['share'])}, α+β tokens {_hits(v['ab_tokens_share'])}) | "
                         f"{f['verifier_passes_saved']} | {_diff(cmp) if cmp else ''} | "
                         f"{_ratio(cmp.get('seconds')) if cmp else ''} | {_ratio(cmp.get('tokens')) if cmp else ''} |")
    if not lines:
        return []
    return ["", "Repeated drafts and `verifier.deduplicate_drafts` (on by default; arm `no_dedupe_verifier` "
            "turns it off, arm `dedupe_verifier` turned it on when it was off): each cell's setting, "
            "verified drafts and those repeating another draft of their row byte for byte (same α as "
            "written and β: the same verifier input; counted from the stored drafts, the passes the "
            "switch saves, with their share of the drafts and of the α+β verifier tokens; Q and R "
            "tokens are not stored), the passes the cell saved (0 with the switch off), verifier "
            "prompt tokens per row, and accuracy (should not change), seconds and all tokens arm / "
            "speculative on the same rows (ratios below 1 when only the arm has the switch on, above "
            "1 when only speculative has it).", "",
            "| dataset | arm | deduplicate_drafts | n | accuracy % | s/row | verifier prompt tokens/row | "
            "verified drafts | repeated (share) | passes saved | arm - speculative | s/row ratio | tokens ratio |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|", *lines]


def fallback_table(res: dict) -> list[str]:
    """Markdown lines of the fallback pass (:func:`fallback_figures` per dataset, pooled flagged
    rows, τ_min from ``res["calibration"]`` when the benchmark put it there); empty when no
    fallback arm ran."""
    rows = [(ds, arm, f, e["comparisons"].get(f"{arm} - speculative"), e["comparisons"].get(f"{arm} - standard"))
            for ds, e in res["datasets"].items() for arm, f in (e.get("fallback") or {}).items()]
    if not rows:
        return []
    calib = res.get("calibration") or {}
    out = ["", "Fallback pass (`selection.fallback: standard`): rows flagged low-confidence at τ_min "
           "(calibrated on the dataset's tuning split, never on reported rows) are answered again by "
           "Standard RAG. Flagged rows: accuracy of the first answer -> the answer given, paired "
           "difference [bootstrap 95%], McNemar p (rows fixed/broken); whole dataset: arm - "
           "speculative and arm - standard (Standard RAG alone) on the same rows; added cost vs the "
           "speculative cell over the shards both finished (the fallback stage's own seconds in "
           "brackets); the seconds ratio vs Standard RAG is in the table of other arms.", "",
           "| dataset | arm | τ_min (tuning: n, coverage) | rows | flagged (%) | answered again / failed | "
           "flagged: before -> after % | after - before | whole dataset: arm - speculative | "
           "whole dataset: arm - standard | added s/row (stage) | added tokens/row (per flagged row) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for ds, arm, f, cmp, vs_std in rows:
        c = calib.get(ds) or {}
        tau = "; ".join(f"{t['task']}: {t['tau']:.4g} (n = {t['n']}, {_pct(t['coverage'])}%)"
                        for t in c.get("tasks", []) if t.get("tau") is not None) or "n/a"
        cost = f["cost"]
        add_s = (cost.get("time") or "n/a") if cost["added_s_per_row"] is None else (
            f"{cost['added_s_per_row']:+.2f}" + (f" ({cost['time']})" if cost.get("time") else ""))
        add_t = "n/a" if cost["added_tokens_per_row"] is None else f"{cost['added_tokens_per_row']:+.0f}"
        per_flag = cost.get("added_tokens_per_flagged_row")
        out.append(f"| {ds} | {arm} | {tau} | {f['n_rows']} | {f['n_flagged']} ({_pct(f['share_flagged'])}) | "
                   f"{f['answered_again']} / {f['fallback_failed']} | {_pct(f['accuracy_before'])} -> "
                   f"{_pct(f['accuracy_after'])} (n = {f['n']}) | {_diff(f)} | {_diff(cmp)} | {_diff(vs_std)} | "
                   f"{add_s} ({cost['fallback_stage_s_per_row']:.2f}) | "
                   f"{add_t} ({'n/a' if per_flag is None else f'{per_flag:+.0f}'}) |")
    for arm, f in (res["pooled"].get("fallback") or {}).items():
        out.append(f"| pooled | {arm} | | {f['n_rows']} | {f['n_flagged']} ({_pct(f['share_flagged'])}) | | "
                   f"{_pct(f['accuracy_before'])} -> {_pct(f['accuracy_after'])} (n = {f['n']}) | {_diff(f)} | "
                   f"{_diff(res['pooled']['comparisons'].get(f'{arm} - speculative'))} | "
                   f"{_diff(res['pooled']['comparisons'].get(f'{arm} - standard'))} | | |")
    return out


def _auroc(a: dict) -> str:
    return "n/a" if a.get("auroc") is None else f"{a['auroc']:.3f} [{a['ci95'][0]:.3f}, {a['ci95'][1]:.3f}]"


POST_HOC_SPLITS = (("tuning", "tuning (chooses the default)"), ("reported", "reported (not used for choosing)"))
"""Splits of a :data:`POST_HOC` result in the order shown, with their label."""


def variant_table(res: dict, key: str, variants: Sequence[str], intro: str, extra_head: str, extra_cells) -> list[str]:
    """Markdown lines of one :data:`POST_HOC` comparison (``res[key]``): per split
    (:data:`POST_HOC_SPLITS`), dataset and pooled (when more than one dataset): rows (selected
    again; any two variants picking different drafts), each variant's selection accuracy, each
    variant - baseline (``variants[0]``) in points [paired bootstrap 95%] with McNemar's p,
    then the columns ``extra_head`` names, rendered by ``extra_cells(figures) -> str``. Empty
    when neither split has a row."""
    part = res.get(key) or {}
    lines = []
    for split, label in POST_HOC_SPLITS:
        got = part.get(split) or {}
        entries = list((got.get("datasets") or {}).items())
        for ds, f in entries + ([("pooled", got["pooled"])] if len(entries) > 1 else []):
            lines.append(f"| {label} | {ds} | {f['n']} ({f['n_reselected']}; {f['n_different']}) | "
                         + " | ".join(_pct(f["accuracy"][v]) for v in variants) + " | "
                         + " | ".join(_diff(f["vs_baseline"][v]) for v in variants[1:]) + f" | {extra_cells(f)} |")
    if not lines:
        return []
    head = ("| split | dataset | rows (selected again; different draft) | " + " | ".join(f"{v} %" for v in variants)
            + " | " + " | ".join(f"{v} - {variants[0]}" for v in variants[1:]) + f" | {extra_head} |")
    return ["", intro, "", head, "|" + "---|" * (head.count("|") - 1), *lines]


def self_reflection_table(res: dict) -> list[str]:
    """:func:`variant_table` of the self-reflection variants (``res["self_reflection"]``) with
    the AUROC of log ρ_SR over verified drafts under each."""
    def auroc_cells(f):
        a = f["auroc"]
        d = a["contrast - paper"]
        return (f"{a['n_drafts']} ({a['n_right']}) | {_auroc(a['paper'])} | {_auroc(a['contrast'])} | "
                + ("n/a" if d["diff"] is None else f"{d['diff']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]"))
    intro = ("Self-reflection variants (`selection.self_reflection`, issue 10), computed after the runs "
             "from the stored drafts: each row's verified drafts are selected again (the product's "
             "`selection.select`, every term of log ρ on) with log ρ_SR recomputed from the stored log P(Yes), "
             "log P(No) by the product's `verification.self_reflection_score`: `paper` = log P(Yes), "
             "`contrast` = log P(Yes)/(P(Yes)+P(No)). Same drafts, same verifier log-probs; consensus "
             "fast-path rows keep their answer under both. **The default is chosen on the tuning cells only** "
             "(the speculative config on each dataset's tuning split, rows never reported), pooled over "
             "datasets; the reported speculative cells are shown and **not** used for choosing. Rows: graded "
             "(selected again; variants picking different drafts); difference contrast - paper in points "
             "[paired bootstrap 95%], McNemar p (rows right only with contrast / only with paper); AUROC of "
             "log ρ_SR alone for a verified valid draft being right (drafts (right)), rows resampled for the "
             "95% interval.")
    return variant_table(res, "self_reflection", SELF_REFLECTION_MODES, intro,
                         "verified drafts (right) | AUROC paper | AUROC contrast | AUROC contrast - paper", auroc_cells)


def rule_table(res: dict) -> list[str]:
    """:func:`variant_table` of the selection rules (``res["selection_rule"]``) with the oracle
    rows (some draft right) and the share of them each rule answers right."""
    rules = tuple(RULE_VARIANTS)
    intro = ("Selection rules (`selection.rule`), computed after the runs from the stored drafts: each row's "
             "scored drafts are selected again by the product's `selection.select` with `rule` = `argmax` "
             "(the paper's: highest log ρ), `answer_vote` (drafts grouped by normalised answer, the group with "
             "the largest Σ ρ, its best-scored draft) or `length_normalised` (highest log ρ per token); the last "
             "two are this product's extensions. Same drafts, same scores; consensus fast-path rows keep their "
             "answer under every rule. **The default is chosen on the tuning cells only**, pooled over datasets; "
             "the reported speculative cells are shown and **not** used for choosing. Differences vs argmax in "
             "points [paired bootstrap 95%], McNemar p (rows right only with the rule / only with argmax); "
             "oracle rows: some draft right; recovered: share of them the rule answers right (what selection "
             "loses).")
    return oracle_variant_table(res, "selection_rule", rules, intro)


def oracle_variant_table(res: dict, key: str, variants: Sequence[str], intro: str) -> list[str]:
    """:func:`variant_table` of ``res[key]`` with the oracle rows (some draft right) and the
    share of them each of ``variants`` answers right as its extra columns."""
    return variant_table(res, key, variants, intro,
                         "oracle rows | " + " | ".join(f"recovered {v} %" for v in variants),
                         lambda f: f"{f['n_oracle']} | " + " | ".join(_pct(f["recovered"][v]) for v in variants))


def terms_table(res: dict) -> list[str]:
    """:func:`variant_table` of the score terms (``res["score_terms"]``) with the oracle rows
    and the share of them each variant answers right."""
    terms = tuple(TERM_VARIANTS)
    intro = ("Score terms (`selection.use_draft_score`, `use_self_consistency`, `use_self_reflection`), computed "
             "after the runs from the stored drafts: each row's scored drafts are selected again by the product's "
             "`selection.select` (argmax) with every term of log ρ = log ρ_draft + log ρ_SC + log ρ_SR (`paper`, "
             "§3.3) or with one term left out (the paper's Table 3 ablations). Same drafts, same scores; consensus "
             "fast-path rows keep their answer. **The defaults are chosen on the tuning cells only**, pooled over "
             "datasets; the reported speculative cells are shown and **not** used for choosing. Differences vs "
             "paper in points [paired bootstrap 95%], McNemar p; oracle rows: some draft right; recovered: share "
             "of them each variant answers right.")
    return oracle_variant_table(res, "score_terms", terms, intro)


def verifier_table(res: dict) -> list[str]:
    """:func:`variant_table` of the verifier's part in the default selection
    (``res["verifier_terms"]``, :data:`VERIFIER_VARIANTS`) with the oracle rows, the share of
    them each variant answers right and the verified drafts per row the default needs."""
    names = tuple(VERIFIER_VARIANTS)
    intro = ("The verifier in the default selection (`selection.use_self_consistency: false` since 2026-12-04: "
             "log ρ = log ρ_draft + log ρ_SR), computed after the runs from the stored drafts: `default` against "
             "`draft_score_only` (log ρ = log ρ_draft; `use_self_reflection: false` as well, which skips the "
             "verification stage). Same drafts, same scores; consensus fast-path rows keep their answer. Chosen "
             "by the rule declared 2026-12-04 (`VERIFIER_VARIANTS`): on tuning rows not read before, "
             "`draft_score_only` when its 95% interval vs `default` lies above -2 points. Differences in points "
             "[paired bootstrap 95%], McNemar p; oracle rows: some draft right; recovered: share of them each "
             "variant answers right; verified: drafts per row the verifier scores under `default`.")
    return variant_table(res, "verifier_terms", names, intro,
                         "oracle rows | " + " | ".join(f"recovered {v} %" for v in names) + " | verified per row",
                         lambda f: f"{f['n_oracle']} | " + " | ".join(_pct(f["recovered"][v]) for v in names)
                         + (" | n/a" if f["cost"]["default"]["verifier"] is None
                            else f" | {f['cost']['default']['verifier']:.2f}"))


def nested_table(res: dict) -> list[str]:
    """:func:`variant_table` of the draft counts (``res["num_drafts"]``, :data:`NUM_DRAFTS_VARIANTS`)
    with the oracle rows and, per variant, drafts written, drafter tokens generated and verifier
    passes per row, and the rows where ``m5`` does not reproduce the run."""
    names = tuple(NUM_DRAFTS_VARIANTS)

    def cells(f):
        c = f["cost"]
        return (f"{f['n_oracle']} | " + " | ".join(_pct(f["recovered"][v]) for v in names) + " | "
                + " | ".join("n/a" if c[v]["drafts"] is None else
                             f"{c[v]['drafts']:.2f} / {c[v]['tokens']:.0f} / {c[v]['verifier']:.2f}" for v in names)
                + f" | {f['n_mismatch']}")
    intro = ("Fewer drafts (`sampling.num_drafts` m = 1..5, and `sampling.adaptive` with `first_round` 2 of 5), "
             "computed after the runs from the stored drafts of the m = 5 cells, no engine run: a run with m = j "
             "drafts the first j of the same subsets (the subset draw is a prefix, tested), each draft from its own "
             "greedy prompt, each scored by the verifier alone; the consensus fast path takes c = j, and adaptive "
             "drafting stops a row whose first 2 drafts agree. Selection by the product's `selection.select`. "
             "Differences vs m5 in points [paired bootstrap 95%], McNemar p; oracle rows: some of the 5 drafts "
             "right; recovered: share of them each variant answers right; cost per row: drafts written / drafter "
             "tokens generated / verifier passes (counts, not seconds; passes as with `verifier.deduplicate_drafts` on); "
             "m5 ≠ run: rows where m5 computed this way does not reproduce the run's own outcome (0: the re-selection "
             "is the run's; the premises for m < 5 are checked against arms that ran them, below, where present). **Chosen on the tuning cells "
             "only**; the reported cells are shown and not used for choosing.")
    lines = variant_table(res, "num_drafts", names, intro,
                          "oracle rows | " + " | ".join(f"recovered {v} %" for v in names) + " | "
                          + " | ".join(f"{v} drafts / tokens / verifier" for v in names) + " | m5 ≠ run", cells)
    checks = [(ds, arm, c) for ds, e in res["datasets"].items() for arm, c in (e.get("nested_check") or {}).items()]
    if lines and checks:
        said = {True: "same machine", False: "different machines", None: "machines unknown"}
        lines += ["", "Computed after the run vs the arm that ran it (rows both answered; engines that are not "
                  "batch-invariant may write other tokens when a call holds fewer prompts): "
                  + "; ".join(f"{ds} `{arm}`: same selected answer on {c['same_answer']} of {c['n']} rows, the same "
                              f"drafts' answers on {c['same_drafts']} ({said[c['same_machine']]})" for ds, arm, c in checks)
                  + "."]
    return lines


NON_INFERIORITY_MARGIN = 0.02
"""Declared 2026-12-03, before the selection-tuning rows ran: a variant that costs less than
its baseline (fewer drafts, :data:`NUM_DRAFTS_VARIANTS`) is chosen when the lower end of the 95%
interval of variant - baseline on the tuning rows lies above minus this margin (2 points)."""


def verdict_cheaper(figures: dict, margin: float = NON_INFERIORITY_MARGIN) -> str:
    """The cheapest variant of a :func:`nested_figures` result (fewest drafts per row, then
    fewest verifier passes) whose paired difference to the baseline has a 95% interval with
    its lower end above ``-margin`` (non-inferiority, :data:`NON_INFERIORITY_MARGIN`); the
    baseline when none has; ``not measured`` without rows."""
    if not figures["n"]:
        return "not measured"
    def cost(v):
        return figures["cost"][v]["drafts"], figures["cost"][v]["verifier"]
    base = figures["baseline"]
    ok = [v for v, c in figures["vs_baseline"].items() if c["ci95"][0] > -margin and cost(v) < cost(base)]
    return min(ok, key=cost) if ok else base


def verdict_cheaper_line(res: dict, head: str, key: str = "num_drafts", passes: str = "verifier passes") -> str:
    """The generated line on a comparison of cheaper variants (``res[key]``: ``num_drafts``,
    ``sampling.num_drafts`` / ``sampling.adaptive``; ``verifier_terms``, the verifier in the
    default selection): the variant :func:`verdict_cheaper` picks on the tuning rows pooled,
    each variant's difference to the baseline with its interval and p, its drafts and verifier
    work per row (``passes`` names that count), and n."""
    f = ((res.get(key) or {}).get("tuning") or {}).get("pooled")
    if not f or not f["n"]:
        return f"{head}): **not measured** (no graded rows of a tuning cell)."
    v, base, c = verdict_cheaper(f), f["baseline"], f["cost"]
    said = (f"**{v}** is the cheapest variant whose 95% interval vs {base} lies above "
            f"-{100 * NON_INFERIORITY_MARGIN:.0f} points" if v != base else
            f"**{base}** stays: no cheaper variant's 95% interval vs {base} lies above -{100 * NON_INFERIORITY_MARGIN:.0f} points")
    each = "; ".join(f"{x} {_pct(f['accuracy'][x])}%, {100 * d['diff']:+.1f} [{100 * d['ci95'][0]:+.1f}, "
                     f"{100 * d['ci95'][1]:+.1f}], p = {d['mcnemar']['p']:.3g}, {c[x]['drafts']:.2f} drafts and "
                     f"{c[x]['verifier']:.2f} {passes} per row" for x, d in f["vs_baseline"].items())
    return (f"{head}, pooled over {', '.join(f['datasets'])}, n = {f['n']} rows): {said} ({base} "
            f"{_pct(f['accuracy'][base])}% at {c[base]['drafts']:.2f} drafts and {c[base]['verifier']:.2f} "
            f"{passes} per row; {each}).")


ADAPTIVE_COMPARISON = f"{ONE_ROUND_ARM} - {DEFAULT_ARM}"
"""The comparison that decides ``sampling.adaptive`` under the default selection
(:func:`verdict_adaptive`): one drafting round minus adaptive drafting, on the same tuning rows."""


def verdict_adaptive(cmp: dict | None, margin: float = NON_INFERIORITY_MARGIN) -> str:
    """``sampling.adaptive`` under the default selection (log ρ_draft alone, no verifier pass)
    from :data:`ADAPTIVE_COMPARISON` (a :func:`compare_cells` result, pooled over the tuning
    rows: ``diff``/``ci95`` of accuracy one round - adaptive, ``seconds`` the ratio one round /
    adaptive over shard pairs run on one machine). The rule, declared 2026-12-04 before the
    cells that decide it ran (the verifier-tuning rows, ``decision.ADAPTIVE_TUNING_ARMS``; they
    had chosen the selection's terms, never the drafting):

    - ``"one round"`` (``sampling.adaptive: false``) when one round is shown faster (the 95%
      interval of the seconds ratio lies below 1) and not less accurate by more than ``margin``
      (the interval of the accuracy difference lies above ``-margin``,
      :data:`NON_INFERIORITY_MARGIN`, 2 points);
    - ``"adaptive"`` when adaptive drafting is shown faster (ratio interval above 1) and the
      difference's interval lies below ``+margin``;
    - when neither is shown faster: the one shown more accurate (interval excluding 0), else
      ``"adaptive"``, the default it was (it stays unless the figures choose otherwise).

    Returns ``"one round"``, ``"adaptive"``, or ``"not measured"`` (no graded paired rows, or no
    seconds on one machine)."""
    if not cmp or not cmp.get("n"):
        return "not measured"
    sec = cmp.get("seconds") or {}
    if sec.get("withheld") or not sec.get("n") or sec["ci95"][0] != sec["ci95"][0]:
        return "not measured"
    (lo, hi), (s_lo, s_hi) = cmp["ci95"], sec["ci95"]
    if s_hi < 1:
        return "one round" if lo > -margin else "adaptive"
    if s_lo > 1:
        return "adaptive" if hi < margin else "one round"
    return "one round" if lo > 0 else "adaptive"


def adaptive_split(cells: dict, choices: dict, labels: Sequence[str], *, seed: int = 0, reps: int = REPS) -> dict:
    """The figures that decide ``sampling.adaptive`` (:func:`verdict_adaptive`) from tuning
    cells: ``cells`` dataset -> {:data:`DEFAULT_ARM`: cell, :data:`ONE_ROUND_ARM`: cell} (cells as
    :func:`summarise` takes them), both arms on the same tuning rows.

    Returns ``{"datasets": {dataset: comparison}, "pooled": comparison or None, "arms":
    {dataset: {arm: {"n", "accuracy", "seconds_per_row", "fast_path" (share of rows), "drafts"
    (drafts written)}}}, "choice": str}``, each
    comparison :data:`ADAPTIVE_COMPARISON` as :func:`summarise` computes it (paired accuracy in
    fractions, McNemar's exact p, seconds ratio over one-machine shard pairs; pooled: rows
    resampled within each dataset)."""
    s = summarise(cells, choices, labels, seed=seed, reps=reps)
    key = ADAPTIVE_COMPARISON
    arms = {ds: {a: {"n": f["n"], "accuracy": f["accuracy"], "seconds_per_row": f["cost"]["s_per_row"],
                     "fast_path": f["fast_path"]["share"], "drafts": f["drafts"]["n_drafts"]}
                 for a, f in e["arms"].items() if a in (DEFAULT_ARM, ONE_ROUND_ARM)}
            for ds, e in s["datasets"].items()}
    pooled = s["pooled"]["comparisons"].get(key)
    return {"datasets": {ds: e["comparisons"][key] for ds, e in s["datasets"].items() if key in e["comparisons"]},
            "pooled": pooled, "arms": arms, "choice": verdict_adaptive(pooled)}


def verdict_adaptive_line(res: dict) -> str:
    """The generated line on ``sampling.adaptive`` under the default selection
    (``res["adaptive"]``, :func:`adaptive_split`): the choice of :func:`verdict_adaptive` with
    the pooled and per-dataset differences, intervals, p-values, seconds ratios and n."""
    head = ("- **Adaptive drafting under the default selection** (`sampling.adaptive`, log ρ_draft alone, no "
            f"verifier pass: {ONE_ROUND_ARM} vs {DEFAULT_ARM}; rule declared 2026-12-04, decided on tuning rows only")
    part = res.get("adaptive") or {}
    f = part.get("pooled")
    if not f or not f.get("n"):
        return f"{head}): **not measured** (no graded rows of both adaptive-tuning cells)."
    choice = part["choice"]
    said = {"one round": "**one round** (`sampling.adaptive: false`)", "adaptive": "**adaptive drafting** stays",
            "not measured": "**not measured** (no seconds on one machine)"}[choice]

    def fig(c):
        return (f"{_pct(c['accuracy_a'])} vs {_pct(c['accuracy_b'])}, {100 * c['diff']:+.1f} [{100 * c['ci95'][0]:+.1f}, "
                f"{100 * c['ci95'][1]:+.1f}], p = {c['mcnemar']['p']:.3g}, n = {c['n']}; seconds per row ratio "
                f"{_ratio(c.get('seconds'))}")
    each = "; ".join(f"{ds}: {fig(c)}" for ds, c in part["datasets"].items())
    return (f"{head}, pooled over {', '.join(f['datasets'])}): {said} (one round vs adaptive {fig(f)}. "
            f"Per dataset: {each}).")


def verdict_variant_line(res: dict, key: str, head: str) -> str:
    """The generated line on the default of one :data:`POST_HOC` comparison (``res[key]``):
    the variant the tuning cells favour, pooled over datasets (:func:`verdict_variant`), with
    each variant's paired difference to the baseline, its interval, McNemar's p, the rows
    where it picks another draft, the share of oracle rows each answers right, and n; "not
    measured" without tuning cells. ``head`` opens the line (its parenthesis left open)."""
    part = (res.get(key) or {}).get("tuning") or {}
    f = part.get("pooled")
    if not f or not f["n"]:
        return (f"{head}): **not measured** (no graded rows of a tuning cell; tuning cells run with the "
                "fallback arm, `--arms main,fallback`).")
    v, base = verdict_variant(f), f["baseline"]
    said = (f"the tuning cells favour **{v}**" if v in f["accuracy"] else
            f"**undecided**: the tuning cells favour neither (no 95% interval of variant - {base} lies above 0, "
            f"not all lie below; `{base}` stays)")
    each = "; ".join(
        f"{x} {_pct(f['accuracy'][x])}% vs {base} {_pct(f['accuracy'][base])}%, difference {100 * c['diff']:+.1f} "
        f"points [{100 * c['ci95'][0]:+.1f}, {100 * c['ci95'][1]:+.1f}], McNemar p = {c['mcnemar']['p']:.3g}, "
        f"{c['mcnemar']['b']} vs {c['mcnemar']['c']} discordant rows, {c['n_different']} with a different draft"
        for x, c in f["vs_baseline"].items())
    recovered = ", ".join(f"{x} {_pct(r)}%" for x, r in f["recovered"].items())
    return (f"{head}, pooled over {', '.join(part['pooled']['datasets'])}): {said} (selection accuracy {each}; "
            f"n = {f['n']} rows, {f['n_reselected']} selected again; of the {f['n_oracle']} oracle rows "
            f"answered right: {recovered}).")


def verdicts(res: dict) -> str:
    """The generated answer to "is Speculative RAG more accurate? faster?" per dataset and
    pooled (and for the product's defaults, ``speculative-default`` and
    ``speculative-default-one-round``, the large drafter ``speculative-default-large-drafter``,
    and each tuned drafter where they ran), each with its
    interval and p-value, the choice of ``sampling.adaptive`` (:func:`verdict_adaptive_line`), and
    the self-reflection variant, selection rule and score terms the tuning cells favour
    (:func:`verdict_variant_line`)."""
    out = []
    for ds, e in list(res["datasets"].items()) + [("pooled", res["pooled"])]:
        for a in ["speculative", DEFAULT_ARM, ONE_ROUND_ARM, LARGE_DRAFTER_ARM,
                  *(x for x in e["arms"] if x.startswith(TUNED_PREFIX) and not composed_parts(x))]:
            cmp = e["comparisons"].get(f"{a} - standard")
            if not cmp:
                continue
            m, sec = cmp["mcnemar"], cmp.get("seconds")
            label = a.removeprefix(TUNED_PREFIX).lstrip("-")
            who = ("Speculative RAG" if a == "speculative" else
                   "Speculative RAG with the product's defaults (adaptive drafting, log ρ_draft alone, "
                   "no verifier pass)," if a == DEFAULT_ARM else
                   "Speculative RAG with the product's defaults in one drafting round (log ρ_draft alone, no "
                   "verifier pass, `sampling.adaptive: false`)," if a == ONE_ROUND_ARM else
                   "Speculative RAG with the product's defaults in one round and the verifier's model as the "
                   "drafter (drafter size alone changed)," if a == LARGE_DRAFTER_ARM else
                   f"Speculative RAG, tuned drafter{' ' + label if label else ''},")
            line = (f"- **{ds}** ({who} vs Standard RAG, n = {cmp['n']} rows): more accurate? "
                    f"**{verdict_accuracy(cmp)}** ({_pct(cmp['accuracy_a'])} vs {_pct(cmp['accuracy_b'])}, "
                    f"difference {100 * cmp['diff']:+.1f} points [{100 * cmp['ci95'][0]:+.1f}, "
                    f"{100 * cmp['ci95'][1]:+.1f}], McNemar p = {m['p']:.3g}, {m['b']} vs {m['c']} discordant rows).")
            if cmp.get("dtypes_differ"):
                line += f" **Caution: {cmp['dtypes_differ']['note']}**."
            if sec and sec.get("withheld"):
                line += (f" Faster? **{verdict_speed(sec)}**: {a} ran on {_machines(sec['machines_a'])}, "
                         f"standard on {_machines(sec['machines_b'])}.")
            elif sec:
                line += (f" Faster? **{verdict_speed(sec)}** (seconds per row ratio {_ratio(sec)}, "
                         f"sign test over shards p = {sec['p_sign']:.3g}).")
            out.append(line)
    out.append(verdict_variant_line(res, "self_reflection", "- **Self-reflection variant** "
                                    "(`selection.self_reflection`, chosen on the tuning cells only"))
    out.append(verdict_variant_line(res, "selection_rule", "- **Selection rule** (`selection.rule`, chosen on "
                                    "the tuning cells only"))
    out.append(verdict_variant_line(res, "score_terms", "- **Score terms** (`selection.use_draft_score`, "
                                    "`use_self_consistency`, `use_self_reflection`, chosen on the tuning cells only"))
    out.append(verdict_cheaper_line(res, "- **Drafts per row** (`sampling.num_drafts` 1-5 and `sampling.adaptive`, "
                                    "computed after the runs, chosen on the tuning cells only by the declared "
                                    "non-inferiority rule"))
    out.append(verdict_cheaper_line(res, "- **The verifier in the default selection** (`draft_score_only` = "
                                    "`selection.use_self_reflection: false` beside the default "
                                    "`use_self_consistency: false`: no verifier pass; declared 2026-12-04, "
                                    "decided only on tuning rows not read before", key="verifier_terms",
                                    passes="verified drafts"))
    out.append(verdict_adaptive_line(res))
    return "\n".join(out) + "\n"
