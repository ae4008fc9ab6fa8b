"""Convert evaluation data (the shared data directory) to the pipeline's input schema.

Used to build the bundled demo sample (``samples/``) and by tests and benchmarks::

    python scripts/make_samples.py --shared ../shared/data --out samples

Every converter yields dicts with query_id, query, task, documents, choices, gold.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

INPUT_SCHEMA = pa.schema([
    ("query_id", pa.string()), ("query", pa.string()), ("task", pa.string()),
    ("documents", pa.list_(pa.struct([("doc_id", pa.string()), ("title", pa.string()),
                                      ("text", pa.string())]))),
    ("choices", pa.list_(pa.string())), ("gold", pa.list_(pa.string())),
])


def _jsonl(path: Path) -> Iterator[dict]:
    """The records of a JSON-lines file (blank lines skipped).

    Raises:
        ValueError: a line that is not JSON, or bytes that are not UTF-8, naming the file and
            the line (1-based)."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
                if line.strip():
                    record = json.loads(line)
            except ValueError as e:  # UnicodeDecodeError, JSONDecodeError
                what = "UTF-8" if isinstance(e, UnicodeDecodeError) else "JSON"
                raise ValueError(f"{path}: line {n}: not {what} ({e})") from None
            if line.strip():
                yield record


def climate_fever(root: Path) -> Iterator[dict]:
    """Claims with their 5 evidence sentences; gold = SUPPORTS/REFUTES/NOT_ENOUGH_INFO/DISPUTED."""
    for r in _jsonl(root / "climate_fever" / "climate-fever.shared.jsonl"):
        yield {"query_id": f"climate-fever:{r['claim_id']}", "query": r["claim"], "task": "claim",
               "documents": [{"doc_id": e["evidence_id"], "title": e["article"], "text": e["evidence"]}
                             for e in r["evidences"]],
               "choices": None, "gold": [r["claim_label"]]}


def popqa(root: Path) -> Iterator[dict]:
    """PopQA long-tail questions with Contriever passages (Self-RAG format); gold = aliases."""
    for r in _jsonl(root / "selfrag_popqa" / "popqa_longtail_w_gs_example.shared.jsonl"):
        yield {"query_id": f"popqa:{r['id']}", "query": r["question"], "task": "qa",
               "documents": [{"doc_id": str(c.get("id") or f"popqa:{r['id']}:ctx{j}"), "title": c.get("title") or "",
                              "text": (c.get("text") or "").strip()} for j, c in enumerate(r["ctxs"])],
               "choices": None, "gold": list(r["answers"])}


def arc_challenge(root: Path) -> Iterator[dict]:
    """ARC-Challenge (Self-RAG format, 20 passages); gold = the correct option text."""
    for r in _jsonl(root / "selfrag_arc_challenge" / "arc_challenge_processed_example.shared.jsonl"):
        texts, labels = r["choices"]["text"], r["choices"]["label"]
        gold = texts[labels.index(r["answerKey"])]
        yield {"query_id": f"arc:{r['id']}", "query": r["question"], "task": "choice",
               "documents": [{"doc_id": str(c.get("id") or f"arc:{r['id']}:ctx{j}"), "title": c.get("title") or "",
                              "text": (c.get("text") or "").strip()} for j, c in enumerate(r["ctxs"])],
               "choices": texts, "gold": [gold]}


def hotpotqa(root: Path) -> Iterator[dict]:
    """HotpotQA (IRCoT dev subsample): 10 gold + distractor paragraphs; gold = answer spans."""
    for r in _jsonl(root / "hotpotqa_ircot_dev" / "dev_subsampled.shared.jsonl"):
        spans = [s for a in r["answers_objects"] for s in a["spans"]]
        yield {"query_id": f"hotpotqa:{r['question_id']}", "query": r["question_text"], "task": "qa",
               "documents": [{"doc_id": f"{r['question_id']}:{c['id']}", "title": c["title"],
                              "text": c["paragraph_text"]} for c in r["contexts"]],
               "choices": None, "gold": spans}


def nq_open(root: Path) -> list[dict]:
    """NQ-open (one gold passage per question): the benchmark's reserved rows only (the first
    ``BENCHMARK_RESERVE`` questions of the file, which drafter training never reads), each with
    9 gold passages of other reserved questions as distractors (N = 10, built by
    ``drafter_training.sources.nq_open``). The passages are put in an order drawn per row
    (seeded by the query id), so the gold passage is not always first: Standard RAG reads the
    documents in the given order and would otherwise always start with the answer."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from specrag_batch.drafter_training.sources import BENCHMARK_RESERVE
    from specrag_batch.drafter_training.sources import nq_open as build

    return build(root, skip=0, stop=BENCHMARK_RESERVE)  # build shuffles each row's passages


DATASETS = {"climate_fever": climate_fever, "popqa": popqa, "arc_challenge": arc_challenge,
            "hotpotqa": hotpotqa, "nq_open": nq_open}


def take(rows: Iterator[dict], n: int, skip: int = 0) -> list[dict]:
    out = []
    for i, r in enumerate(rows):
        if i < skip:
            continue
        if len(out) == n:
            break
        out.append(r)
    return out


def write(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=INPUT_SCHEMA), path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shared", default="../shared/data", type=Path)
    ap.add_argument("--out", default="samples", type=Path)
    a = ap.parse_args()
    write(take(climate_fever(a.shared), 40), a.out / "demo" / "climate_fever.parquet")
    write(take(popqa(a.shared), 20), a.out / "demo" / "popqa.parquet")
    # a small corpus for the FAISS retrieval demo/test: PopQA passages of the demo questions
    docs = {}
    for r in take(popqa(a.shared), 20):
        for d in r["documents"]:
            docs.setdefault(d["doc_id"], d)
    (a.out / "corpus").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(list(docs.values())), a.out / "corpus" / "popqa_passages.parquet")
    print(f"wrote {a.out}/demo and {a.out}/corpus ({len(docs)} passages)")


if __name__ == "__main__":
    main()
