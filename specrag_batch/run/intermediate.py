"""Intermediate draft Parquet: the hand-off between drafting and verification when the two
stages run on different worker pools (``execution.stages = "disaggregated"``).

A drafter worker runs stages 1-3 (retrieval, multi-perspective sampling, drafting; paper
§3.2) over a shard and writes ``<output>/_drafts/<shard>.parquet``: one row per input row, in
input order, with the row's question, its validation state and its m drafts (answer α,
rationale β, document ids, draft score log ρ_draft in nats). A verifier worker reads it and runs stages
4-5 (paper §3.3) in the same chunks as a fused run, so both topologies give the same answers.

The documents are in the file only when the verifier reads them (``verifier.evidence_aware``,
:attr:`RunConfig.verifier_reads_documents`, the paper's variant Score(α|Q,β,δ), documents added to the rationale): then
each row's ``top_documents`` (as drafting saw them, before any cut) and ``subsets`` (indices into
them, one per draft in draft order) are written, so the verifier side rebuilds each draft's own
documents; otherwise both columns are null (the verifier of §3.3 reads no document). Scores
are stored as float64, so log ρ_draft survives the round trip bit for bit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import pyarrow as pa

from .resume import DRAFTS_DIR  # noqa: F401 - sub-prefix of the output holding draft shards
from ..core.records import Document, Draft, QueryRow
from ..core.schema import CANONICAL, DRAFT_RECORD_TYPE

_STR_LIST = pa.list_(pa.string())

INTERMEDIATE_DRAFT_TYPE = DRAFT_RECORD_TYPE  # verifier scores are null until verification

DRAFTS_SCHEMA = pa.schema([
    ("row_index", pa.int64()),
    ("query_id", pa.string()),
    ("query", pa.string()),
    ("task", pa.string()),
    ("choices", _STR_LIST),
    ("gold", _STR_LIST),
    ("error", pa.string()),
    ("error_reason", pa.string()),
    ("flags", _STR_LIST),
    ("num_documents", pa.int64()),
    ("drafts", pa.list_(INTERMEDIATE_DRAFT_TYPE)),
    ("draft_rounds", pa.int64()),
    ("top_documents", CANONICAL["documents"]),
    ("subsets", pa.list_(pa.list_(pa.int64()))),
])
"""One row per input row. ``drafts`` is empty for a row with an ``error`` (never dropped);
``draft_rounds`` is adaptive drafting's (null when ``sampling.adaptive`` is off);
``top_documents`` and ``subsets`` are null unless written with ``documents=True``."""
_ROW_COLUMNS = ("row_index", "query_id", "query", "task", "choices", "gold", "error", "error_reason",
                "num_documents", "draft_rounds")
OPTIONAL_COLUMNS = {"error_reason", "draft_rounds", "top_documents", "subsets"}
"""Columns added after the first version: a draft shard written before them reads as null."""


def _documents(row: QueryRow, documents: bool) -> dict:
    if not documents or row.top_documents is None:
        return {"top_documents": None, "subsets": None}
    return {"top_documents": [{"doc_id": d.doc_id, "title": d.title, "text": d.text} for d in row.top_documents],
            "subsets": None if row.subsets is None else [list(s) for s in row.subsets]}


def to_table(rows: Sequence[QueryRow], drafts: dict[int, list[Draft]], *, documents: bool = False) -> pa.Table:
    """Rows (after stages 1-3) and their drafts (position in ``rows`` -> drafts) as a
    :data:`DRAFTS_SCHEMA` table, in input order: ``len(rows)`` rows, a row without an entry
    in ``drafts`` gets an empty ``drafts`` list. ``documents``
    (:attr:`RunConfig.verifier_reads_documents`): also each row's ``top_documents`` and
    ``subsets`` (null where the row has none); False leaves both columns null.

    Raises:
        pyarrow.ArrowInvalid, pyarrow.ArrowTypeError: a field does not fit the schema."""
    records = [{**{name: getattr(row, name) for name in _ROW_COLUMNS}, "flags": list(row.flags),
                "drafts": [draft.to_record() for draft in drafts.get(i, [])], **_documents(row, documents)}
               for i, row in enumerate(rows)]
    return pa.Table.from_pylist(records, schema=DRAFTS_SCHEMA)


def from_table(table: pa.Table, file: str) -> tuple[list[QueryRow], dict[int, list[Draft]]]:
    """Inverse of :func:`to_table`: (rows, position -> drafts) with verifier scores unset; a
    row's ``top_documents`` and ``subsets`` (tuples) come back where written, else None.

    Raises:
        ValueError: the table is not a draft shard of this version (names ``file``)."""
    missing = [n for n in DRAFTS_SCHEMA.names if n not in table.schema.names]
    for name in set(missing) & OPTIONAL_COLUMNS:
        column = DRAFTS_SCHEMA.field(name)
        table = table.append_column(column, pa.nulls(table.num_rows, column.type))
        missing.remove(name)
    if missing:
        raise ValueError(f"{file}: not an intermediate draft shard (missing columns {missing})")
    rows: list[QueryRow] = []
    drafts: dict[int, list[Draft]] = {}
    for i, rec in enumerate(table.select(DRAFTS_SCHEMA.names).to_pylist()):
        row = QueryRow(**{name: rec[name] for name in _ROW_COLUMNS}, flags=list(rec["flags"] or []))
        if rec["top_documents"] is not None:
            row.top_documents = [Document(d["doc_id"], d["title"], d["text"]) for d in rec["top_documents"]]
        if rec["subsets"] is not None:
            row.subsets = [tuple(s) for s in rec["subsets"]]
        rows.append(row)
        if rec["drafts"]:
            drafts[i] = [Draft.from_record(draft) for draft in rec["drafts"]]
    return rows, drafts


def ids_digest(query_ids: Iterable[str]) -> str:
    """sha256 (hex) of the query ids in order: ties a draft shard to its input rows."""
    h = hashlib.sha256()
    for q in query_ids:
        h.update(q.encode() + b"\0")
    return h.hexdigest()


def check_matches(rows: Sequence[QueryRow], expected: dict, file: str) -> None:
    """Check a draft shard read back against its drafting result (``rows_out``, ``digest``).

    Raises:
        ValueError: row count or query ids differ (names the file): the file was replaced or
            belongs to another shard."""
    if expected.get("rows_out") is not None and len(rows) != expected["rows_out"]:
        raise ValueError(f"{file}: draft shard has {len(rows)} rows, its done marker says "
                         f"{expected['rows_out']}")
    if expected.get("digest") and ids_digest(row.query_id for row in rows) != expected["digest"]:
        raise ValueError(f"{file}: draft shard's query ids differ from those its done marker records")
