"""Input and output schemas, and up-front validation of input shards.

Input (Parquet, one shard = one file):

==========  ==========================================  ========
column      type                                        required
==========  ==========================================  ========
query_id    string (unique across the run)              yes
query       string (non-empty)                          yes
task        string: ``qa`` | ``claim`` | ``choice``     yes
documents   list<struct<doc_id, title, text: string>>   no
choices     list<string> (required for ``choice``)      no
gold        list<string> accepted answers / the label   no
==========  ==========================================  ========

A *file-level* problem (missing column, wrong column type) raises :class:`InputSchemaError`
naming the file and the field: the shard stops, other shards go on. A *row-level* problem
(null query, unknown task, duplicate id, ...) gives that row an ``error`` naming the row and
the field; the other rows are answered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

TASKS = ("qa", "claim", "choice")
REQUIRED = ("query_id", "query", "task")
OPTIONAL = ("documents", "choices", "gold")


class InputSchemaError(ValueError):
    """A shard cannot be read as the input schema. ``str()`` names the file and the field."""

    def __init__(self, file: str, field: str, reason: str):
        self.file, self.field, self.reason = file, field, reason
        super().__init__(f"{file}: column '{field}': {reason}")


@dataclass
class Document:
    """One retrieved passage."""

    doc_id: str
    title: str
    text: str


@dataclass
class QueryRow:
    """One validated input row. ``error`` is set (and the row not processed) when invalid."""

    row_index: int
    query_id: str
    query: str
    task: str
    documents: list[Document] | None = None
    choices: list[str] | None = None
    gold: list[str] | None = None
    error: str | None = None
    flags: list[str] = field(default_factory=list)
    num_documents: int | None = None  # N after retrieval (set by the pipeline)


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_list_of(t: pa.DataType, pred) -> bool:
    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and pred(t.value_type)


def _is_document_struct(t: pa.DataType) -> bool:
    if not pa.types.is_struct(t):
        return False
    names = {t.field(i).name: t.field(i).type for i in range(t.num_fields)}
    return "text" in names and all(
        _is_string(names[n]) or pa.types.is_null(names[n]) for n in ("doc_id", "title", "text") if n in names)


def check_schema(schema: pa.Schema, file: str, task: str | None = None) -> None:
    """Check column presence and types. With a fixed ``task`` the ``task`` column is optional.

    Raises:
        InputSchemaError: a required column is missing or any known column has a wrong type.
    """
    names = set(schema.names)
    for col in REQUIRED:
        if col == "task" and task is not None and col not in names:
            continue
        if col not in names:
            raise InputSchemaError(file, col, f"required column missing (have: {sorted(names)})")
        if not (_is_string(schema.field(col).type) or pa.types.is_null(schema.field(col).type)):
            raise InputSchemaError(file, col, f"expected string, got {schema.field(col).type}")
    if "documents" in names:
        t = schema.field("documents").type
        if not (_is_list_of(t, _is_document_struct) or pa.types.is_null(t)):
            raise InputSchemaError(
                file, "documents", f"expected list<struct<doc_id, title, text: string>>, got {t}")
    for col in ("choices", "gold"):
        if col in names:
            t = schema.field(col).type
            if not (_is_list_of(t, _is_string) or pa.types.is_null(t)):
                raise InputSchemaError(file, col, f"expected list<string>, got {t}")


def validate_table(table: pa.Table, file: str, seen_ids: set[str] | None = None,
                   task: str | None = None) -> list[QueryRow]:
    """Validate a shard and return one :class:`QueryRow` per input row, in input order.

    Args:
        table: the shard as read from Parquet.
        file: its URI, used in messages.
        seen_ids: query ids already seen in earlier shards of this run; updated in place.
            A repeated id (within or across shards) gets a row error, never a silent drop.
        task: the run's fixed task (config ``task``, e.g. ``claim`` for bulk claim
            verification): a missing ``task`` column means every row has it, and a row naming
            another task gets a row error.

    Raises:
        InputSchemaError: file-level problem (see :func:`check_schema`).
    """
    check_schema(table.schema, file, task)
    seen = seen_ids if seen_ids is not None else set()
    cols = {c: table.column(c).to_pylist() for c in (*REQUIRED, *OPTIONAL) if c in table.schema.names}
    if "task" not in cols:
        cols["task"] = [task] * table.num_rows
    elif task is not None:  # a null cell means the run's task, as a missing column does
        cols["task"] = [t if t is not None else task for t in cols["task"]]
    rows: list[QueryRow] = []
    for i in range(table.num_rows):
        qid = cols["query_id"][i]
        where = f"{file}: row {i}"
        row = QueryRow(row_index=i, query_id=qid if qid is not None else f"<row {i}>",
                       query=cols["query"][i] or "", task=cols["task"][i] or "")
        err = None
        if qid is None or not str(qid).strip():
            err = f"{where}: field 'query_id': null or empty"
        elif qid in seen:
            err = f"{where}: field 'query_id': duplicate id {qid!r}"
        elif cols["query"][i] is None or not cols["query"][i].strip():
            err = f"{where} (query_id={qid!r}): field 'query': null or empty"
        elif cols["task"][i] not in TASKS:
            err = (f"{where} (query_id={qid!r}): field 'task': unknown value "
                   f"{cols['task'][i]!r} (expected one of {', '.join(TASKS)})")
        elif task is not None and cols["task"][i] != task:
            err = (f"{where} (query_id={qid!r}): field 'task': {cols['task'][i]!r}, but this run "
                   f"only takes {task!r} rows (config 'task')")
        if qid is not None:
            seen.add(qid)
        docs = cols.get("documents", [None] * table.num_rows)[i]
        if docs is not None:
            row.documents = [
                Document(doc_id=str(d.get("doc_id") if d.get("doc_id") is not None else j),
                         title=d.get("title") or "", text=d.get("text") or "")
                for j, d in enumerate(docs) if d is not None]
        row.choices = cols.get("choices", [None] * table.num_rows)[i]
        row.gold = cols.get("gold", [None] * table.num_rows)[i]
        if err is None and row.task == "choice":
            opts = [c for c in (row.choices or []) if c is not None and c.strip()]
            if not opts:
                err = f"{where} (query_id={qid!r}): field 'choices': missing or empty for task 'choice'"
            else:
                row.choices = opts
        row.error = err
        rows.append(row)
    return rows


_SCORES = [
    ("score", pa.float64()),
    ("score_draft", pa.float64()),
    ("score_self_consistency", pa.float64()),
    ("score_self_reflection", pa.float64()),
]

DRAFT_TYPE = pa.struct([
    ("doc_ids", pa.list_(pa.string())),
    ("answer", pa.string()),
    ("rationale", pa.string()),
    *_SCORES,
    ("flags", pa.list_(pa.string())),
])

OUTPUT_SCHEMA = pa.schema([
    ("query_id", pa.string()),
    ("task", pa.string()),
    ("query", pa.string()),
    ("answer", pa.string()),
    ("rationale", pa.string()),
    *_SCORES,
    ("low_confidence", pa.bool_()),
    ("fast_path", pa.bool_()),
    ("num_documents", pa.int32()),
    ("drafts", pa.list_(DRAFT_TYPE)),
    ("flags", pa.list_(pa.string())),
    ("error", pa.string()),
    ("gold", pa.list_(pa.string())),
    ("correct", pa.bool_()),
    ("exact_match", pa.bool_()),
    ("f1", pa.float64()),
    ("mode", pa.string()),
    ("drafter_model", pa.string()),
    ("verifier_model", pa.string()),
    ("run_id", pa.string()),
    ("source_file", pa.string()),
])
"""Output schema: one row per input row. ``score*`` are natural-log probabilities
(log ρ, log ρ_draft, log ρ_SC, log ρ_SR); a term that was switched off or skipped is null.
``correct`` is the paper's metric (match for QA, accuracy for claim/choice) where gold exists."""
