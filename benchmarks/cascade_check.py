"""Does ``specrag-batch calibrate --fallback-run`` predict a real cascade? (issue 39 item 3)

``calibrate --fallback-run`` (``specrag_batch.confidence.cascade``) PREDICTS the accuracy and seconds per
row of re-answering the least-confident rows of a Speculative RAG run with Standard RAG, from a
speculative run and a Standard RAG run over the same rows. The decision benchmark holds REAL
cascade runs: per dataset, the cell ``fallback_standard`` (``selection.fallback: standard``,
τ_min calibrated on the dataset's tuning cell) beside ``speculative`` (fallback off) and
``standard``, same rows. For each dataset this script

* checks the pair with the product's ``cascade.check_runs`` (the Standard RAG cell must answer
  as the fallback would) and compares the standard-answer hash of the fallback cell's config;
* computes the frontier with ``cascade.frontier`` (the run's confidence measure, seconds per
  row from the cells' done markers: ``manifest.output_cost`` -> ``cascade.seconds_per_row``)
  and takes its point at the share the real run re-answered (most rows not above it, as
  ``cascade.table_points``) and its point at the real run's τ_min;
* pairs the predicted outcome of every row with the real run's (``decision_stats``: paired
  bootstrap, McNemar), says which rows each re-answered and why each differing row differs
  (re-answered by one only; Standard RAG's or the first pass's answer not reproduced);
* compares seconds per row: predicted (spec + share x standard) vs the real cell's shard
  seconds, each over Standard RAG's, the real ratio with a bootstrap over shard pairs, and the
  real cell's fallback stage vs the share x standard term.

Run (no engine; restore the cells first, into a scratch runs dir)::

    .venv/bin/python benchmarks/decision.py --config configs/bench.yaml --analyse-only \\
        --machine d2c7dd01bb0b --arms standard,speculative,fallback_standard \\
        --datasets hotpotqa,nq_open --runs /tmp/runs-cascade --out /tmp/cascade-analyse
    .venv/bin/python benchmarks/cascade_check.py --runs /tmp/runs-cascade

Prints a markdown table; writes ``<out>.md`` and ``<out>.json`` (default
``benchmarks/cascade_check``). Test: ``benchmarks/tests/test_cascade_check.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import decision  # noqa: E402
import decision_stats  # noqa: E402
from specrag_batch.confidence import cascade
from specrag_batch.core import storage  # noqa: E402
from specrag_batch.confidence.calibration import always_kept, graded_rows, measure_values, used_confidence  # noqa: E402
from specrag_batch.run.manifest import output_cost  # noqa: E402
from specrag_batch.run.report import load_rows  # noqa: E402

ARMS = ("speculative", "standard", "fallback_standard")


def plan(runs: Path, config: Path, datasets: list[str]) -> dict[str, dict[str, decision.Cell]]:
    """dataset -> arm -> cell, as ``decision.py`` plans them (τ_min from each tuning cell)."""
    base = decision.load_config(config)
    kw = dict(tuned_drafter=None, ablation_datasets=[], ablation_input={})
    first, _ = decision.plan_cells(datasets, list(ARMS), base, runs, **kw)
    tau = {d: c["tau_min"] for d, c in decision.calibrate_all(first).items()}
    cells, _ = decision.plan_cells(datasets, list(ARMS), base, runs, tau_min=tau, **kw)
    out: dict = {}
    for c in cells:
        if c.arm in ARMS:
            out.setdefault(c.dataset, {})[c.arm] = c
    return {d: v for d, v in out.items() if len(v) == len(ARMS)}


def _read(cell: decision.Cell):
    """(report rows by the product's reader, done-marker results) of a cell; refuses a cell whose
    listed shards are not exactly the ones finished under its config hash."""
    got = decision.load_cell(cell)
    if got is None:
        raise FileNotFoundError(f"{cell.name}: no finished shard under {cell.output_dir}")
    data = load_rows(str(cell.output_dir))
    done = {storage.normalize_uri(o) for _, o, d in decision.cell_shards(cell) if d is not None}
    if {storage.normalize_uri(u) for u in data.shards} != done:
        raise ValueError(f"{cell.name}: shards of another config under {cell.output_dir}")
    return data, got["shards"]


def _spr(shards) -> float | None:
    return cascade.seconds_per_row(output_cost(shards))


def _reason(r: dict, pred: bool, real: bool, tau_pred: float | None, tau_real: float | None) -> str:
    if pred and not real:
        return (f"re-answered by the prediction only: speculative cell's score {_f(r['score'])} < frontier τ "
                f"{_f(tau_pred)}; the real first pass kept it (score there {_f(r['fb_score'])})")
    if real and not pred:
        return (f"re-answered by the real run only: speculative cell's score {_f(r['score'])} is not below τ_min "
                f"{_f(tau_real)} (its first-pass score is not archived)")
    if real:
        return (f"Standard RAG answer not reproduced: {r['std_answer']!r} in the Standard RAG cell, "
                f"{r['fb_answer']!r} in the fallback pass" if r["std_answer"] != r["fb_answer"]
                else "same Standard RAG answer, graded differently")
    return (f"Speculative RAG answer not reproduced: {r['answer']!r} in the speculative cell, {r['first']!r} in "
            "the real first pass" if r["answer"] != r["first"] else "same first answer, graded differently")


def compare(cells: dict[str, decision.Cell], *, reps: int = decision_stats.REPS, seed: int = 0) -> dict:
    """The prediction of ``cascade`` for one dataset's ``speculative`` + ``standard`` cells
    against its ``fallback_standard`` cell (``cells``: arm -> cell). Fractions, seconds per row."""
    sp, st, fb = (cells[a] for a in ARMS)
    cfg = {a: c.config.model_dump(mode="json") for a, c in cells.items()}
    cascade.check_runs(cfg["speculative"], cfg["standard"], sp.name, st.name)
    fb_same = cascade.standard_hash(cfg["fallback_standard"]) == cascade.standard_hash(cfg["standard"])
    (S, s_sh), (T, t_sh), (F, f_sh) = _read(sp), _read(st), _read(fb)
    column = used_confidence(cfg["speculative"])[0]
    f = cascade.frontier(S.rows, T.rows, column=column, spec_seconds=_spr(s_sh), std_seconds=_spr(t_sh))
    taus = {fb.config.selection.tau_for(t) for t in f.tasks}
    tau_real = taus.pop() if len(taus) == 1 else None
    # the shared graded rows, as cascade.frontier joins them, with the real run's rows
    g = graded_rows(S.rows).join(graded_rows(T.rows).select(
        "query_id", pl.col("correct").alias("std_correct"), pl.col("answer").alias("std_answer")), on="query_id")
    firsts = pl.concat([pl.from_arrow(storage.read_parquet(u).select(["query_id", "first_answer"])) for u in F.shards])
    h = graded_rows(F.rows).join(firsts, on="query_id", how="left").select(
        "query_id", pl.col("answer").alias("fb_answer"), pl.col("correct").alias("fb_correct"),
        pl.col("score").alias("fb_score"), pl.col("low_confidence").fill_null(False).alias("flagged"),
        pl.col("answer_source").fill_null("").str.starts_with("fallback").alias("real"),
        pl.when(pl.col("answer_source").fill_null("").str.starts_with("fallback")).then(pl.col("first_answer"))
        .otherwise(pl.col("answer")).alias("first"))
    conf, always = measure_values(g, column), always_kept(g, column)
    ok, alt = g["correct"].to_numpy().astype(bool), g["std_correct"].to_numpy().astype(bool)
    k_real = int(g.join(h, on="query_id")["real"].sum())
    at_share = [p for p in f.points if p.kind != "standard" and p.reanswered <= k_real][-1]
    at_tau = None  # the point re-answering the rows below τ_min: its τ is the least confidence at or above it
    if tau_real is not None:
        above = conf[~always & np.isfinite(conf) & (conf >= tau_real)]
        v = float(above.min()) if len(above) else (1.0 if column == "confidence" else 0.0)
        at_tau = next((p for p in f.points if p.kind == "cascade" and p.tau == v), f.points[0])
    pred = np.zeros(g.height, bool) if at_share.tau is None else \
        ~always & ~(np.isfinite(conf) & (conf >= at_share.tau))
    if int(pred.sum()) != at_share.reanswered or not math.isclose(np.where(pred, alt, ok).mean(), at_share.accuracy):
        raise AssertionError("the predicted rows do not reproduce cascade.frontier's point")  # the rule drifted
    g = g.with_columns(pred=pl.Series(pred), pred_correct=pl.Series(np.where(pred, alt, ok)))
    both = g.join(h, on="query_id")  # rows graded in all three cells
    pc, rc = both["pred_correct"].to_list(), both["fb_correct"].to_list()
    p, r = both["pred"].to_numpy(), both["real"].to_numpy()
    rows = both.to_dicts()
    differ = [{"query_id": x["query_id"], "predicted": x["pred_correct"], "real": x["fb_correct"],
               "reason": _reason(x, x["pred"], x["real"], at_share.tau, tau_real)}
              for x in rows if x["pred_correct"] != x["fb_correct"]]
    kept = [x for x in rows if not x["real"]]
    stage = sum(float((s.get("stage_seconds") or {}).get("fallback", 0.0)) for s in f_sh)
    n_fb = max(sum(int(s.get("rows_out") or 0) for s in f_sh), 1)
    theirs = {s["name"]: s for s in t_sh}
    pairs = [(float(s["seconds"]), float(theirs[s["name"]]["seconds"])) for s in f_sh
             if s["name"] in theirs and theirs[s["name"]].get("rows_out") == s.get("rows_out")]
    real_spr, std_spr = _spr(f_sh), f.std_seconds
    machines = sorted({str((s.get("machine") or {}).get("id")) for sh in (s_sh, t_sh, f_sh) for s in sh})
    return {
        "cells": {a: {"config_hash": cells[a].config.config_hash(), "shards": len(sh)}
                  for a, sh in zip(ARMS, (s_sh, t_sh, f_sh))},
        "confidence": column, "standard_hash": cascade.standard_hash(cfg["standard"]),
        "fallback_answers_as_standard_cell": fb_same, "tau_min": tau_real, "machines": machines,
        "n": len(rows), "n_frontier": f.n, "speculative_alone": f.points[0].accuracy,
        "standard_alone": f.points[-1].accuracy,
        "real": {"reanswered": int(r.sum()), "flagged": int(both["flagged"].sum()), "share": float(r.mean()),
                 "accuracy": float(np.mean(rc)), "s_per_row": real_spr,
                 "ratio_to_standard": real_spr / std_spr if real_spr and std_spr else None,
                 "ratio_shards": decision_stats.ratio_bootstrap([a for a, _ in pairs], [b for _, b in pairs],
                                                                reps=reps, seed=seed),
                 "fallback_stage_s_per_row": stage / n_fb,
                 "first_pass_s_per_row": real_spr - stage / n_fb if real_spr else None,
                 "fallback_stage_s_per_reanswered_row": stage / r.sum() if r.sum() else None},
        "predicted": {"reanswered": int(p.sum()), "share": at_share.share, "tau": at_share.tau,
                      "accuracy": float(np.mean(pc)), "frontier_accuracy": at_share.accuracy,
                      "s_per_row": at_share.seconds,
                      "ratio_to_standard": at_share.seconds / std_spr if at_share.seconds and std_spr else None,
                      "fallback_term_s_per_row": at_share.share * std_spr if std_spr else None,
                      "spec_s_per_row": f.spec_seconds, "std_s_per_row": std_spr},
        "at_tau_min": None if at_tau is None else {"reanswered": at_tau.reanswered, "tau": at_tau.tau,
                                                   "accuracy": at_tau.accuracy, "s_per_row": at_tau.seconds,
                                                   "same_as_at_share": at_tau is at_share},
        "rows_reanswered": {"both": int((p & r).sum()), "predicted_only": sorted(both.filter(pl.Series(p & ~r))
                                                                                 ["query_id"].to_list()),
                            "real_only": sorted(both.filter(pl.Series(r & ~p))["query_id"].to_list()),
                            "neither": int((~p & ~r).sum())},
        "paired": {**decision_stats.paired_bootstrap(rc, pc, reps=reps, seed=seed),
                   "mcnemar": decision_stats.mcnemar_exact(rc, pc)},
        "reproduced": {
            "first_answer": sum(x["first"] == x["answer"] for x in rows), "of": len(rows),
            "score_not_reanswered": sum(x["fb_score"] == x["score"] for x in kept), "of_not_reanswered": len(kept),
            "standard_answer": sum(x["fb_answer"] == x["std_answer"] for x in rows if x["real"]),
            "of_reanswered": int(r.sum()),
            "standard_answer_differs": [{k: x[k] for k in ("query_id", "std_answer", "fb_answer", "std_correct",
                                                            "fb_correct")} for x in rows
                                        if x["real"] and x["fb_answer"] != x["std_answer"]]},
        "differing_rows": differ,
    }


def _f(x, spec="{:.2f}") -> str:
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else spec.format(x)


def markdown(res: dict) -> str:
    out = ["# Cascade frontier vs a real cascade run (`benchmarks/cascade_check.py`; issue 39 item 3)", "",
           f"Cells of `decision.py` (machine(s) {', '.join(res['machines'])}), same rows. Predicted: "
           "`specrag_batch.confidence.cascade.frontier` on the `speculative` and `standard` cells, at the share the real run "
           "re-answered. Real: the `fallback_standard` cell. Seconds: shard seconds of the done markers per row; "
           "ratio = / Standard RAG alone. Real - predicted: paired difference [bootstrap 95%], McNemar p "
           "(rows right only in the real run / only in the prediction).", "",
           "| dataset | rows | τ_min | re-answered real (predicted) | same rows | accuracy predicted | accuracy real "
           "| real - predicted | s/row predicted (ratio) | s/row real (ratio, shard 95%) "
           "| spec alone / standard alone |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for ds, d in res["datasets"].items():
        r, p, m = d["real"], d["predicted"], d["paired"]["mcnemar"]
        same = not d["rows_reanswered"]["predicted_only"] and not d["rows_reanswered"]["real_only"]
        ci = r["ratio_shards"]["ci95"]
        out.append(f"| {ds} | {d['n']} | {_f(d['tau_min'])} | {r['reanswered']} ({p['reanswered']}) | "
                   f"{'yes' if same else 'no'} | {100 * p['accuracy']:.1f} | {100 * r['accuracy']:.1f} | "
                   f"{100 * d['paired']['diff']:+.1f} [{100 * d['paired']['ci95'][0]:+.1f}, "
                   f"{100 * d['paired']['ci95'][1]:+.1f}], p = {m['p']:.3g} ({m['b']}/{m['c']}) | "
                   f"{_f(p['s_per_row'])} ({_f(p['ratio_to_standard'])}x) | {_f(r['s_per_row'])} "
                   f"({_f(r['ratio_to_standard'])}x, [{_f(ci[0])}, {_f(ci[1])}]) | "
                   f"{100 * d['speculative_alone']:.1f} / {100 * d['standard_alone']:.1f} |")
    out.append("")
    for ds, d in res["datasets"].items():
        r, p, q, w = d["real"], d["predicted"], d["reproduced"], d["rows_reanswered"]
        t = d["at_tau_min"]
        out += [f"**{ds}.** The fallback cell's config {'has' if d['fallback_answers_as_standard_cell'] else 'has NOT'}"
                f" the Standard RAG cell's standard-answer hash ({d['standard_hash']}); confidence "
                f"`{d['confidence']}`. Re-answered: "
                f"{w['both']} rows by both, {len(w['predicted_only'])} by the prediction only, "
                f"{len(w['real_only'])} by the real run only, {w['neither']} by neither"
                + ("" if t is None else f"; the frontier's point at τ_min re-answers {t['reanswered']} rows "
                   f"({'the same point' if t['same_as_at_share'] else 'another point'})") + ". Reproduced: first "
                f"answers {q['first_answer']}/{q['of']}, scores of rows not re-answered {q['score_not_reanswered']}/"
                f"{q['of_not_reanswered']}, Standard RAG answers of re-answered rows {q['standard_answer']}/"
                f"{q['of_reanswered']}. Seconds per row: predicted {_f(p['spec_s_per_row'])} (speculative cell) + "
                f"{_f(p['fallback_term_s_per_row'])} (share x Standard RAG's {_f(p['std_s_per_row'])}); real "
                f"{_f(r['first_pass_s_per_row'])} (first pass) + {_f(r['fallback_stage_s_per_row'])} (fallback "
                f"stage; {_f(r['fallback_stage_s_per_reanswered_row'])} per re-answered row); real - predicted "
                f"{r['s_per_row'] - p['s_per_row']:+.2f} s/row ({r['s_per_row'] / p['s_per_row'] - 1:+.1%}).", ""]
        if q["standard_answer_differs"]:
            out += ["Standard RAG answers of the fallback pass that differ from the Standard RAG cell's (the pass "
                    "answers a shard's flagged rows in one chunk, the cell all its rows: most likely the other batch, "
                    "as vLLM has no batch-invariant mode on CPU; README, \"Batch invariance\"): " + "; ".join(
                        f"`{x['query_id']}` {x['std_answer'][:40]!r} ({'right' if x['std_correct'] else 'wrong'}) -> "
                        f"{x['fb_answer'][:40]!r} ({'right' if x['fb_correct'] else 'wrong'})"
                        for x in q["standard_answer_differs"]) + ".", ""]
        out += [f"- `{x['query_id']}` (predicted {'right' if x['predicted'] else 'wrong'}, real "
                f"{'right' if x['real'] else 'wrong'}): {x['reason']}" for x in d["differing_rows"]]
        out += [""] if d["differing_rows"] else []
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=Path, required=True, help="decision.py's --runs (cells restored)")
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "bench.yaml", help="decision.py's --config")
    ap.add_argument("--datasets", default="hotpotqa,nq_open")
    ap.add_argument("--reps", type=int, default=decision_stats.REPS, help="bootstrap resamples")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "cascade_check", help="<out>.md, <out>.json")
    a = ap.parse_args(argv)
    cells = plan(a.runs, a.config, [d.strip() for d in a.datasets.split(",") if d.strip()])
    if not cells:
        print(f"[cascade_check] no dataset under {a.runs} has all of {', '.join(ARMS)}", file=sys.stderr)
        return 1
    per = {ds: compare(c, reps=a.reps) for ds, c in cells.items()}
    res = {"datasets": per, "machines": sorted({m for d in per.values() for m in d["machines"]}),
           "args": {"runs": str(a.runs), "config": str(a.config), "datasets": a.datasets, "reps": a.reps}}
    text = markdown(res)
    print(text)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix(".md").write_text(text)
    a.out.with_suffix(".json").write_text(json.dumps(res, indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
