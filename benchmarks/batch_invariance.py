"""Batch invariance: how often do greedy answers and scores change with batch composition?

Each row of a small real slice (``samples/demo``: Climate-FEVER claims and PopQA questions,
converted from ``../shared/data``) is run through the whole pipeline (retrieval, sampling,
drafting, verification, selection) three ways with the same engines, config and seed:

* ``alone``: a chunk of one row (the row is the only query in every vLLM call);
* ``batched``: all rows in one chunk (one batched ``generate`` / ``prompt_logprobs`` call);
* ``reversed``: all rows in one chunk, in reverse order (same batch, another layout).

It prints, per layout compared to ``alone``: rows whose selected answer changed, rows whose
selected score log ρ changed (bit for bit; set in one layout and None in the other counts),
rows whose number of drafts changed, drafts (of m per row, paired by subset) whose answer or
draft score changed, rows whose ``correct`` changed (rows with gold), and the largest / median
absolute score change in nats; plus wall time per layout (:func:`compare_layouts`).

``--batch-invariant`` sets ``VLLM_BATCH_INVARIANT=1`` before vLLM is imported (vLLM's
batch-invariant kernels); on a build that cannot run them the engine start or the first step
fails and the error is printed. ``--probe`` only turns the mode on the way vLLM's worker does
(``init_batch_invariance``) and calls each operator it replaces on a CPU tensor, printing
which run (no engine; seconds).

    python benchmarks/batch_invariance.py --rows 20 --config configs/test-smollm2.yaml
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _slice(input_dir: Path, n: int):
    import pyarrow.parquet as pq

    from specrag_batch.core.schema import validate_table

    files = sorted(input_dir.glob("*.parquet"))
    per = -(-n // len(files))
    rows = []
    for f in files:
        rows += validate_table(pq.read_table(f).slice(0, per), str(f))
    return rows[:n]


def _run(rows, cfg, drafter, verifier):
    from specrag_batch.run.pipeline import RunInfo, process_rows

    rows = copy.deepcopy(rows)  # process_rows records flags and N on the rows
    cfg = cfg.model_copy(update={"chunk_rows": max(1, len(rows))})
    t0 = time.perf_counter()
    recs = process_rows(rows, cfg, drafter=drafter, verifier=verifier, info=RunInfo("bench", "bench"))
    return {r["query_id"]: r for r in recs}, time.perf_counter() - t0


def _pair_drafts(a: list[dict], b: list[dict]) -> tuple[list[tuple[dict, dict]], int]:
    """Pair two layouts' drafts of one row. Drafts carrying their subset (``doc_ids``) are
    paired by it (the k-th draft of a subset with the k-th of the same subset in the other
    layout), so a layout that drafts subsets in another order or drops one is not compared
    position by position; drafts without it are paired by index. Returns (pairs, number of
    drafts left without a partner in either layout)."""
    if all("doc_ids" in d for d in a + b):
        def keyed(drafts):
            seen: dict = {}
            out = {}
            for d in drafts:
                sub = tuple(d["doc_ids"] or ())
                out[(sub, seen.get(sub, 0))] = d
                seen[sub] = seen.get(sub, 0) + 1
            return out
        ka, kb = keyed(a), keyed(b)
        pairs = [(ka[k], kb[k]) for k in ka if k in kb]
    else:
        pairs = list(zip(a, b))
    return pairs, len(a) + len(b) - 2 * len(pairs)


def compare_layouts(ref: dict, other: dict) -> dict:
    """Compare two layouts' output records, each ``{query_id: record}`` (output rows of
    :func:`specrag_batch.run.pipeline.process_rows`; every query id of ``ref`` must be in ``other``,
    else KeyError).

    Counts rows whose selected ``answer`` changed; whose selected score log ρ changed bit for
    bit, a score set in one layout and None in the other counting as changed; whose number of
    drafts differs (``draft_count_changed``; the drafts without a partner are
    ``drafts_unmatched``); and, over the drafts paired by subset (:func:`_pair_drafts`,
    ``drafts``), those whose answer or draft score log ρ_draft changed. For rows with gold
    (``correct`` not None in either layout, ``rows_with_gold``): rows whose ``correct``
    changed, split into ``became_correct`` / ``became_wrong`` (from ``ref`` to ``other``).
    ``max_abs_score_delta`` / ``median_abs_score_delta`` are in nats over rows scored in both
    layouts (None when there are none)."""
    ans = sc = d_ans = d_sc = n_d = n_changed = unmatched = gold = c_changed = up = down = 0
    deltas = []
    for qid, a in ref.items():
        b = other[qid]
        ans += a["answer"] != b["answer"]
        if a["score"] is not None and b["score"] is not None:
            sc += a["score"] != b["score"]
            deltas.append(abs(a["score"] - b["score"]))
        else:
            sc += (a["score"] is None) != (b["score"] is None)
        da_all, db_all = a["drafts"] or [], b["drafts"] or []
        n_changed += len(da_all) != len(db_all)
        pairs, left = _pair_drafts(da_all, db_all)
        unmatched += left
        for da, db in pairs:
            n_d += 1
            d_ans += da["answer"] != db["answer"]
            d_sc += da["score_draft"] != db["score_draft"]
        ca, cb = a.get("correct"), b.get("correct")
        if ca is not None or cb is not None:
            gold += 1
            c_changed += ca != cb
            up += bool(cb) and not ca
            down += bool(ca) and not cb
    return {"rows": len(ref), "answer_changed": ans, "score_changed": sc, "drafts": n_d,
            "draft_answer_changed": d_ans, "draft_score_changed": d_sc,
            "draft_count_changed": n_changed, "drafts_unmatched": unmatched,
            "rows_with_gold": gold, "correct_changed": c_changed, "became_correct": up,
            "became_wrong": down,
            "max_abs_score_delta": max(deltas) if deltas else None,
            "median_abs_score_delta": statistics.median(deltas) if deltas else None}


def probe() -> dict:
    """Turn on vLLM's batch-invariant mode in this process and call each operator it replaces
    (plus a plain matmul, which it replaces only on GPUs) on a small CPU tensor."""
    os.environ["VLLM_BATCH_INVARIANT"] = "1"
    import torch
    from vllm.model_executor.determinism import batch_invariant as bi
    from vllm.platforms import current_platform

    bi.init_batch_invariance()
    x = torch.randn(4, 8)
    ops = {"softmax": lambda: torch.softmax(x, -1), "log_softmax": lambda: torch.log_softmax(x, -1),
           "mean": lambda: x.mean(-1), "bmm": lambda: torch.bmm(x[None], x.T[None]),
           "matmul": lambda: x @ x.T}
    out = {"platform": type(current_platform).__name__, "mode_on": bi._batch_invariant_MODE}
    for name, f in ops.items():
        try:
            f()
            out[name] = "runs"
        except Exception as e:  # noqa: BLE001 - the figure is which operators run
            out[name] = f"{type(e).__name__}: {e}"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20)
    ap.add_argument("--input", default=str(ROOT / "samples" / "demo"))
    ap.add_argument("--config", default=str(ROOT / "configs" / "test-smollm2.yaml"))
    ap.add_argument("--batch-invariant", action="store_true")
    ap.add_argument("--probe", action="store_true", help="only probe the batch-invariant kernels")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    if args.probe:
        print(json.dumps(probe(), indent=2))
        return
    if args.batch_invariant:
        os.environ["VLLM_BATCH_INVARIANT"] = "1"
    os.environ.setdefault("SPECRAG_PROGRESS", "0")

    from specrag_batch.config import load_config
    from specrag_batch.engines.engine import get_engine

    cfg = load_config(args.config)
    rows = _slice(Path(args.input), args.rows)
    out: dict = {"config": args.config, "drafter": cfg.drafter.model, "verifier": cfg.verifier.model,
                 "rows": len(rows), "batch_invariant_env": args.batch_invariant}
    try:
        t0 = time.perf_counter()
        drafter = get_engine(cfg.drafter, cfg.seed)
        verifier = get_engine(cfg.verifier, cfg.seed)
        out["engine_load_s"] = round(time.perf_counter() - t0, 1)
        batched, t_b = _run(rows, cfg, drafter, verifier)
        rev, t_r = _run(rows[::-1], cfg, drafter, verifier)
        alone, t_a = {}, 0.0
        for i, r in enumerate(rows):
            print(f"alone: row {i + 1}/{len(rows)}", file=sys.stderr, flush=True)
            rec, t = _run([r], cfg, drafter, verifier)
            alone.update(rec)
            t_a += t
    except Exception as e:  # noqa: BLE001 - the figure is whether the engine runs at all
        out["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(out, indent=2))
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=2))
        sys.exit(1)
    out["seconds"] = {"alone": round(t_a, 1), "batched": round(t_b, 1), "reversed": round(t_r, 1)}
    out["batched_vs_alone"] = compare_layouts(alone, batched)
    out["reversed_vs_alone"] = compare_layouts(alone, rev)
    out["reversed_vs_batched"] = compare_layouts(batched, rev)
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
