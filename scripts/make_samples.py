"""Build the bundled demo sample (``samples/``) from the shared evaluation data::

    python scripts/make_samples.py --shared ../shared/data --out samples

The converters are :mod:`specrag_batch.core.datasets`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from specrag_batch.core.datasets import climate_fever, popqa, take, write


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
