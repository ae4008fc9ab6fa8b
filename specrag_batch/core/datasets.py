"""Public evaluation datasets (the shared data directory's files) in the pipeline's input
schema, and the rule that keeps evaluation rows out of drafter training (paper §3.1 data).

Every converter yields dicts with ``query_id``, ``query``, ``task``, ``documents``, ``choices``,
``gold``. They build the bundled demo sample (``scripts/make_samples.py``), the benchmarks' rows
and the drafter's training rows.

The split rule, explicit and tested: the benchmarks report on rows of the Climate-FEVER, PopQA
(Self-RAG), ARC-Challenge (Self-RAG), HotpotQA and NQ-open files, always taken from the *start*
of each file in file order. The first :data:`BENCHMARK_RESERVE` rows of every such file are
reserved for evaluation, and training rows come only from

* rows after the reserve in those files (Climate-FEVER, HotpotQA, NQ-open; the Self-RAG PopQA
  and ARC files have fewer rows than the reserve, so nothing of them is used), and
* MuSiQue (a sample of its *train* split), which the benchmarks do not use.

ARC-Challenge's official train split is not used: it has no retrieved passages. NQ-open has
one (gold) passage per question; :data:`NQ_DISTRACTORS` passages of other questions are added
so that multi-perspective sampling has documents to choose among.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

BENCHMARK_RESERVE = 300
"""Rows at the start of each evaluation dataset file that training never reads."""

NQ_DISTRACTORS = 9
"""Passages from other NQ-open questions added to each question's gold passage (N = 10)."""

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
    """NQ-open (one gold passage per question): the evaluation reserve only (the first
    :data:`BENCHMARK_RESERVE` questions of the file, which drafter training never reads), each
    with 9 gold passages of other reserved questions as distractors (N = 10,
    :func:`nq_open_passages`). The passages are put in an order drawn per row (seeded by the
    query id), so the gold passage is not always first: Standard RAG reads the documents in the
    given order and would otherwise always start with the answer."""
    return nq_open_passages(root, skip=0, stop=BENCHMARK_RESERVE)


DATASETS = {"climate_fever": climate_fever, "popqa": popqa, "arc_challenge": arc_challenge,
            "hotpotqa": hotpotqa, "nq_open": nq_open}


def take(rows: Iterator[dict], n: int, skip: int = 0) -> list[dict]:
    """The ``n`` rows of ``rows`` after the first ``skip`` (fewer when it runs out), in order."""
    out = []
    for i, r in enumerate(rows):
        if i < skip:
            continue
        if len(out) == n:
            break
        out.append(r)
    return out


def write(rows: list[dict], path: Path) -> None:
    """Write input-schema dicts as one Parquet file (:data:`INPUT_SCHEMA`), creating its folder.

    Raises:
        pyarrow.ArrowInvalid: a row that does not fit the input schema."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=INPUT_SCHEMA), path)


def nq_question_id(question: str) -> str:
    """Stable NQ-open query id (the data set has none): ``nq-open:<sha1(question)[:16]>``."""
    return "nq-open:" + hashlib.sha1(question.encode()).hexdigest()[:16]


def nq_open_passages(root: Path, skip: int = BENCHMARK_RESERVE, stop: int | None = None,
            distractors: int = NQ_DISTRACTORS) -> list[dict]:
    """NQ-open rows ``skip:stop`` of the file (input schema dicts): the gold passage and
    ``distractors`` (default :data:`NQ_DISTRACTORS`) gold passages of other questions of the
    same slice, shuffled with the question id as seed (training: rows
    after the reserve, never of reserved rows; the benchmark, ``skip=0,
    stop=BENCHMARK_RESERVE``: reserved rows only). gold = the answer aliases. More distractors
    give N = 20 or 40 documents (``benchmarks/throughput.py``); the first
    :data:`NQ_DISTRACTORS` are the same passages whatever the number."""
    raw = list(_jsonl(root / "nq_open_oracle" / "nq-open-oracle.shared.jsonl"))[skip:stop]
    rows = []
    for i, r in enumerate(raw):
        qid = nq_question_id(r["question"])
        docs = [{"doc_id": f"{qid}:gold", "title": c.get("title") or "", "text": c.get("text") or ""}
                for c in r["ctxs"][:1]]
        for j in range(1, distractors + 1):
            o = raw[(i + j * 7) % len(raw)]  # stride 7: neighbours in the file share topics less
            if o is not r and o["ctxs"]:
                docs.append({"doc_id": f"{nq_question_id(o['question'])}:gold", "title": o["ctxs"][0].get("title") or "",
                             "text": o["ctxs"][0].get("text") or ""})
        # the gold passage at a seeded position, not always first: a drafter tuned on rows whose
        # first document always holds the answer would learn the position, not the evidence
        random.Random(int(hashlib.sha256(qid.encode()).hexdigest()[:16], 16)).shuffle(docs)
        rows.append({"query_id": qid, "query": r["question"], "task": "qa", "documents": docs,
                     "choices": None, "gold": list(r["answers"])})
    return rows


def musique(root: Path) -> list[dict]:
    """MuSiQue train-split sample (all rows: the benchmark does not use MuSiQue), 20 paragraphs
    each; gold = answer and aliases."""
    path = root / "musique_hipporag_sample" / "musique_train_sample.shared.json"
    try:
        data = json.loads(path.read_bytes())
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{path}: not JSON ({e})") from None
    return [{"query_id": f"musique:{r['id']}", "query": r["question"], "task": "qa",
             "documents": [{"doc_id": f"musique:{r['id']}:{p['idx']}", "title": p["title"],
                            "text": p["paragraph_text"]} for p in r["paragraphs"]],
             "choices": None, "gold": [r["answer"], *r.get("answer_aliases", [])]}
            for r in data if r.get("answerable", True)]


class NotATrainingSourceError(ValueError):
    """A dataset name that is not a training source (``--datasets``)."""


BENCHMARK_DATASETS = ("climate_fever", "popqa", "arc_challenge", "hotpotqa", "nq_open")
"""Datasets the benchmark reports on (:data:`DATASETS` names)."""


def benchmark_rows(root: Path) -> dict[str, list[dict]]:
    """The reserved rows of every benchmark dataset (first :data:`BENCHMARK_RESERVE` of each
    file): what training must never contain."""
    return {n: list(DATASETS[n](root))[:BENCHMARK_RESERVE] for n in BENCHMARK_DATASETS}


def training_rows(root: Path, datasets: tuple[str, ...] = ("climate_fever", "hotpotqa", "nq_open", "musique"),
                  limit: int | None = None) -> dict[str, list[dict]]:
    """Training input rows per dataset, under the rule of this module's docstring.

    ``limit`` caps rows per dataset (first rows after the reserve). Only the datasets named
    are read.

    Raises:
        NotATrainingSourceError: an unknown dataset name, or one the benchmark reports on that
            has no rows after the reserve (PopQA, Self-RAG ARC).
        FileNotFoundError: a dataset's file is missing under ``root``.
        ValueError: a file that is not JSON (lines) or not UTF-8 (named, with the line), or a
            record without a field the conversion reads (naming the dataset, ``root`` and the
            field)."""
    readers = {"nq_open": nq_open_passages, "musique": musique,
               **{n: lambda r, n=n: list(DATASETS[n](r))[BENCHMARK_RESERVE:]
                  for n in ("climate_fever", "hotpotqa")}}
    out: dict[str, list[dict]] = {}
    for name in datasets:
        if name not in readers:
            raise NotATrainingSourceError(
                f"dataset {name!r}: not a training source (choose from climate_fever, "
                "hotpotqa, nq_open, musique; popqa and arc_challenge are benchmark-only)")
        try:
            rows = readers[name](root)
        except (KeyError, TypeError, AttributeError, IndexError) as e:  # valid JSON, another shape
            what = f"field {e}" if isinstance(e, KeyError) else f"{type(e).__name__}: {e}"
            raise ValueError(f"dataset {name!r} under {root}: a record without the expected fields "
                             f"({what})") from None
        out[name] = rows[:limit] if limit is not None else rows
    return out


def write_training_inputs(root: Path, out_dir: Path, **kw) -> dict[str, int]:
    """Write :func:`training_rows` as one input-schema Parquet per dataset under ``out_dir``
    (the input of ``specrag-batch drafter data``). Returns rows per dataset."""
    schema = INPUT_SCHEMA
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, rows in training_rows(root, **kw).items():
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), out_dir / f"{name}.parquet")
        counts[name] = len(rows)
    return counts
