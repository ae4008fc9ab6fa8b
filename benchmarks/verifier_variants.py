"""Verifier-only re-scoring of the decision benchmark's stored drafts under variants of the
verifier's input (no drafter run, one verifier engine).

Why: benchmarks/selection_diagnosis.md found that, with the 1.5B verifier of
``configs/bench.yaml``, Speculative RAG's selection score log ρ = log ρ_draft + log ρ_SC +
log ρ_SR (paper §3.3) is a length and label prior: log ρ_SC = log P(α, β | Q) is a sum over
tokens that rewards short drafts and rationales restating Q, and ρ_SR's P("Yes") after the
paper's R ("Do you think the explanation supports the answers? (Yes or No)") follows the
claim label word "supports", not draft quality. Within a row, no term separates right from
wrong drafts (AUROC near 0.5). That note's "What to measure next" asks for this pass.

Each valid, verified draft of the tuning cells (``climate_fever/tuning``, ``hotpotqa/tuning``
under ``--runs``) is scored in one forward pass per variant (prompt log-probs and the next
token's top-k, as :func:`specrag_batch.stages.verification.verify`), with inputs built by the
product's :func:`specrag_batch.stages.prompts.verifier_prompt` (data text stays plain text, never a
special token) and terms read by :func:`specrag_batch.stages.verification.prompt_scores`:

* ``paper``: the product's verifier input [Q, α, β, R] (``Answer: α\\nRationale: β``, the
  config's R). Reproduces the stored log ρ_SC and log ρ_SR; the largest absolute
  difference is printed and stored as a sanity check (float noise of the batch only).
* ``rationale_first``: the same turn with β before α (``Rationale: β\\nAnswer: α``, the order
  the drafter writes them), paper R. Its terms are log P(β | Q) and log P(α | Q, β), stored
  separately: the second is the verifier's belief in the answer given the rationale, not a
  length prior on β (for claims a 2-4-token label choice). Their sum is again a
  log P(α, β | Q), so its log ρ keeps the paper's form.
* ``neutral_reflection``: the paper's input with R replaced by :data:`NEUTRAL_REFLECTION`
  ("Is the proposed answer correct? (Yes or No)"), which avoids the label words ("supports",
  "refutes") and the task's verb. log ρ_SR = log P(Yes) at the same next-token position, as
  ``selection.self_reflection: paper`` reads it.

Each variant's log ρ adds the stored log ρ_draft (the drafter's, which no verifier pass
changes) to its own log ρ_SC and log ρ_SR. Output: the within-row AUROC (right vs wrong drafts
of the same row, ties 1/2; :func:`decision_stats.selection_diagnosis_auroc`) and the pooled
AUROC of each term and of log ρ, per dataset and pooled (bootstrap over rows, stratified by
dataset), and the selection accuracy when each variant's log ρ picks by argmax
(:func:`specrag_batch.stages.selection.select`) against the stored pick (the run's paper argmax;
consensus fast-path rows keep their outcome), with a paired bootstrap interval and McNemar's
exact p (:func:`decision_stats.variant_figures`). Markdown on stdout and in
``<out>/verifier_variants.md``, figures in ``<out>/verifier_variants.json``.

Run (one verifier engine, nothing else running: 3 x 138 = 414 verifier passes, ~25 min on 2
CPU cores at the reported cell's ~3.8 s per verified draft, plus ~1 min engine load;
``--limit-drafts 10`` is a ~2 min check)::

    python benchmarks/verifier_variants.py --config configs/bench.yaml --out /tmp/vv
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import decision_stats as ds  # noqa: E402

from specrag_batch.stages.prompts import Question, verifier_prompt  # noqa: E402
from specrag_batch.core.records import Draft  # noqa: E402
from specrag_batch.stages.selection import select  # noqa: E402
from specrag_batch.stages.verification import prompt_scores, word_token_ids  # noqa: E402

CELLS = ("climate_fever/tuning", "hotpotqa/tuning")
"""The decision benchmark's tuning cells (choices are made on them only)."""

NEUTRAL_REFLECTION = "Is the proposed answer correct? (Yes or No)"
"""R without the claim labels' words (``neutral_reflection``; selection_diagnosis.md §3)."""

VARIANTS = {"paper": ("answer_first", None), "rationale_first": ("rationale_first", None),
            "neutral_reflection": ("answer_first", NEUTRAL_REFLECTION)}
"""Variant -> (``order`` of :func:`verifier_prompt`, R; None = the config's R)."""

MEASURES = ("draft",
            "paper:self_consistency", "paper:self_reflection", "paper:log_rho",
            "rationale_first:rationale", "rationale_first:answer_given_rationale",
            "rationale_first:self_consistency", "rationale_first:self_reflection", "rationale_first:log_rho",
            "neutral_reflection:self_reflection", "neutral_reflection:log_rho")
"""Per-draft measures whose AUROC is reported (natural log-probs; higher = looks better)."""

SELECTIONS = ("paper", "rationale_first", "neutral_reflection")
"""Variants whose log ρ re-selects each row (argmax); compared with the stored pick."""

BATCH = 32
"""Prompts per engine call (progress granularity; each prompt is one forward pass)."""


def load_cell(runs: Path, cell: str) -> list[dict]:
    """Output rows of a cell's finished shards (``runs/<cell>/part-*.parquet``).

    Raises:
        SystemExit: the cell has no shard."""
    import pyarrow.parquet as pq

    files = sorted((runs / cell).glob("part-*.parquet"))
    if not files:
        raise SystemExit(f"{runs / cell}: no part-*.parquet (run the decision benchmark's tuning cells first)")
    return [r for f in files for r in pq.read_table(f).to_pylist()]


def build_jobs(units_by_cell: dict[str, list[dict]], rows_by_cell: dict[str, list[dict]], tokenizer,
               labels: Sequence[str], reflection_question: str, limit: int | None = None) -> list[dict]:
    """One job per (verified valid draft, variant): ``{"cell", "query_id", "index" (into the
    row's drafts), "variant", "prompt"}`` (:class:`~specrag_batch.stages.prompts.VerifierPrompt`),
    for the drafts of :func:`decision_stats.selection_diagnosis_rows` units, the first
    ``limit`` drafts only when given. The question block is the row's, as the verification
    stage builds it (claim labels of the config; QA and claim rows have no choices).

    Raises:
        ValueError: a row of task ``choice`` (its options are not in the output rows)."""
    jobs, n = [], 0
    for cell, units in units_by_cell.items():
        rows = {r["query_id"]: r for r in rows_by_cell[cell]}
        for u in units:
            r = rows[u["query_id"]]
            if u["drafts"] and r["task"] == "choice":
                raise ValueError(f"{cell} row {r['query_id']}: task 'choice' needs the input's options")
            q = Question(r["task"], r["query"], None, tuple(labels))
            for *_, i in u["drafts"]:
                if limit is not None and n >= limit:
                    return jobs
                d = Draft.from_record(r["drafts"][i])
                for v, (order, rq) in VARIANTS.items():
                    jobs.append({"cell": cell, "query_id": r["query_id"], "index": i, "variant": v,
                                 "prompt": verifier_prompt(tokenizer, q, d.written_answer or d.answer, d.rationale,
                                                           rq or reflection_question, order)})
                n += 1
    return jobs


def score_jobs(engine, jobs: list[dict], batch: int = BATCH) -> None:
    """Fill each job's ``answer``, ``rationale`` (summed log-probs of α's / β's tokens),
    ``self_reflection`` (log P(Yes), ``paper`` mode), ``logprob_no`` and ``flags`` from one
    forward pass per job (:func:`~specrag_batch.stages.verification.prompt_scores`), ``batch``
    prompts per engine call, with a progress bar."""
    from tqdm import tqdm

    yes_ids, no_ids = word_token_ids(engine.tokenizer, "yes"), word_token_ids(engine.tokenizer, "no")
    with tqdm(total=len(jobs), desc="verifier passes") as bar:
        for s in range(0, len(jobs), batch):
            chunk = jobs[s:s + batch]
            outs = engine.prompt_and_next_logprobs([j["prompt"].token_ids for j in chunk], sorted(yes_ids | no_ids),
                                                   desc="verifier variants")
            for j, (lps, top) in zip(chunk, outs):
                a, b, sr, _, no, flags = prompt_scores(j["prompt"], lps, top, yes_ids, no_ids, "paper")
                j.update(answer=a, rationale=b, self_reflection=sr, logprob_no=no, flags=flags)
            bar.update(len(chunk))


def draft_variant_measures(stored: dict, scored: dict[str, dict]) -> tuple[float, ...] | None:
    """:data:`MEASURES` of one draft from its stored record (log ρ_draft) and its jobs by
    variant; None when a variant's pass is missing or gave no log P(Yes)."""
    if any(v not in scored or scored[v]["self_reflection"] is None for v in VARIANTS):
        return None
    dr = float(stored["score_draft"])
    p, rf, nr = scored["paper"], scored["rationale_first"], scored["neutral_reflection"]
    p_sc, rf_sc = p["answer"] + p["rationale"], rf["answer"] + rf["rationale"]
    return (dr, p_sc, p["self_reflection"], dr + p_sc + p["self_reflection"],
            rf["rationale"], rf["answer"], rf_sc, rf["self_reflection"], dr + rf_sc + rf["self_reflection"],
            nr["self_reflection"], dr + p_sc + nr["self_reflection"])


def variant_units(units: list[dict], rows: list[dict], scored: dict[tuple, dict[str, dict]],
                  labels: Sequence[str]) -> list[dict]:
    """Per :func:`decision_stats.selection_diagnosis_rows` unit, a unit for
    :func:`decision_stats.selection_diagnosis_auroc` (``drafts``: [(:data:`MEASURES`, right,
    answer, index)] of the drafts scored under every variant) and for
    :func:`decision_stats.variant_figures` (``stored``: the row's outcome under its stored
    pick; per :data:`SELECTIONS` name: correctness of the draft the variant's log ρ picks by
    :func:`~specrag_batch.stages.selection.select`, argmax; drafts without that variant's scores rank
    after scored ones, as in a run; rows not selected again keep their outcome)."""
    by_id = {r["query_id"]: r for r in rows}
    out = []
    for u in units:
        r, drafts, picked = by_id[u["query_id"]], [], {"stored": u["picked"]["paper"]}
        right = ds.draft_correct(r, None, labels)
        for _, ok, answer, i in u["drafts"]:
            m = draft_variant_measures(r["drafts"][i], scored.get((u["query_id"], i), {}))
            if m is not None:
                drafts.append((m, ok, answer, i))
        res = {"query_id": u["query_id"], "stored": u["paper"], "oracle": u["oracle"],
               "reselected": u["reselected"], "drafts": drafts}
        for v in SELECTIONS:
            if not u["reselected"]:
                picked[v], res[v] = None, u["paper"]
                continue
            objs = []
            for i, rec in enumerate(r["drafts"]):
                d = Draft.from_record(rec)
                s = scored.get((u["query_id"], i), {}).get(v)
                d.score_self_consistency = None if s is None else s["answer"] + s["rationale"]
                d.score_self_reflection = None if s is None else s["self_reflection"]
                objs.append(d)
            picked[v] = select(objs).index
            res[v] = right[picked[v]]
        res["picked"], res["different"] = picked, len(set(picked.values())) > 1
        out.append(res)
    return out


def paper_check(rows_by_cell: dict[str, list[dict]], jobs: list[dict]) -> dict:
    """Largest absolute difference (nats) between the ``paper`` variant's log ρ_SC / log ρ_SR
    and the stored ones, over the drafts scored (float noise of a batch only)."""
    rows = {(c, r["query_id"]): r for c, rs in rows_by_cell.items() for r in rs}
    sc, sr = [], []
    for j in jobs:
        if j["variant"] != "paper":
            continue
        d = rows[(j["cell"], j["query_id"])]["drafts"][j["index"]]
        sc.append(abs(j["answer"] + j["rationale"] - d["score_self_consistency"]))
        if j["self_reflection"] is not None and d.get("logprob_yes") is not None:
            sr.append(abs(j["self_reflection"] - d["logprob_yes"]))
    return {"n": len(sc), "max_abs_diff_self_consistency": max(sc, default=math.nan),
            "max_abs_diff_self_reflection": max(sr, default=math.nan)}


def figures(units_by_cell: dict[str, list[dict]], *, reps: int = ds.REPS) -> dict:
    """AUROC (:func:`decision_stats.selection_diagnosis_auroc` over :data:`MEASURES`) and
    selection accuracy (:func:`decision_stats.variant_figures`, baseline ``stored``) per cell
    and pooled (bootstrap stratified by cell)."""
    groups = dict(units_by_cell)
    pooled = [u for us in units_by_cell.values() for u in us]
    strata = [c for c, us in units_by_cell.items() for _ in us]
    groups["pooled"] = pooled
    out = {}
    for name, units in groups.items():
        st = strata if name == "pooled" else None
        out[name] = {"auroc": ds.selection_diagnosis_auroc(units, reps=reps, strata=st, measures=MEASURES),
                     "selection": ds.variant_figures(units, ("stored", *SELECTIONS), reps=reps, strata=st)}
    return out


def table(res: dict, check: dict) -> str:
    """Markdown: the paper check, within-row / pooled AUROC per measure, selection accuracy."""
    cols = list(res)
    lines = [f"Paper variant vs stored scores over {check['n']} drafts: max |Δ log ρ_SC| = "
             f"{check['max_abs_diff_self_consistency']:.3g} nats, max |Δ log ρ_SR| = "
             f"{check['max_abs_diff_self_reflection']:.3g} nats.", "",
             "AUROC, right vs wrong verified drafts: within row / pooled [95% bootstrap over rows]", "",
             "| measure | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    a0 = {c: res[c]["auroc"] for c in cols}
    lines.append("| drafts (right); mixed rows (pairs) | " + " | ".join(
        f"{a0[c]['n_drafts']} ({a0[c]['n_right']}); {a0[c]['n_mixed_rows']} ({a0[c]['n_pairs']})" for c in cols) + " |")
    for m in MEASURES:
        lines.append(f"| {m} | " + " | ".join(
            f"{ds._auroc(a0[c][m]['within_row'])} / {ds._auroc(a0[c][m]['pooled'])}" for c in cols) + " |")
    lines += ["", "Selection accuracy (%), argmax of each variant's log ρ; difference vs the stored pick "
              "[paired bootstrap 95%], McNemar p (b/c)", "",
              "| selection | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for v in ("stored", *SELECTIONS):
        cells = []
        for c in cols:
            f = res[c]["selection"]
            cells.append(ds._pct(f["accuracy"][v]) + ("" if v == "stored" else f" ({ds._diff(f['vs_baseline'][v])})"))
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="the decision benchmark's config (its verifier is loaded)")
    ap.add_argument("--out", required=True, type=Path, help="directory for verifier_variants.{md,json}")
    ap.add_argument("--runs", type=Path, default=Path(__file__).resolve().parent / "runs",
                    help="the decision benchmark's runs directory (read only)")
    ap.add_argument("--limit-drafts", type=int, default=None, help="score only the first N drafts (a quick check)")
    ap.add_argument("--reps", type=int, default=ds.REPS, help="bootstrap resamples")
    args = ap.parse_args(argv)

    from specrag_batch.config import load_config
    from specrag_batch.engines.engine import get_engine

    cfg = load_config(args.config)
    if cfg.verifier is None:
        raise SystemExit(f"{args.config}: no verifier configured")
    rows_by_cell = {c: load_cell(args.runs, c) for c in CELLS}
    units = {c: ds.selection_diagnosis_rows(rows, {}, cfg.claim_labels, seed=cfg.seed)
             for c, rows in rows_by_cell.items()}
    engine = get_engine(cfg.verifier, cfg.seed)
    jobs = build_jobs(units, rows_by_cell, engine.tokenizer, cfg.claim_labels, cfg.reflection_question,
                      args.limit_drafts)
    too_long = [j for j in jobs if len(j["prompt"].token_ids) > cfg.verifier.max_model_len - 1]
    if too_long:
        raise SystemExit(f"{len(too_long)} verifier inputs exceed max_model_len {cfg.verifier.max_model_len}")
    print(f"{len(jobs) // len(VARIANTS)} drafts x {len(VARIANTS)} variants = {len(jobs)} verifier passes",
          file=sys.stderr)
    score_jobs(engine, jobs)
    scored: dict[tuple, dict[str, dict]] = {}
    for j in jobs:
        scored.setdefault((j["query_id"], j["index"]), {})[j["variant"]] = j
    vunits = {c: variant_units(units[c], rows_by_cell[c], scored, cfg.claim_labels) for c in CELLS}
    check = paper_check(rows_by_cell, jobs)
    res = figures(vunits, reps=args.reps)
    md = table(res, check)
    print(md)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "verifier_variants.md").write_text(md)
    per_draft = [{k: j[k] for k in ("cell", "query_id", "index", "variant", "answer", "rationale",
                                    "self_reflection", "logprob_no", "flags")} for j in jobs]
    (args.out / "verifier_variants.json").write_text(json.dumps(
        {"config": args.config, "verifier": cfg.verifier.model, "neutral_reflection": NEUTRAL_REFLECTION,
         "paper_check": check, "figures": res, "drafts": per_draft}, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
