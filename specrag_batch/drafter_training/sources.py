"""Where drafter-training rows may come from (paper §3.1 data, under the benchmark's rules).

The rule, explicit and tested (``tests/unit/test_drafter_split.py``,
``tests/unit/test_decision_rows.py``): the benchmark (``benchmarks/decision.py``) reports on rows of the Climate-FEVER, PopQA (Self-RAG), ARC-Challenge
(Self-RAG), HotpotQA and NQ-open files of ``../shared/data``, always taken from the *start* of
each file in file order. The first :data:`BENCHMARK_RESERVE` rows of every such file are
reserved for it (tuning rows 0-19, reported rows up to 139: ``decision.REPORT_START``), and
training rows come only from

* rows after the reserve in those files (Climate-FEVER, HotpotQA, NQ-open; the Self-RAG PopQA
  and ARC files have fewer rows than the reserve, so nothing of them is used), and
* MuSiQue (a sample of its *train* split), which the benchmark does not use.

ARC-Challenge's official train split is not used: it has no retrieved passages. NQ-open has
one (gold) passage per question; :data:`NQ_DISTRACTORS` passages of other training questions
are added so that multi-perspective sampling has documents to choose among.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path

BENCHMARK_RESERVE = 300
"""Rows at the start of each benchmark dataset file that training never reads."""

NQ_DISTRACTORS = 9
"""Passages from other NQ-open training questions added to each question's gold passage (N = 10)."""

ROOT = Path(__file__).resolve().parents[2]


def make_samples():
    """The benchmark's converter module (``scripts/make_samples.py``), so training sees the
    same query ids, file order and input schema as the benchmark.

    Raises:
        FileNotFoundError: ``scripts/make_samples.py`` is not next to the package (an
            installed wheel without the repository)."""
    path = ROOT / "scripts"
    if not (path / "make_samples.py").exists():
        raise FileNotFoundError(f"{path / 'make_samples.py'} not found: run from a checkout of the repository")
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
    import make_samples as mod

    return mod


def benchmark_converters() -> dict:
    """``make_samples.DATASETS``: benchmark dataset name -> row iterator (input schema dicts)."""
    return make_samples().DATASETS


def nq_question_id(question: str) -> str:
    """Stable NQ-open query id (the data set has none): ``nq-open:<sha1(question)[:16]>``."""
    return "nq-open:" + hashlib.sha1(question.encode()).hexdigest()[:16]


def nq_open(root: Path, skip: int = BENCHMARK_RESERVE, stop: int | None = None,
            distractors: int = NQ_DISTRACTORS) -> list[dict]:
    """NQ-open rows ``skip:stop`` of the file (input schema dicts): the gold passage and
    ``distractors`` (default :data:`NQ_DISTRACTORS`) gold passages of other questions of the
    same slice, shuffled with the question id as seed (training: rows
    after the reserve, never of reserved rows; the benchmark, ``skip=0,
    stop=BENCHMARK_RESERVE``: reserved rows only). gold = the answer aliases. More distractors
    give N = 20 or 40 documents (``benchmarks/throughput.py``); the first
    :data:`NQ_DISTRACTORS` are the same passages whatever the number."""
    raw = list(make_samples()._jsonl(root / "nq_open_oracle" / "nq-open-oracle.shared.jsonl"))[skip:stop]
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
"""Datasets the benchmark reports on (``make_samples.DATASETS`` names)."""


def benchmark_rows(root: Path) -> dict[str, list[dict]]:
    """The reserved rows of every benchmark dataset (first :data:`BENCHMARK_RESERVE` of each
    file): what training must never contain."""
    conv = benchmark_converters()
    return {n: list(conv[n](root))[:BENCHMARK_RESERVE] for n in BENCHMARK_DATASETS}


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
    readers = {"nq_open": nq_open, "musique": musique,
               **{n: lambda r, n=n: list(benchmark_converters()[n](r))[BENCHMARK_RESERVE:]
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
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = make_samples().INPUT_SCHEMA
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, rows in training_rows(root, **kw).items():
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), out_dir / f"{name}.parquet")
        counts[name] = len(rows)
    return counts
