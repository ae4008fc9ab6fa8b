"""``specrag-batch index info``: what an index holds and the operating point its build measured
(:mod:`specrag_batch.index.tuning`). Registered on the ``index`` app by :mod:`specrag_batch.cli.commands`."""

from __future__ import annotations

from typing import Optional

import typer
from rich.text import Text

from .options import offline_errors
from .console import console, err_console


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


def index_build(
    corpus: str = typer.Option(..., "--corpus", help="Corpus: one Parquet file, or a prefix/directory of "
                               ".parquet shards (local or s3://), with doc_id, text and optional title."),
    output: str = typer.Option(..., "--output", "-o", help="Index directory URI to write (an index there is "
                               "replaced once the new one is complete)."),
    embedding_model: str = typer.Option("all-MiniLM-L6-v2", help="sentence-transformers model (passages, queries)."),
    batch_size: int = typer.Option(64, min=1, help="Embedding batch size (texts)."),
    embedding_column: Optional[str] = typer.Option(
        None, help="Corpus column holding the passages' vectors (fixed-size list of floats made by "
        "--embedding-model): nothing is embedded."),
    index_type: Optional[str] = typer.Option(
        None, help="FAISS factory string: Flat, IVF{nlist},Flat, IVF{nlist},PQ{m}, HNSW{M}. "
        "Default by corpus size: Flat up to 100k passages, IVF{~4·sqrt(n)},Flat up to 5M, then IVF-PQ."),
    bm25: bool = typer.Option(True, "--bm25/--no-bm25", help="Also build the BM25 part (retrieval.method "
                              "bm25 and hybrid need it)."),
    train_size: Optional[int] = typer.Option(None, min=1, help="Vectors sampled to train an IVF/PQ index "
                                             "(default 50 per IVF list, at least 65536)."),
    target_recall: float = typer.Option(0.95, min=0.0, max=1.0, help="recall@k against exact search the operating point must reach."),
    recall_k: int = typer.Option(10, min=1, help="k of that recall@k."),
    holdout: int = typer.Option(1000, min=1, help="Held-out queries measuring recall (corpus passages, or --queries)."),
    queries: Optional[str] = typer.Option(None, help="Parquet file of your queries (a `query` column) to measure recall on."),
) -> None:
    """Build a retrieval index (dense FAISS + BM25) for `run --index`.

    Measures recall@k on held-out queries and records the smallest nprobe/efSearch reaching
    --target-recall (runs search with it). Resumable: started again with the same command, a
    build stopped or killed halfway takes the shards and phases it had finished. A bad corpus
    or index type exits 2 with one line, before anything is embedded, and leaves any index at
    --output as it was."""
    from ..index import build_index
    from ..index.progress import progress_bar
    from ..index.tuning import describe

    with offline_errors(), progress_bar(err_console) as progress:  # bad input, unwritable output: exit 2, one line
        meta = build_index(corpus, output, embedding_model, batch_size, embedding_column=embedding_column,
                           index_type=index_type, bm25=bm25, train_size=train_size, progress=progress,
                           log=lambda line: err_console.print(Text(line)), target_recall=target_recall,
                           recall_k=recall_k, holdout=holdout, queries_uri=queries)
    parts = f"{meta['dense']['index_type']}" + (", bm25" if meta["bm25"] else "")
    console.print(f"index: {meta['documents']} documents from {meta['shards']} shard(s), dim {meta['dimension']}, "
                  f"{parts}; {meta['shards_embedded']} shard(s) embedded, {meta['shards_skipped']} already done; "
                  f"{meta['seconds']}s -> {output}")
    console.print(Text(f"operating point: {describe(meta['dense']['operating_point'], meta['dense']['index_type'])}"))
