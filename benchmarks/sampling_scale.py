"""Sampling at scale (issue 38 items 1 and 4): milliseconds per row of multi-perspective
sampling before (scikit-learn's ``KMeans`` row by row) and after (one batched K-Means per
chunk, ``specrag_batch.stages.sampling.cluster_rows``), and the share of real rows on which
both give the same partition. One run measures both paths side by side.

**Same-partition share.** The decision benchmark's reported rows of all five datasets
(``REPORT_START`` of ``benchmarks/decision.py``, 100 rows each or every remaining row; read from
the file, not imported), converted by ``specrag_batch.core.datasets``, cut to their top-N by the
retrieval stage and embedded query-conditioned by the sampling stage's own code
(``conditioned_vectors``: ``conditioned_texts`` + ``embeddings.embed``, the packaged
all-MiniLM-L6-v2), with the default config (k = 2, n_init = 10, seed 0). A row counts as the
same when the two label arrays are equal up to a permutation of the label ids. Also counted:
how the batched K-Means clustered each row (batched; initial centres from scikit-learn's
``kmeans_plusplus`` after a rounding tie; the whole row by scikit-learn).

**Milliseconds per row** at N = 10, 20, 40 and chunks of 16 and 256 rows. The rows are HotpotQA
questions (the first 256 of the file) whose documents are their own 10 paragraphs followed by
the paragraphs of the next questions, up to N (real texts; past N = 10 the extra documents are
other questions' paragraphs). Per setting:

* encoder: the stage's text building and its one encoder call per chunk (``conditioned_vectors``),
  on one chunk of 256 rows and on two chunks of 16;
* after, encoder excluded: ``cluster_rows`` + ``sample_subsets`` over the vectors, chunk by
  chunk (all 256 rows: one chunk of 256, or 16 chunks of 16), median of ``--repeats`` runs;
* before, encoder excluded: ``cluster_documents`` (scikit-learn, one row at a time) +
  ``sample_subsets`` on the first ``--before-rows`` rows; the per-row path does not depend on
  the chunk, so one figure serves both chunk sizes;
* encoder included: the encoder's milliseconds per row for that chunk size plus the path's.

Wall and CPU (``time.process_time``, all threads of this process) milliseconds are both
reported: the 2 cores are shared, and the load average at the start and the end is printed.

    .venv/bin/python benchmarks/sampling_scale.py            # writes benchmarks/sampling_scale.{json,md}
    .venv/bin/python benchmarks/sampling_scale.py --quick    # a smaller run, prints only
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specrag_batch.config import RunConfig  # noqa: E402
from specrag_batch.core.datasets import BENCHMARK_RESERVE, DATASETS  # noqa: E402
from specrag_batch.engines.embeddings import load_embedder  # noqa: E402
from specrag_batch.core.records import Document, QueryRow  # noqa: E402
from specrag_batch.core import kmeans  # noqa: E402
from specrag_batch.stages.retrieval import Retrieval  # noqa: E402
from specrag_batch.stages.sampling import (_k_eff, cluster_documents, cluster_rows, conditioned_vectors,  # noqa: E402
                                           row_seed, sample_subsets)

REPORTED_ROWS = 100
"""Reported rows per dataset (``decision.py --rows``' default)."""


def report_start() -> dict[str, int]:
    """``REPORT_START`` of ``benchmarks/decision.py``, read from its source."""
    tree = ast.parse((Path(__file__).with_name("decision.py")).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "REPORT_START":
            return ast.literal_eval(node.value)
    raise SystemExit("benchmarks/decision.py has no REPORT_START")


def query_rows(dicts: list[dict], config: RunConfig) -> list[QueryRow]:
    """Input dicts -> rows with their top-N documents (the retrieval stage; failed rows dropped)."""
    rows = [QueryRow(row_index=i, query_id=d["query_id"], query=d["query"], task=d["task"],
                     documents=[Document(**x) for x in d["documents"]]) for i, d in enumerate(dicts)]
    Retrieval(config)(rows)
    return [row for row in rows if row.error is None]


def blocks_of(vectors: np.ndarray, rows: list[QueryRow]) -> list[np.ndarray]:
    return np.split(vectors, np.cumsum([len(r.top_documents) for r in rows])[:-1])


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(a) == len(b) and len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def routes(blocks: list[np.ndarray], seeds: list[int], config: RunConfig) -> dict[str, int]:
    """How the batched K-Means clustered the rows (k_eff = 1 rows need no K-Means)."""
    s = config.sampling
    ks = [_k_eff(b, s.num_clusters) for b in blocks]
    todo = [i for i, k in enumerate(ks) if k > 1]
    _, route = kmeans.kmeans_labels([blocks[i] for i in todo], [ks[i] for i in todo], [seeds[i] for i in todo],
                                    s.kmeans_n_init)
    counts = np.bincount(route, minlength=3)
    return {"k_eff_1": len(blocks) - len(todo), "batched": int(counts[kmeans.BATCHED]),
            "seeded_by_sklearn": int(counts[kmeans.SEEDED_BY_SKLEARN]), "by_sklearn": int(counts[kmeans.BY_SKLEARN])}


def share(shared: Path, config: RunConfig, limit: int | None) -> dict:
    """Same-partition share per dataset and pooled (module docstring)."""
    out = {}
    s = config.sampling
    for name, start in report_start().items():
        dicts = list(DATASETS[name](shared))[start:start + REPORTED_ROWS]
        rows = query_rows(dicts[:limit] if limit else dicts, config)
        vectors = conditioned_vectors(rows, config)
        blocks = blocks_of(vectors, rows)
        seeds = [row_seed(config.seed, r.query_id) for r in rows]
        before = [cluster_documents(b, s.num_clusters, seed, s.kmeans_n_init) for b, seed in zip(blocks, seeds)]
        after = cluster_rows(blocks, s.num_clusters, seeds, s.kmeans_n_init)
        same = sum(same_partition(a, b) for a, b in zip(before, after))
        subsets = sum(sample_subsets(a, s.num_drafts, seed, s.strategy, k=s.num_clusters)
                      == sample_subsets(b, s.num_drafts, seed, s.strategy, k=s.num_clusters)
                      for a, b, seed in zip(before, after, seeds))
        out[name] = {"rows": len(rows), "first_row": start, "same_partition": same, "same_subsets": subsets,
                     "documents_per_row": sorted({len(r.top_documents) for r in rows}),
                     "routes": routes(blocks, seeds, config)}
        print(f"share {name}: {same}/{len(rows)} same partition", flush=True)
    rows = sum(v["rows"] for v in out.values())
    same = sum(v["same_partition"] for v in out.values())
    out["pooled"] = {"rows": rows, "same_partition": same, "share": same / rows}
    return out


def scale_rows(shared: Path, n_docs: int, count: int) -> tuple[list[QueryRow], RunConfig]:
    """HotpotQA questions with their own paragraphs then the next questions' up to N (module
    docstring), through the retrieval stage with top_n = N."""
    config = RunConfig(retrieval={"top_n": n_docs})
    dicts = list(DATASETS["hotpotqa"](shared))[:BENCHMARK_RESERVE]
    wide = []
    for i in range(count):
        docs, j = [], i
        while len(docs) < n_docs + 10:  # spare for passages the retrieval stage drops as duplicates
            docs += dicts[j % len(dicts)]["documents"]
            j += 1
        wide.append({**dicts[i % len(dicts)], "documents": docs})
    rows = query_rows(wide, config)
    assert all(len(r.top_documents) == n_docs for r in rows), "a row has fewer than N distinct documents"
    return rows, config


def timed(fn) -> tuple[float, float]:
    """(wall s, CPU s) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def after_path(blocks, seeds, config, chunk):
    s = config.sampling
    for start in range(0, len(blocks), chunk):
        labels = cluster_rows(blocks[start:start + chunk], s.num_clusters, seeds[start:start + chunk], s.kmeans_n_init)
        for row_labels, seed in zip(labels, seeds[start:start + chunk]):
            sample_subsets(row_labels, s.num_drafts, seed, s.strategy, k=s.num_clusters)


def before_path(blocks, seeds, config):
    s = config.sampling
    for b, seed in zip(blocks, seeds):
        sample_subsets(cluster_documents(b, s.num_clusters, seed, s.kmeans_n_init), s.num_drafts, seed, s.strategy,
                       k=s.num_clusters)


def timings(shared: Path, ns: list[int], chunks: list[int], rows_count: int, before_rows: int,
            repeats: int, encoder_chunks: int) -> list[dict]:
    """ms per row per (N, chunk) setting (module docstring)."""
    out = []
    for n_docs in ns:
        rows, config = scale_rows(shared, n_docs, rows_count)
        seeds = [row_seed(config.seed, r.query_id) for r in rows]
        vectors = None
        encoder = {}
        for chunk in sorted(chunks, reverse=True):  # the largest chunk's call gives every row's vectors
            parts = [rows[i:i + chunk] for i in range(0, len(rows), chunk)][:encoder_chunks]
            got, wall, cpu = [], 0.0, 0.0
            for part in parts:
                w, c = timed(lambda: got.append(conditioned_vectors(part, config)))
                wall, cpu = wall + w, cpu + c
            encoder[chunk] = (1000 * wall / sum(map(len, parts)), 1000 * cpu / sum(map(len, parts)))
            if vectors is None:  # the largest chunks' vectors, then the rest's (not timed)
                covered = sum(map(len, parts))
                vectors = np.vstack(got + ([conditioned_vectors(rows[covered:], config)] if covered < len(rows) else []))
            print(f"N={n_docs} chunk={chunk}: encoder {encoder[chunk][0]:.1f} ms/row wall", flush=True)
        blocks = blocks_of(vectors, rows)
        after_path(blocks, seeds, config, max(chunks))  # warm-up
        w, c = timed(lambda: before_path(blocks[:before_rows], seeds[:before_rows], config))
        before = (1000 * w / before_rows, 1000 * c / before_rows)
        route = routes(blocks, seeds, config)
        for chunk in chunks:
            runs = [timed(lambda: after_path(blocks, seeds, config, chunk)) for _ in range(repeats)]
            after = (1000 * statistics.median(r[0] for r in runs) / len(rows),
                     1000 * statistics.median(r[1] for r in runs) / len(rows))
            enc = encoder[chunk]
            out.append({"N": n_docs, "chunk": chunk, "rows": len(rows), "before_rows": before_rows,
                        "before_ms": before[0], "before_cpu_ms": before[1], "after_ms": after[0],
                        "after_cpu_ms": after[1], "encoder_ms": enc[0], "encoder_cpu_ms": enc[1],
                        "encoder_rows": min(len(rows), chunk * encoder_chunks),
                        "before_with_encoder_ms": before[0] + enc[0], "after_with_encoder_ms": after[0] + enc[0],
                        "speedup": before[0] / after[0], "routes": route})
            print(f"N={n_docs} chunk={chunk}: before {before[0]:.1f} ms/row, after {after[0]:.2f} ms/row "
                  f"(CPU {before[1]:.1f} / {after[1]:.2f}); with encoder {before[0] + enc[0]:.1f} / "
                  f"{after[0] + enc[0]:.1f}", flush=True)
    return out


def host() -> dict:
    import sentence_transformers
    import sklearn
    import torch

    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    return {"cpu": model, "cores": os.cpu_count(), "machine": platform.node(), "python": platform.python_version(),
            "numpy": np.__version__, "scikit_learn": sklearn.__version__, "torch": torch.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "encoder_device": str(load_embedder(RunConfig().retrieval.embedding_model).device), "commit": commit}


def markdown(result: dict) -> str:
    h = result["host"]
    lines = [f"# Sampling at scale ({result['date']})", "",
             f"Generated by `benchmarks/sampling_scale.py` on {h['cpu']}, {h['cores']} cores (machine "
             f"`{h['machine']}`, commit {h['commit']}; numpy {h['numpy']}, scikit-learn {h['scikit_learn']}, "
             f"torch {h['torch']}, encoder on {h['encoder_device']}). Load average at start "
             f"{result['load_start']}, at end {result['load_end']} (the cores were shared).", "",
             "## Milliseconds per row (k = 2, n_init = 10, m = 5)", "",
             "| N | chunk | before ms/row (CPU) | **after** ms/row (CPU) | speed-up | encoder ms/row (CPU) | "
             "before with encoder | after with encoder | rows: batched / seeded by sklearn / by sklearn |",
             "|---|---|---|---|---|---|---|---|---|"]
    for t in result["timings"]:
        r = t["routes"]
        lines.append(f"| {t['N']} | {t['chunk']} | {t['before_ms']:.1f} ({t['before_cpu_ms']:.1f}) | "
                     f"**{t['after_ms']:.2f}** ({t['after_cpu_ms']:.2f}) | {t['speedup']:.0f}x | {t['encoder_ms']:.0f} ({t['encoder_cpu_ms']:.0f}) | "
                     f"{t['before_with_encoder_ms']:.0f} | {t['after_with_encoder_ms']:.0f} | "
                     f"{r['batched']} / {r['seeded_by_sklearn']} / {r['by_sklearn']} |")
    t0 = result["timings"][0]
    lines += ["", f"Before: timed on the first {t0['before_rows']} rows, one row at a time (the same figure for both "
              f"chunk sizes); after: {t0['rows']} rows, chunk by chunk, median of the repeats; encoder: the stage's "
              "text building and one encoder call per chunk, timed on the first " + ", ".join(
                  sorted({f"{t['encoder_rows']} rows in chunks of {t['chunk']}" for t in result["timings"]})) + ".", "",
              "## Same partition as scikit-learn's per-row KMeans (the decision benchmark's reported rows)", "",
              "| dataset | rows (first row) | N | same partition | same subsets | rows: batched / seeded by "
              "sklearn / by sklearn / k_eff = 1 |", "|---|---|---|---|---|---|"]
    for name, v in result["share"].items():
        if name == "pooled":
            continue
        r = v["routes"]
        lines.append(f"| {name} | {v['rows']} ({v['first_row']}) | {', '.join(map(str, v['documents_per_row']))} | "
                     f"{v['same_partition']} ({100 * v['same_partition'] / v['rows']:.1f}%) | {v['same_subsets']} | "
                     f"{r['batched']} / {r['seeded_by_sklearn']} / {r['by_sklearn']} / {r['k_eff_1']} |")
    p = result["share"]["pooled"]
    lines.append(f"| **pooled** | {p['rows']} | | **{p['same_partition']} ({100 * p['share']:.1f}%)** | | |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("sampling_scale"),
                    help="writes OUT.json and OUT.md (not with --quick)")
    ap.add_argument("--ns", default="10,20,40")
    ap.add_argument("--chunks", default="16,256")
    ap.add_argument("--rows", type=int, default=256, help="rows per N setting")
    ap.add_argument("--before-rows", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--encoder-chunks", type=int, default=2, help="chunks per size the encoder is timed on")
    ap.add_argument("--quick", action="store_true", help="32 rows, N = 10, 10 rows per dataset; prints only")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.before_rows, args.ns, args.repeats = 32, 8, "10", 1
    load_start = os.getloadavg()
    result = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "host": host()}
    result["share"] = share(args.shared, RunConfig(), 10 if args.quick else None)
    result["timings"] = timings(args.shared, [int(x) for x in args.ns.split(",")],
                                [int(x) for x in args.chunks.split(",")], args.rows, args.before_rows,
                                args.repeats, args.encoder_chunks)
    result["load_start"] = " ".join(f"{x:.1f}" for x in load_start)
    result["load_end"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    text = markdown(result)
    print(text)
    if not args.quick:
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(text)


if __name__ == "__main__":
    main()
