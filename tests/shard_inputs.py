"""Small input shards of Standard RAG rows for planning and resume tests: the config they run
under (:data:`CFG`), a shard of given query ids (:func:`shard`) and its Parquet file
(:func:`write`)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from .conftest import small_config

CFG = small_config(mode="standard")
DOC = {"doc_id": "d", "title": "t", "text": "The yen is the currency of Japan."}


def shard(*ids: str, query=None) -> pa.Table:
    n = len(ids)
    return pa.table({"query_id": list(ids), "query": query if query is not None else [f"{i}?" for i in ids],
                     "task": ["qa"] * n, "documents": [[DOC]] * n})


def write(inp, name: str, table: pa.Table) -> None:
    (inp / name).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, inp / name)
