"""``specrag-batch index info``: what an index holds and the operating point its build measured
(:mod:`specrag_batch.index.tuning`). Registered on the ``index`` app by :mod:`specrag_batch.cli.commands`."""

from __future__ import annotations

import typer
from rich.text import Text

from .options import offline_errors
from .console import console


def index_info(index: str = typer.Argument(..., help="Index directory URI (local or s3://).")) -> None:
    """Print the index's documents, type, parts and the operating point its build measured
    (recall@k against exact search, the nprobe/efSearch a run searches with by default,
    queries/s). Not an index: exit 2, one line."""
    from ..index.layout import read_meta
    from ..index.tuning import describe, search_defaults

    with offline_errors(where=index):
        meta = read_meta(index)
    dense = meta.get("dense") or {"index_type": "Flat (first layout)"}
    parts = dense.get("index_type", "?") + (", bm25" if meta.get("bm25") else "")
    console.print(Text(f"index: {meta.get('documents', '?')} documents, dim {meta.get('dimension', '?')}, {parts}; "
                       f"embedding model {meta.get('embedding_model', '?')}"
                       + (f" (column {meta['embedding_column']!r})" if meta.get("embedding_column") else "")))
    console.print(Text(f"operating point: {describe(dense.get('operating_point'), dense.get('index_type', ''))}"))
    nprobe, ef = search_defaults(meta)
    console.print(Text(f"a run searches with: nprobe {nprobe}, efSearch {ef} (retrieval.nprobe / "
                       "retrieval.ef_search override them)"))
