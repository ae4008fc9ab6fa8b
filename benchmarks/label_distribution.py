"""Label tasks answered from the drafter's label distribution (issue 50 item 4), one command.

    SPECRAG_PROGRESS=0 .venv/bin/python benchmarks/label_distribution.py \\
        [--config configs/demo.yaml] [--datasets climate_fever,arc_challenge] \\
        [--rows N] [--block N] [--tuning-rows N] [--out benchmarks/label_distribution]

Arms over the same rows (real engines of the config). Two are product runs
(:func:`specrag_batch.run.pipeline.process_rows`); three are read from their drafts with the
product's own functions, so no drafts are written twice:

* ``label`` (run): ``selection.label_distribution: true`` (answer = the mixture's argmax);
* ``default`` (from ``label``'s drafts): the config's selection as it is (the selected draft's
  answer, log ρ), recomputed by :func:`specrag_batch.stages.selection.select` with the row's
  consensus fast path (:func:`derive_default`); valid while the config's log ρ needs no verifier
  term (the demo's: log ρ_draft alone), which :func:`derive_default` checks;
* ``label-batch`` (from ``label``'s drafts): the same distributions divided by the mean
  distribution of the dataset's rows of this split (``selection.label_prior: batch`` with the
  split as one chunk; :func:`derive_label_batch`);
* ``standard-label`` (run): Standard RAG (the config's verifier model) with the label
  distribution; ``standard`` (from its drafts): its written answer (:func:`derive_standard`).

The rule on the prior correction is declared here, before the rows it decides run: the
**tuning rows** (``decision.tuning_rows``: the first 20 rows of each file, never reported) run
``label`` (and ``label-batch`` from it) first; the correction is ON for the reported rows' verdict
when its pooled accuracy on the tuning rows is higher than without it (ties: OFF). The reported
rows (``decision.reported_rows``: ARC-Challenge 20.., Climate-FEVER 40.., ``climate_fever_400``:
the n = 400 claims set) then run in blocks of ``--block`` rows, datasets and arms interleaved,
so a run stopped at any time leaves every dataset with the same whole blocks of every arm.

Figures (``<out>/results.json``, ``<out>/tables.md``, rewritten after every block), per dataset
and pooled over them: accuracy of each arm with its 95% bootstrap interval; the chosen label arm
against ``default`` and against ``standard`` (paired bootstrap interval of the difference,
McNemar's exact test); AUROC (right vs wrong) of ``label_probability``, of log ρ (``score`` of
``default``) and of the calibrated confidence (out-of-fold probabilities of
``specrag_batch.confidence.fit`` on ``default``'s rows); per-label recall before and after the
prior correction (claims); engine seconds per row of each arm (a derived arm: the engine calls
it needs). Cells are kept as JSON lines under ``<out>/cells/`` and skipped when present
(resume: run the same command again). Time: the 0.5B drafter on 2 CPU cores drafts a row in
about 10-20 s, so 100 rows per dataset are hours; ``--rows 2 --tuning-rows 2`` proves the
plumbing in minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import decision  # noqa: E402
import decision_stats  # noqa: E402
from label_sources import host_info, stored_standard, with_stored_standard  # noqa: E402,F401
from specrag_batch.core import labels  # noqa: E402
from specrag_batch.config import RunConfig, load_config  # noqa: E402

ARMS = {"default": {}, "label": {"label_distribution": True},
        "label-batch": {"label_distribution": True, "label_prior": "batch"},
        "standard": {"mode": "standard"}, "standard-label": {"mode": "standard", "label_distribution": True}}
DATASETS = ("climate_fever", "arc_challenge")
RUN_ARMS = ("label", "standard-label")
"""The arms run through the engines; the others are derived from their drafts."""
DERIVED = {"default": "label", "label-batch": "label", "standard": "standard-label"}
"""Derived arm -> the run arm whose drafts it is read from."""


def arm_config(base: RunConfig, arm: str, rows: int) -> RunConfig:
    """``base`` with the arm's keys (:data:`ARMS`) and ``chunk_rows`` = ``rows`` (one chunk per cell)."""
    data = base.model_dump()
    over = dict(ARMS[arm])
    if "mode" in over:
        data["mode"] = over.pop("mode")
    data["selection"].update(over)
    data["chunk_rows"] = max(1, rows)
    return RunConfig.model_validate(data)


class Timed:
    """An engine whose ``generate`` and ``next_token_logprobs`` calls are timed (wall seconds per
    method, in ``seconds``): the cost of the label scores beside the drafting they follow."""

    def __init__(self, engine, seconds: dict):
        self.engine, self.seconds = engine, seconds

    def __getattr__(self, name):
        method = getattr(self.engine, name)
        if name not in ("generate", "next_token_logprobs"):
            return method

        def timed(*args, **kw):
            import time

            t0 = time.perf_counter()
            try:
                return method(*args, **kw)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
        return timed


def run_cell(base: RunConfig, arm: str, name: str, rows: list[dict], path: Path) -> list[dict]:
    """The output records of ``rows`` under ``arm`` (read from ``path`` when it exists)."""
    if path.exists():
        return [json.loads(line) for line in path.read_text().splitlines()]
    import pyarrow as pa

    from specrag_batch.core.datasets import INPUT_SCHEMA
    from specrag_batch.engines.lazy import LazyEngine
    from specrag_batch.run.pipeline import RunInfo, process_rows
    from specrag_batch.core.schema import validate_table

    cfg = arm_config(base, arm, len(rows))
    table = pa.Table.from_pylist(rows, schema=INPUT_SCHEMA)
    seconds: dict[str, float] = {}
    verifier = Timed(LazyEngine(cfg.verifier, cfg.seed), seconds)
    drafter = Timed(LazyEngine(cfg.drafter, cfg.seed), seconds) if cfg.mode == "speculative" else None
    records = process_rows(validate_table(table, name), cfg, drafter=drafter, verifier=verifier,
                           info=RunInfo(run_id=f"label-{arm}", source_file=name))
    records = with_choices(records, rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in records))
    tmp.replace(path)
    path.with_suffix(".seconds.json").write_text(json.dumps(seconds))  # engine seconds per method
    return records


def with_choices(records: list[dict], rows: list[dict]) -> list[dict]:
    """``records`` with each input row's ``choices`` (the output holds no choices; the derived
    arms need them to name an option letter's text and to grade it)."""
    choices = {r["query_id"]: r.get("choices") for r in rows}
    return [{**rec, "choices": choices.get(rec["query_id"])} for rec in records]


def right(records: list[dict]) -> np.ndarray:
    """Per row: answered and correct (rows without gold count as wrong; the sets have gold)."""
    return np.array([bool(r.get("correct")) for r in records])


def auroc_of(values, ok) -> float | None:
    from specrag_batch.confidence.calibration import auroc

    return auroc(np.array([np.nan if v is None else v for v in values], float), ok)


def calibrated_auroc(records: list[dict]) -> float | None:
    """AUROC of the calibrated confidence's out-of-fold probabilities on ``records`` (None when
    the model cannot be fitted: too few rows or one class)."""
    import polars as pl

    from specrag_batch.confidence.fit import CalibrationInputError, feature_matrix, out_of_fold

    df = pl.DataFrame([{k: r[k] for k in ("drafts", "answer", "score", "fast_path")} for r in records])
    try:
        return auroc_of(out_of_fold(feature_matrix(df), right(records)), right(records))
    except (CalibrationInputError, ValueError):
        return None


def recall(records: list[dict]) -> dict:
    """Per gold claim label: recall and rows, over the ``claim`` rows of ``records`` (a record
    without ``task`` counts as a claim); {} when there are none."""
    claims = [r for r in records if r.get("task", "claim") == "claim"]
    return {k: {"recall": v[0], "n": v[1]} for k, v in labels.per_label_recall(
        [(r.get("gold") or [""])[0] for r in claims], [r.get("answer") for r in claims]).items()}


def analyse(cells: dict, prior_on: bool) -> dict:
    """The figures of the module docstring from ``cells`` (dataset -> arm -> records)."""
    chosen = "label-batch" if prior_on else "label"
    out: dict = {"prior_correction": prior_on, "chosen_arm": chosen, "datasets": {}}
    pool = [d for d in cells if not (d == "climate_fever" and decision.CLAIMS_DECISION in cells)]  # rows once
    for name, arms in [*cells.items(), ("pooled", None)]:
        arms = arms or {arm: sum((cells[d][arm] for d in pool), []) for arm in ARMS
                        if all(arm in cells[d] for d in pool)}
        ok = {arm: right(recs) for arm, recs in arms.items()}
        fig: dict = {"n": len(next(iter(ok.values()))) if ok else 0,
                     "accuracy": {arm: {"value": float(v.mean()), "ci95": decision_stats.bootstrap_ci(v)}
                                  for arm, v in ok.items()}}
        for other in ("default", "standard"):
            if chosen in ok and other in ok:
                fig[f"{chosen}_vs_{other}"] = {**decision_stats.paired_bootstrap(ok[chosen], ok[other]),
                                               "mcnemar": decision_stats.mcnemar_exact(ok[chosen], ok[other])}
        if chosen in arms and "default" in arms:
            fig["auroc"] = {"label_probability": auroc_of([r["label_probability"] for r in arms[chosen]], ok[chosen]),
                            "score": auroc_of([r["score"] for r in arms["default"]], ok["default"]),
                            "calibrated": calibrated_auroc(arms["default"])}
        if "label" in arms and "label-batch" in arms:
            fig["recall"] = {"before": recall(arms["label"]), "after": recall(arms["label-batch"]),
                             **({"default": recall(arms["default"])} if "default" in arms else {})}
            if not fig["recall"]["before"]:
                del fig["recall"]
        out["datasets"][name] = fig
    return out


def tables(res: dict) -> str:
    f = lambda v: "–" if v is None else f"{v:.3f}"  # noqa: E731
    lines = [f"Prior correction (decided on tuning rows): {'on' if res['prior_correction'] else 'off'}; "
             f"arm compared: {res['chosen_arm']}", ""]
    for name, fig in res["datasets"].items():
        lines += [f"## {name} (n = {fig['n']})", "", "| arm | accuracy | 95% interval |", "|---|---|---|"]
        lines += [f"| {arm} | {f(a['value'])} | [{f(a['ci95'][0])}, {f(a['ci95'][1])}] |"
                  for arm, a in fig["accuracy"].items()]
        for key in (k for k in fig if "_vs_" in k):
            d = fig[key]
            lines += ["", f"{key}: {d['diff'] * 100:+.1f} points [{d['ci95'][0] * 100:+.1f}, {d['ci95'][1] * 100:+.1f}], "
                          f"McNemar p = {d['mcnemar']['p']:.3g} (b = {d['mcnemar']['b']}, c = {d['mcnemar']['c']})"]
        if "auroc" in fig:
            lines += ["", "AUROC: " + ", ".join(f"{k} {f(v)}" for k, v in fig["auroc"].items())]
        if "recall" in fig:
            lines += ["", "| gold label | recall, defaults | label distribution (before) | after the prior | n |",
                      "|---|---|---|---|---|"]
            rec = fig["recall"]
            lines += [f"| {k} | {f(rec.get('default', {}).get(k, {}).get('recall'))} | {f(v['recall'])} | "
                      f"{f(rec['after'].get(k, {}).get('recall'))} | {v['n']} |" for k, v in rec["before"].items()]
        lines.append("")
    for name, sec in (res.get("seconds_per_row") or {}).items():
        lines.append(f"Engine seconds per row, {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in sec.items()))
    return "\n".join(lines)


def _score(cfg: RunConfig, rec: dict, answer: str | None) -> bool | None:
    from specrag_batch.stages.evaluation import score_row

    return score_row(rec["task"], answer, rec.get("gold"), choices=rec.get("choices"),
                     labels=cfg.claim_labels).correct


def derive_default(cfg: RunConfig, records: list[dict]) -> list[dict]:
    """``records`` of the ``label`` arm answered as the config's selection answers them without
    the label distribution: :func:`~specrag_batch.stages.selection.select` over the row's drafts
    (their stored scores), on the consensus fast path when the row took it.

    Raises:
        ValueError: the config's log ρ has a verifier term (not stored in a draft-only run)."""
    from specrag_batch.core.records import Draft
    from specrag_batch.stages.selection import consensus, select

    sel = cfg.selection
    if sel.use_self_consistency or sel.use_self_reflection or sel.random_selection:
        raise ValueError("default is derived only for log ρ = log ρ_draft without random selection")
    out = []
    for r in records:
        if r.get("error") is not None or not r.get("drafts"):
            out.append(dict(r))
            continue
        drafts = [Draft.from_record(d) for d in r["drafts"]]
        fast = consensus(drafts, cfg.consensus_threshold) if r.get("fast_path") else None
        chosen = select(drafts, use_draft=sel.use_draft_score, use_sc=False, use_sr=False,
                        fast_path=fast, rule=sel.rule)
        answer = drafts[chosen.index].answer
        out.append({**r, "answer": answer, "score": chosen.score, "fast_path": chosen.fast_path,
                    "correct": _score(cfg, r, answer), "label_probability": None, "label_distribution": None})
    return out


def derive_standard(cfg: RunConfig, records: list[dict]) -> list[dict]:
    """``records`` of ``standard-label`` answered by Standard RAG's written answer (its one
    draft's ``answer``, as selection takes it without the label distribution)."""
    out = []
    for r in records:
        d = (r.get("drafts") or [None])[0]
        if r.get("error") is not None or d is None:
            out.append(dict(r))
            continue
        out.append({**r, "answer": d["answer"], "score": d.get("score_draft"), "correct": _score(cfg, r, d["answer"]),
                    "label_probability": None, "label_distribution": None})
    return out


def derive_label_batch(cfg: RunConfig, records: list[dict]) -> list[dict]:
    """``records`` of the ``label`` arm with each row's mixture divided by the mean mixture of
    the records' rows of its task (:func:`specrag_batch.core.labels.batch_prior`, :func:`~specrag_batch.core.labels.correct`:
    ``selection.label_prior: batch`` with ``records`` as one chunk)."""
    mix = [labels.mixture([{e["label"]: e["logprob"] for e in d.get("label_logprobs") or []} or None
                           for d in r.get("drafts") or []]) if r.get("error") is None else None for r in records]
    priors = {t: labels.batch_prior([m for m, r in zip(mix, records) if r["task"] == t]) for t in labels.LABEL_TASKS}
    out = []
    for m, r in zip(mix, records):
        if m is None or r["task"] not in priors:
            out.append(dict(r))
            continue
        dist = labels.correct(m, priors[r["task"]])
        label, p = labels.argmax(dist)
        answer = labels.canonical_answer(r["task"], label, r.get("choices"))
        out.append({**r, "answer": answer, "correct": _score(cfg, r, answer), "label_probability": p,
                    "label_distribution": [{"label": k, "probability": v} for k, v in dist.items()]})
    return out


def with_derived(cfg: RunConfig, run: dict) -> dict:
    """``run`` (run arm -> records) with the derived arms (:data:`DERIVED`) its arms allow."""
    fn = {"default": derive_default, "label-batch": derive_label_batch, "standard": derive_standard}
    arms = dict(run)
    for arm, src in DERIVED.items():
        if src in run:
            arms[arm] = fn[arm](cfg, run[src])
    return {arm: arms[arm] for arm in ARMS if arm in arms}


def seconds_per_row(out: Path, stems: dict) -> dict:
    """Engine wall seconds per row of each arm from the cells' ``.seconds.json`` (``stems``:
    cell path without suffix -> its rows, one dataset's cells); a derived arm costs its run
    arm's drafting (``generate``) only, except ``label-batch`` (its run arm's whole cost)."""
    per: dict = {}
    for stem, n in stems.items():
        f = out / "cells" / f"{stem}.seconds.json"
        if f.exists():
            run_arm = next(x for x in RUN_ARMS if stem.endswith("-" + x))
            acc = per.setdefault(run_arm, {"rows": 0})
            acc["rows"] += n
            for k, v in json.loads(f.read_text()).items():
                acc[k] = acc.get(k, 0.0) + v
    res = {}
    for arm in ARMS:
        src = per.get(DERIVED.get(arm, arm))
        if src and src["rows"]:
            keys = ("generate",) if arm in ("default", "standard") else ("generate", "next_token_logprobs")
            res[arm] = sum(src.get(k, 0.0) for k in keys) / src["rows"]
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "demo.yaml"))
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--arms", default=",".join(RUN_ARMS), help="run arms of the reported rows (default: both)")
    ap.add_argument("--rows", type=int, default=100, help="reported rows per dataset (400 for climate_fever_400)")
    ap.add_argument("--block", type=int, default=10, help="reported rows per cell")
    ap.add_argument("--limit", type=int, default=None,
                    help="stop after this many reported rows per dataset (cells keep --rows' names: "
                         "re-read a stopped run's whole blocks)")
    ap.add_argument("--standard-from", default=None,
                    help="a decision cell archive (.tar.xz) whose `standard` rows stand in for the "
                         "standard arm when standard-label is not run")
    ap.add_argument("--analyse-only", action="store_true",
                    help="run no engine: figures from the reported cells present (a stopped run's blocks)")
    ap.add_argument("--tuning-rows", type=int, default=decision.TUNING_ROWS)
    ap.add_argument("--shared", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "label_distribution"))
    a = ap.parse_args(argv)
    base, shared, out = load_config(a.config), Path(a.shared), Path(a.out)
    names = [n for n in a.datasets.split(",") if n]
    run_arms = [x for x in RUN_ARMS if x in a.arms.split(",")]
    gain = 0
    for name in dict.fromkeys("climate_fever" if n == decision.CLAIMS_DECISION else n for n in names):
        rows = decision.tuning_rows(name, shared)[:a.tuning_rows]
        recs = run_cell(base, "label", name, rows, out / "cells" / f"tuning-{name}-label.jsonl")
        gain += int(right(derive_label_batch(base, recs)).sum() - right(recs).sum())
    prior_on = bool(gain > 0)  # the declared rule: on only if it answers more tuning rows right
    sizes = {n: 400 if n == decision.CLAIMS_DECISION and a.rows == 100 else a.rows for n in names}
    rows_of = {n: decision.reported_rows(n, shared, sizes[n]) for n in names}
    run: dict = {n: {arm: [] for arm in run_arms} for n in names}
    stems: dict = {n: {} for n in names}
    for start in range(0, min(max(sizes.values()), a.limit or max(sizes.values())), a.block):
        for arm in run_arms:
            for name in names:
                block = rows_of[name][start:start + a.block]
                if not block:
                    continue
                stem = f"{name}-{sizes[name]}-{start}-{arm}"
                if a.analyse_only and not (out / "cells" / f"{stem}.jsonl").exists():
                    continue
                run[name][arm] += run_cell(base, arm, name, block, out / "cells" / f"{stem}.jsonl")
                stems[name][stem] = len(block)
        cells = {n: with_derived(base, r) for n, r in run.items()}
        n_rows = {n: min(len(v) for v in r.values()) for n, r in run.items()}
        cells = {n: {arm: recs[:n_rows[n]] for arm, recs in c.items()} for n, c in cells.items()}
        if a.standard_from:
            cells = {n: with_stored_standard(c, stored_standard(Path(a.standard_from), n)) for n, c in cells.items()}
        res = analyse(cells, prior_on)
        res["tuning_gain_rows"] = gain
        res["run"] = host_info(base)
        if a.standard_from:
            res["standard_from"] = Path(a.standard_from).name
        res["seconds_per_row"] = {n: seconds_per_row(out, stems[n]) for n in names}
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(res, indent=2, default=str))
        (out / "tables.md").write_text(tables(res))
        print(tables(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
