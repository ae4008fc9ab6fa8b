"""Label tasks answered from the drafter's label distribution (issue 50 item 4), one command.

    SPECRAG_PROGRESS=0 .venv/bin/python benchmarks/label_distribution.py \\
        [--config configs/demo.yaml] [--datasets arc_challenge,climate_fever,climate_fever_400] \\
        [--rows N] [--tuning-rows N] [--out benchmarks/label_distribution]

Arms, each one run of the product over the same rows (:func:`specrag_batch.run.pipeline.process_rows`,
real engines of the config):

* ``default``: the config as it is (the product's defaults: the selected draft's answer, log ρ);
* ``label``: ``selection.label_distribution: true`` (answer = the mixture's argmax);
* ``label-batch``: the same and ``selection.label_prior: batch`` (the chunk's mean distribution
  divided out; ``chunk_rows`` is set to the cell's rows, so the prior is the cell's);
* ``standard`` / ``standard-label``: Standard RAG (the config's verifier model) without / with the
  label distribution.

The rule on the prior correction is declared here, before the rows it decides run: the
**tuning rows** (``decision.tuning_rows``: the first 20 rows of each file, never reported) run
``label`` and ``label-batch`` first; the correction is ON for the reported rows' verdict when its
pooled accuracy on the tuning rows is higher than without it (ties: OFF). The reported rows
(``decision.reported_rows``: ARC-Challenge 20.., Climate-FEVER 40.., ``climate_fever_400``:
the n = 400 claims set) then run every arm.

Figures (``<out>/results.json``, ``<out>/tables.md``), per dataset and pooled over them:
accuracy of each arm with its 95% bootstrap interval; the chosen label arm against ``default``
and against ``standard`` (paired bootstrap interval of the difference, McNemar's exact test);
AUROC (right vs wrong) of ``label_probability``, of log ρ (``score`` of ``default``) and of the
calibrated confidence (out-of-fold probabilities of ``specrag_batch.confidence.fit`` on
``default``'s rows); per-label recall before and after the prior correction (claims).
Cells are kept as JSON lines under ``<out>/cells/`` and skipped when present (resume: run the
same command again). Time: the 0.5B drafter on 2 CPU cores drafts a row in about 10-20 s, so
the full command is hours; ``--rows 2 --tuning-rows 2`` proves the plumbing in minutes.
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
from specrag_batch.core import labels  # noqa: E402
from specrag_batch.config import RunConfig, load_config  # noqa: E402

ARMS = {"default": {}, "label": {"label_distribution": True},
        "label-batch": {"label_distribution": True, "label_prior": "batch"},
        "standard": {"mode": "standard"}, "standard-label": {"mode": "standard", "label_distribution": True}}
DATASETS = ("arc_challenge", "climate_fever", decision.CLAIMS_DECISION)


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
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in records))
    tmp.replace(path)
    path.with_suffix(".seconds.json").write_text(json.dumps(seconds))  # engine seconds per method
    return records


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
    return {k: {"recall": v[0], "n": v[1]} for k, v in labels.per_label_recall(
        [(r.get("gold") or [""])[0] for r in records], [r.get("answer") for r in records]).items()}


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
            fig["recall"] = {"before": recall(arms["label"]), "after": recall(arms["label-batch"])}
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
            lines += ["", "| gold label | recall before | after | n |", "|---|---|---|---|"]
            lines += [f"| {k} | {f(v['recall'])} | {f(fig['recall']['after'].get(k, {}).get('recall'))} | {v['n']} |"
                      for k, v in fig["recall"]["before"].items()]
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "demo.yaml"))
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--arms", default=",".join(ARMS), help="arms of the reported rows (default: all)")
    ap.add_argument("--rows", type=int, default=100, help="reported rows per dataset (400 for climate_fever_400)")
    ap.add_argument("--tuning-rows", type=int, default=decision.TUNING_ROWS)
    ap.add_argument("--shared", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "label_distribution"))
    a = ap.parse_args(argv)
    base, shared, out = load_config(a.config), Path(a.shared), Path(a.out)
    names = [n for n in a.datasets.split(",") if n]
    tune = {}
    for name in dict.fromkeys("climate_fever" if n == decision.CLAIMS_DECISION else n for n in names):
        rows = decision.tuning_rows(name, shared)[:a.tuning_rows]
        tune[name] = {arm: run_cell(base, arm, name, rows, out / "cells" / f"tuning-{name}-{arm}.jsonl")
                      for arm in ("label", "label-batch")}
    gain = sum(right(t["label-batch"]).sum() - right(t["label"]).sum() for t in tune.values())
    prior_on = bool(gain > 0)  # the declared rule: on only if it answers more tuning rows right
    cells = {}
    for name in names:
        n = 400 if name == decision.CLAIMS_DECISION and a.rows == 100 else a.rows
        rows = decision.reported_rows(name, shared, n)
        cells[name] = {arm: run_cell(base, arm, name, rows, out / "cells" / f"{name}-{n}-{arm}.jsonl")
                       for arm in ARMS if arm in a.arms.split(",")}
    res = analyse(cells, prior_on)
    res["tuning_gain_rows"] = int(gain)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=2, default=str))
    (out / "tables.md").write_text(tables(res))
    print(tables(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
