"""Corpus-scale retrieval (issue 38 items 2-4): index build time, peak memory and search speed
at 100k and 1M passages, recall@10 of each FAISS index type against exact search, and the
retrieval of Climate-FEVER's claims from a corpus of all of its evidence sentences by dense,
BM25 and hybrid search.

Scale (``scale``): the passages are **synthetic** (stated in every table): 384-dimensional
vectors of a mixture of 1,000 overlapping Gaussian clusters in a 32-dimensional latent space,
linearly lifted to 384 dimensions and normalised (:func:`_mixture`), written as Parquet
shards of 100k rows with the vectors in a ``fixed_size_list`` column, so ``index build``
takes them as the corpus's own embeddings (``--embedding-column``) and no encoder time is
counted; each passage's text is 12 words of its cluster's 40-word vocabulary and 3 of a
global one, for the BM25 part. Queries: 1,000 fresh draws from the same mixture (and their
own words). Each build and each search runs in a fresh child process, which reports its peak
resident memory (``ru_maxrss``). Recall@10 of an index type = the share of exact (``Flat``)
top-10 neighbours it returns, averaged over the queries.

Claims (``claims``): Climate-FEVER's shared claims (``datasets.climate_fever``) against the
corpus of all distinct evidence sentences of those claims (doc_id = evidence_id, title =
the Wikipedia article); the index is built with the packaged MiniLM encoder. Hit rate @N =
share of claims with at least one of their evidence sentences among the top N (``any``),
and with at least one sentence labelled SUPPORTS or REFUTES (``gold``, claims having one);
recall @N = mean share of a claim's evidence sentences found. Retrieval only: no drafter.

    python benchmarks/index_scale.py scale --sizes 100000,1000000     # ~1-2 h on 2 cores
    python benchmarks/index_scale.py claims --shared ../shared/data
    python benchmarks/index_scale.py tables                           # index_scale.md from .json

Figures: ``benchmarks/index_scale.json`` (merged per part), ``benchmarks/index_scale.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "index_scale.json"
TABLES = HERE / "index_scale.md"
DIM, LATENT, CLUSTERS, SHARD_ROWS, QUERIES, K = 384, 32, 1000, 100_000, 1000, 10
CHUNK = 256  # queries per search call: a chunk of rows in a run


def _peak_rss_gb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 / 1024, 2)


def _mixture(seed: int = 0):
    """1,000 clusters in a 32-dimensional latent space (centers N(0, I), each cluster's spread
    drawn in [0.5, 1.5]: neighbouring clusters overlap), mapped to 384 dimensions by a random
    linear map. A low intrinsic dimension, as text embeddings have: isotropic Gaussian
    clusters in 384 dimensions are separated so cleanly that every IVF setting finds the
    exact neighbours (recall 1.0), which tells nothing."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(CLUSTERS, LATENT)).astype(np.float32)
    spread = rng.uniform(0.5, 1.5, CLUSTERS).astype(np.float32)
    lift = (rng.normal(size=(LATENT, DIM)) / np.sqrt(LATENT)).astype(np.float32)
    return centers, spread, lift


def _draw(rng, mixture, n: int):
    centers, spread, lift = mixture
    c = rng.integers(0, CLUSTERS, n)
    z = centers[c] + rng.normal(size=(n, LATENT)).astype(np.float32) * spread[c][:, None]
    v = z @ lift + 0.05 * rng.normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True), c


def _words(rng, clusters: np.ndarray) -> list[str]:
    local = rng.integers(0, 40, (len(clusters), 12))
    glob = rng.integers(0, 5000, (len(clusters), 3))
    return [" ".join([f"c{c}w{w}" for w in lw] + [f"g{g}" for g in gw]) for c, lw, gw in zip(clusters, local, glob)]


def make_corpus(work: Path, n: int, seed: int = 0) -> Path:
    """Synthetic corpus of ``n`` passages as Parquet shards under ``work/corpus-<n>`` (kept
    between runs) and its queries (``queries.npy``, ``queries.json``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = work / f"corpus-{n}"
    if (root / "_complete").exists():
        return root
    root.mkdir(parents=True, exist_ok=True)
    mixture = _mixture(seed)
    rng = np.random.default_rng(seed + 1)
    for k, start in enumerate(range(0, n, SHARD_ROWS)):
        m = min(SHARD_ROWS, n - start)
        vecs, c = _draw(rng, mixture, m)
        table = pa.table({"doc_id": [f"p{i}" for i in range(start, start + m)],
                          "title": [f"cluster {x}" for x in c], "text": _words(rng, c),
                          "emb": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), DIM)})
        pq.write_table(table, root / f"part-{k:05d}.parquet")
    qrng = np.random.default_rng(seed + 2)
    q, qc = _draw(qrng, mixture, QUERIES)
    np.save(root / "queries.npy", q)
    (root / "queries.json").write_text(json.dumps(_words(qrng, qc)))
    (root / "_complete").write_text("")
    return root


def _child(args: list[str]) -> dict:
    # passive OpenMP waits: on cores shared with other jobs, spinning FAISS threads slow everyone
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "SPECRAG_PROGRESS": "0"}
    r = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, cwd=ROOT, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def child_build(corpus: str, index: str, index_type: str, bm25: bool) -> dict:
    """In a child: build, report seconds, peak RSS and file sizes."""
    from specrag_batch.index import build_index

    t0 = time.perf_counter()
    meta = build_index(corpus, index, embedding_column="emb", index_type=index_type, bm25=bm25)
    data = Path(index) / meta["data"]
    size = lambda p: round(sum(f.stat().st_size for f in ([p] if p.is_file() else p.rglob("*"))) / 1e9, 3)  # noqa: E731
    return {"index_type": index_type, "bm25": bm25, "build_s": round(time.perf_counter() - t0, 1),
            "read_and_store_vectors_s": meta["seconds_embedding"], "trained_on": meta["dense"]["trained_on"],
            "peak_rss_gb": _peak_rss_gb(), "dense_gb": size(data / "dense.faiss"),
            "passages_gb": size(data / "passages.arrow"), "bm25_gb": size(data / "bm25") if bm25 else None}


def child_search(index: str, queries: str, params: str, truth: str | None, save: str | None, bm25: bool) -> dict:
    """In a child: load the index, search the query vectors in chunks of :data:`CHUNK` at each
    parameter value, report QPS, recall@10 against ``truth`` (row ids .npy) and peak RSS."""
    from specrag_batch.index import get_retriever, open_index

    q = np.load(queries)
    t0 = time.perf_counter()
    index_open = open_index(index)
    index_open.dense()
    out = {"load_s": round(time.perf_counter() - t0, 2), "runs": []}
    exact = np.load(truth) if truth else None
    for value in json.loads(params) or [None]:
        kw = {"nprobe": value, "ef_search": value} if value is not None else {}
        r = get_retriever(index, "dense", **kw)
        r.search_vectors(q[:CHUNK], K)  # warm-up
        t0 = time.perf_counter()
        ids = np.concatenate([r.search_vectors(q[s:s + CHUNK], K)[1] for s in range(0, len(q), CHUNK)])
        secs = time.perf_counter() - t0
        run = {"param": value, "qps": round(len(q) / secs, 1)}
        if exact is not None:
            run["recall_at_10"] = round(float(np.mean([len(set(a) & set(b)) / K for a, b in zip(ids, exact)])), 4)
        out["runs"].append(run)
        if save:
            np.save(save, ids)
    t0 = time.perf_counter()
    docs = [index_open.store.get(row[row >= 0]) for row in ids[:CHUNK]]
    out["store_lookup_passages_per_s"] = round(sum(map(len, docs)) / (time.perf_counter() - t0))
    if bm25:
        texts = json.loads(Path(queries).with_suffix(".json").read_text())
        r = get_retriever(index, "bm25")
        r.rows(texts[:8], K)
        t0 = time.perf_counter()
        for s in range(0, len(texts), CHUNK):
            r.rows(texts[s:s + CHUNK], K)
        out["bm25_qps"] = round(len(texts) / (time.perf_counter() - t0), 1)
        out["bm25_load_peak_rss_gb"] = _peak_rss_gb()
    out["peak_rss_gb"] = _peak_rss_gb()
    return out


def _types(n: int) -> list[tuple[str, list]]:
    nlist = 2 ** round(np.log2(4 * np.sqrt(n)))
    return [("Flat", []), (f"IVF{nlist},Flat", [16, 32, 64, 128, 256]), (f"IVF{nlist},PQ48", [64, 256]),
            ("HNSW32", [64, 128, 256, 512])]


def run_scale(sizes: list[int], work: Path, only: set[str] | None = None) -> dict:
    """Every index type at every size (``only``: those index types, measured again in place of
    their earlier rows, ``Flat`` also giving the exact top 10); merged into :data:`RESULTS`
    after each size."""
    from specrag_batch.index.dense import default_index_type

    out = {}
    earlier_all = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    earlier = earlier_all.get("scale", {})
    for n in sizes:
        t0 = time.perf_counter()
        corpus = make_corpus(work, n)
        gen = round(time.perf_counter() - t0, 1)
        rows = [r for r in earlier.get(str(n), {}).get("indexes", []) if only and r["index_type"] not in only]
        truth = str(work / f"truth-{n}.npy")
        for index_type, params in _types(n):
            if only and index_type not in only:
                continue
            index = str(work / f"index-{n}-{index_type.replace(',', '_')}")
            full = index_type == "Flat"  # the Flat build also builds BM25: a whole default build
            print(f"[{n}] build {index_type}", flush=True)
            b = _child(["_build", str(corpus), index, index_type, "1" if full else "0"])
            print(f"[{n}] search {index_type}: {b}", flush=True)
            s = _child(["_search", index, str(corpus / "queries.npy"), json.dumps(params),
                        "" if full else truth, truth if full else "", "1" if full else "0"])
            rows.append({**b, **{f"search_{k}": v for k, v in s.items()}})
            if only:  # measured apart from the other rows: its own host line in the tables
                rows[-1]["measured"] = _host()
            print(f"[{n}] {rows[-1]}", flush=True)
            subprocess.run(["rm", "-rf", index])
        order = [t for t, _ in _types(n)]
        rows.sort(key=lambda r: order.index(r["index_type"]))
        if only and str(n) in earlier:
            gen = earlier[str(n)]["corpus_generation_s"]
        out[str(n)] = {"passages": n, "default_index_type": default_index_type(n, DIM), "corpus_generation_s": gen,
                       "indexes": rows}
        _merge({"scale": {str(n): out[str(n)]}, **({} if only and "scale_host" in earlier_all else {"scale_host": _host()})})
    return out


def _host() -> dict:
    return {"cpus": os.cpu_count(), "machine": platform.machine(), "load_avg_at_end": [round(x, 1) for x in os.getloadavg()],
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def _merge(part: dict) -> None:
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for k, v in part.items():
        data[k] = {**data[k], **v} if isinstance(v, dict) and isinstance(data.get(k), dict) and k == "scale" else v
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")
    TABLES.write_text(tables(data))


def run_claims(shared: Path, work: Path, tops=(1, 5, 10, 20)) -> dict:
    """Climate-FEVER claims against all their evidence sentences: hit rate / recall per method."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, str(ROOT))
    from specrag_batch.core.datasets import climate_fever
    from specrag_batch.index import build_index, get_retriever, open_index

    claims = list(climate_fever(shared))
    raw = [json.loads(line) for line in (shared / "climate_fever" / "climate-fever.shared.jsonl").open()]
    gold = {f"climate-fever:{r['claim_id']}": {e["evidence_id"] for e in r["evidences"]
                                               if e["evidence_label"] in ("SUPPORTS", "REFUTES")} for r in raw}
    seen: dict[str, dict] = {}
    for c in claims:
        for d in c["documents"]:
            seen.setdefault(d["doc_id"], d)
    corpus = work / "climate-fever-corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(list(seen.values())), corpus / "evidence.parquet")
    index = str(work / "climate-fever-index")
    t0 = time.perf_counter()
    meta = build_index(str(corpus), index)
    build_s = round(time.perf_counter() - t0, 1)
    open_index.cache_clear()
    queries = [c["query"] for c in claims]
    depth = max(tops)
    result = {"claims": len(claims), "corpus_sentences": len(seen), "build_s": build_s,
              "index_type": meta["dense"]["index_type"], "claims_with_gold": sum(1 for c in claims if gold[c["query_id"]]),
              "methods": {}}
    for method in ("dense", "bm25", "hybrid"):
        r = get_retriever(index, method)
        t0 = time.perf_counter()
        found = []
        for s in range(0, len(queries), CHUNK):
            found += r.search(queries[s:s + CHUNK], depth)
        secs = time.perf_counter() - t0
        ids = [[d.doc_id for d in docs] for docs in found]
        m = {"qps": round(len(queries) / secs, 1)}
        for n in tops:
            any_hit, gold_hit, recall = [], [], []
            for c, got in zip(claims, ids):
                given = {d["doc_id"] for d in c["documents"]}
                top = set(got[:n])
                any_hit.append(bool(given & top))
                recall.append(len(given & top) / len(given))
                if gold[c["query_id"]]:
                    gold_hit.append(bool(gold[c["query_id"]] & top))
            m[f"@{n}"] = {"hit_any": round(float(np.mean(any_hit)), 3), "hit_gold": round(float(np.mean(gold_hit)), 3),
                          "recall": round(float(np.mean(recall)), 3)}
        result["methods"][method] = m
        print(method, m, flush=True)
    # recall@10 of IVF against Flat on these real MiniLM vectors (HNSW too)
    vecs = _real_vectors(index)
    result["real_vectors_recall"] = _recall_types(vecs, queries, index)
    _merge({"claims": result, "claims_host": _host()})
    return result


def run_e2e(shared: Path, work: Path, rows: int = 8) -> dict:
    """``specrag-batch run`` end to end (``configs/claims.yaml``: the packaged Qwen2.5-Coder-0.5B
    drafter, the default selection) on the first ``rows`` Climate-FEVER claims: once with their
    given evidence (N = 5), then without documents from the claims benchmark's index by each
    retrieval method (N = 10). A handful of rows: it shows the path works; its accuracy decides
    nothing."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    from specrag_batch.core.datasets import INPUT_SCHEMA, climate_fever

    index = work / "climate-fever-index"
    if not (index / "meta.json").exists():
        raise SystemExit(f"{index}: run the claims part first")
    claims = list(climate_fever(shared))[:rows]
    given = pa.Table.from_pylist(claims, schema=INPUT_SCHEMA)
    out = {"rows": rows, "config": "configs/claims.yaml", "arms": {}}
    base = yaml.safe_load((ROOT / "configs" / "claims.yaml").read_text())
    for arm in ("given", "dense", "bm25", "hybrid"):
        d = work / f"e2e-{arm}"
        subprocess.run(["rm", "-rf", str(d)])
        (d / "in").mkdir(parents=True)
        table = given if arm == "given" else given.drop_columns(["documents"])
        pq.write_table(table, d / "in" / "claims.parquet")
        cfg = {**base, "retrieval": {"top_n": 5 if arm == "given" else 10,
                                     **({} if arm == "given" else {"index": str(index), "method": arm})}}
        (d / "run.yaml").write_text(yaml.safe_dump(cfg))
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "specrag_batch.cli.commands", "run", "-i", str(d / "in"), "-o", str(d / "out"),
                            "-c", str(d / "run.yaml"), "--json"], capture_output=True, text=True, cwd=ROOT,
                           env={**os.environ, "SPECRAG_PROGRESS": "0"})
        secs = round(time.perf_counter() - t0, 1)
        if r.returncode != 0:
            raise RuntimeError(f"{arm}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
        res = pq.read_table(d / "out" / "claims.parquet").to_pylist()
        gold_ids = {c["query_id"]: {x["doc_id"] for x in c["documents"]} for c in claims}
        hits = [bool(gold_ids[x["query_id"]] & {i for dr in x["drafts"] for i in dr["doc_ids"]}) for x in res]
        out["arms"][arm] = {"rows_out": len(res), "errors": sum(x["error"] is not None for x in res),
                            "correct": sum(bool(x["correct"]) for x in res), "num_documents": [x["num_documents"] for x in res],
                            "rows_drafting_from_given_evidence": sum(hits), "seconds": secs}
        print(arm, out["arms"][arm], flush=True)
    _merge({"e2e": out})
    return out


def _real_vectors(index: str) -> np.ndarray:
    import faiss

    from specrag_batch.index import open_index

    ix = open_index(index).dense()
    return faiss.rev_swig_ptr(ix.get_xb(), ix.ntotal * ix.d).reshape(ix.ntotal, ix.d).copy()


def _recall_types(vecs: np.ndarray, queries: list[str], index: str) -> list[dict]:
    from specrag_batch.engines.embeddings import embed
    from specrag_batch.index import dense

    q = embed("all-MiniLM-L6-v2", queries)
    exact = dense.search(dense.build("Flat", [vecs])[0], q, K)[1]
    nlist = 2 ** round(np.log2(4 * np.sqrt(len(vecs))))
    out = []
    for index_type, params, key in ((f"IVF{nlist},Flat", [4, 8, 16, 32], "nprobe"), ("HNSW32", [32, 64, 128], "ef_search")):
        ix, _ = dense.build(index_type, [vecs], train_size=len(vecs))
        for p in params:
            got = dense.search(ix, q, K, **{key: p})[1]
            out.append({"index_type": index_type, key: p,
                        "recall_at_10": round(float(np.mean([len(set(a) & set(b)) / K for a, b in zip(got, exact)])), 4)})
    return out


def tables(data: dict) -> str:
    """The Markdown tables of :data:`RESULTS`."""
    lines = ["# Corpus-scale retrieval (`benchmarks/index_scale.py`)", "",
             "Generated from `index_scale.json` by `python benchmarks/index_scale.py tables`.", ""]
    if "scale" in data:
        h = data.get("scale_host", {})
        lines += ["## Scale: **easy synthetic clustered vectors** (1,000 overlapping clusters in a 32-d latent space lifted to 384 dimensions), given as the corpus's own embeddings (no encoder time). Easier than real text: recall here overstates what a real corpus gets at the same nprobe / efSearch (real passages and a 1M corpus matched to them: `index_recall.py`, docs/retrieval.md)",
                  "", f"Host: {h.get('cpus')} cores ({h.get('machine')}), {h.get('date')}, load average at the end "
                  f"{h.get('load_avg_at_end')} (other jobs shared the cores: times are upper bounds). "
                  f"Queries: {QUERIES}, searched {CHUNK} per call. Build = `index build --embedding-column emb` "
                  "in a fresh process (reading and checking the shards, storing the vectors, training, adding, "
                  "writing the passage store; the Flat build also builds BM25). Search = a fresh process loading the "
                  "index and searching; peak RSS = `ru_maxrss` of that process.", ""]
        for n, block in data["scale"].items():
            lines += [f"### {int(n):,} passages (default index type: `{block['default_index_type']}`)", "",
                      "| index type | build s | build peak RSS GB | dense file GB | search peak RSS GB | load s | "
                      "param (nprobe / efSearch) | QPS | recall@10 vs Flat |", "|---|---|---|---|---|---|---|---|---|"]
            for row in block["indexes"]:
                for j, run in enumerate(row["search_runs"]):
                    first = j == 0
                    lines.append(f"| `{row['index_type']}`{' + BM25' if row['bm25'] and first else ''} | "
                                 f"{row['build_s'] if first else ''} | {row['peak_rss_gb'] if first else ''} | "
                                 f"{row['dense_gb'] if first else ''} | {row['search_peak_rss_gb'] if first else ''} | "
                                 f"{row['search_load_s'] if first else ''} | {run['param'] if run['param'] is not None else '-'} | "
                                 f"{run['qps']} | {run.get('recall_at_10', '1 (exact)')} |")
            flat = next(r for r in block["indexes"] if r["bm25"])
            lines += ["", f"Passage store {flat['passages_gb']} GB (memory-mapped; {flat['search_store_lookup_passages_per_s']:,} "
                      f"passages/s looked up); BM25 part {flat['bm25_gb']} GB, {flat['search_bm25_qps']} queries/s "
                      f"(synthetic words), serving peak RSS with BM25 loaded {flat['search_bm25_load_peak_rss_gb']} GB.", ""]
            for row in block["indexes"]:
                if "measured" in row:
                    m = row["measured"]
                    lines += [f"`{row['index_type']}`{' + BM25' if row['bm25'] else ''} measured again on its own, "
                              f"{m['date']}, load average at the end {m['load_avg_at_end']}.", ""]
    if "claims" in data:
        c = data["claims"]
        h = data.get("claims_host", {})
        lines += ["## Climate-FEVER claims against all their evidence sentences (real data, MiniLM encoder)", "",
                  f"{c['claims']} claims (the shared file), corpus of {c['corpus_sentences']} distinct evidence "
                  f"sentences, index `{c['index_type']}` + BM25 built in {c['build_s']} s (embedding included; "
                  f"{h.get('date')}, load average {h.get('load_avg_at_end')}). Hit any @N: a claim's given evidence "
                  f"among the top N; hit gold @N: one of its SUPPORTS/REFUTES sentences ({c['claims_with_gold']} "
                  "claims have one); recall @N: share of its 5 sentences found. Retrieval only (no drafter).", "",
                  "| method | QPS | " + " | ".join(f"hit any @{n} | hit gold @{n} | recall @{n}" for n in (5, 10, 20)) + " |",
                  "|---|---|" + "---|" * 9]
        for method, m in c["methods"].items():
            lines.append(f"| {method} | {m['qps']} | " + " | ".join(
                f"{m[f'@{n}']['hit_any']} | {m[f'@{n}']['hit_gold']} | {m[f'@{n}']['recall']}" for n in (5, 10, 20)) + " |")
        lines += ["", "Recall@10 against Flat on these real MiniLM vectors:", "",
                  "| index type | param | recall@10 |", "|---|---|---|"]
        for r in c.get("real_vectors_recall", []):
            key = "nprobe" if "nprobe" in r else "ef_search"
            lines.append(f"| `{r['index_type']}` | {key} {r[key]} | {r['recall_at_10']} |")
        lines.append("")
    if "e2e" in data:
        e = data["e2e"]
        lines += ["## `specrag-batch run --index` end to end on Climate-FEVER claims", "",
                  f"The first {e['rows']} claims, `{e['config']}` (packaged Qwen2.5-Coder-0.5B drafter, default "
                  "selection): with their given evidence (N = 5), and without documents, searched in the "
                  "index above (N = 10) by each method. A handful of rows to show the path works end to end: the "
                  "accuracy column decides nothing.", "",
                  "| arm | rows out | row errors | correct | rows drafting from a given evidence sentence | s |",
                  "|---|---|---|---|---|---|"]
        for arm, a in e["arms"].items():
            lines.append(f"| {arm} | {a['rows_out']} | {a['errors']} | {a['correct']} | "
                         f"{a['rows_drafting_from_given_evidence']} | {a['seconds']} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_build":
        corpus, index, index_type, bm25 = sys.argv[2:6]
        print(json.dumps(child_build(corpus, index, index_type, bm25 == "1")))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_search":
        index, queries, params, truth, save, bm25 = sys.argv[2:8]
        print(json.dumps(child_search(index, queries, params, truth or None, save or None, bm25 == "1")))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("scale")
    s.add_argument("--sizes", default="100000,1000000")
    s.add_argument("--work", default="/tmp/specrag-index-scale")
    s.add_argument("--types", default=None, help="only these index types (separated by ;), measured again")
    c = sub.add_parser("claims")
    c.add_argument("--shared", default=str(ROOT.parent / "shared" / "data"))
    c.add_argument("--work", default="/tmp/specrag-index-scale")
    e = sub.add_parser("e2e")
    e.add_argument("--shared", default=str(ROOT.parent / "shared" / "data"))
    e.add_argument("--work", default="/tmp/specrag-index-scale")
    e.add_argument("--rows", type=int, default=8)
    sub.add_parser("tables")
    a = p.parse_args()
    if a.cmd == "scale":
        run_scale([int(x) for x in a.sizes.split(",")], Path(a.work), set(a.types.split(";")) if a.types else None)
    elif a.cmd == "claims":
        run_claims(Path(a.shared), Path(a.work))
    elif a.cmd == "e2e":
        run_e2e(Path(a.shared), Path(a.work), a.rows)
    else:
        TABLES.write_text(tables(json.loads(RESULTS.read_text())))


if __name__ == "__main__":
    main()
