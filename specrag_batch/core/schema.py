"""Input and output schemas, and up-front validation of input shards.

Input (Parquet, one shard = one file):

==========  ==========================================  ========
column      type                                        required
==========  ==========================================  ========
query_id    string or integer (unique across the run)   yes
query       string (non-empty)                          yes
task        string: ``qa`` | ``claim`` | ``choice``     yes
documents   list<struct<doc_id, title, text: string>>   no
choices     list<string> (required for ``choice``)      no
gold        list<string> accepted answers / the label   no
==========  ==========================================  ========

"string" means any Arrow layout of text (``string``, ``large_string``, ``string_view``, a
dictionary of those as pandas ``category``/Polars ``Categorical`` write it), "list" any of
``list``, ``large_list``, ``list_view``, ``large_list_view``; struct fields match by name in any
order, other fields and columns are ignored. An integer ``query_id`` column is read as the
ids' decimal strings (``7`` -> ``"7"``); a float or any other type is refused, naming the first
row that has a value (``1.0`` and ``1`` would be two ids). Each shard is cast once, at read time,
to :data:`CANONICAL`.

A *file-level* problem (missing column, wrong column type) raises :class:`InputSchemaError`
naming the file and the field: the shard stops, other shards go on. A *row-level* problem
(null query, unknown task, duplicate id, ...) gives that row an ``error`` naming the row and
the field; the other rows are answered.
"""

from __future__ import annotations

import re
from typing import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from .records import Document, ErrorReason, QueryRow, row_error, visible_text

__all__ = ["Document", "QueryRow"]  # re-exported: the row types live in records

TASKS = ("qa", "claim", "choice")
REQUIRED = ("query_id", "query", "task")
OPTIONAL = ("documents", "choices", "gold")
SYNTHETIC_ID = re.compile(r"<row \d+>")  # output id of a row whose query_id is null; refused as a real id


class InputSchemaError(ValueError):
    """A shard cannot be read as the input schema. ``str()`` names the file and the field."""

    def __init__(self, file: str, field: str, reason: str):
        self.file, self.field, self.reason = file, field, reason
        super().__init__(f"{file}: column '{field}': {reason}")


STRING_TYPES = "string, large_string, string_view, dictionary<_, string> (or all null)"
LIST_TYPES = "list, large_list, list_view, large_list_view"
DOC_FIELDS = ("doc_id", "title", "text")
_DOCS_ACCEPTED = (f"a list ({LIST_TYPES}) of struct with a string field 'text' and optional "
                  f"fields 'doc_id' (string or integer) and 'title' (string), in any order, other fields ignored; "
                  f"strings: {STRING_TYPES}")
_STRINGS_ACCEPTED = f"a list ({LIST_TYPES}) of strings ({STRING_TYPES})"
_STRING = pa.string()
_DOCUMENT = pa.struct([(n, _STRING) for n in DOC_FIELDS])
CANONICAL = {"query_id": _STRING, "query": _STRING, "task": _STRING, "documents": pa.list_(_DOCUMENT),
             "choices": pa.list_(_STRING), "gold": pa.list_(_STRING)}
"""The types rows are read in: every accepted input type is cast to these once, at read time."""


def _is_string(t: pa.DataType) -> bool:
    """Text, however the writer laid it out (Polars: ``string_view``/``large_string``, pandas
    ``category``: dictionary of strings) or an all-null column."""
    if pa.types.is_dictionary(t):
        return _is_string(t.value_type) and not pa.types.is_null(t.value_type)
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)
            or pa.types.is_null(t))


def _is_list_view(t: pa.DataType) -> bool:
    return pa.types.is_list_view(t) or pa.types.is_large_list_view(t)


def _is_list_of(t: pa.DataType, pred) -> bool:
    return ((pa.types.is_list(t) or pa.types.is_large_list(t) or _is_list_view(t))
            and (pred(t.value_type) or pa.types.is_null(t.value_type)))


def _is_document_struct(t: pa.DataType) -> bool:
    if not pa.types.is_struct(t):
        return False
    names = {t.field(i).name: t.field(i).type for i in range(t.num_fields)}
    return ("text" in names and all(_is_string(names[n]) for n in DOC_FIELDS if n in names
                                    and not (n == "doc_id" and pa.types.is_integer(names[n]))))


_IDS_ACCEPTED = f"{STRING_TYPES}, or an integer type (read as its decimal string)"


def _is_id(t: pa.DataType) -> bool:
    """A ``query_id`` type: text (:func:`_is_string`) or an integer (read as decimal strings)."""
    return _is_string(t) or pa.types.is_integer(t)


def check_query_ids(col: pa.ChunkedArray | pa.Array, file: str) -> None:
    """Refuse a ``query_id`` column of a type other than text or integer (a float column, as
    pandas writes integer ids with a missing value, or a list), naming the first row with a
    value and that value.

    Raises:
        InputSchemaError: ``<file>: column 'query_id': row <i>: <value> is a <type>; ...``."""
    if _is_id(col.type):
        return
    values = col.to_pylist()
    i = next((j for j, v in enumerate(values) if v is not None), 0)
    first = f"row {i}: {values[i]!r} is a {col.type} value" if values and values[i] is not None \
        else f"got {col.type} (every value null)"
    raise InputSchemaError(file, "query_id", f"{first}; accepted: {_IDS_ACCEPTED}; write the ids as "
                           "strings or integers (a float id such as 1.0 is not read as 1)")


_ACCEPTS = {"query_id": (_is_id, _IDS_ACCEPTED), "query": (_is_string, STRING_TYPES),
            "task": (_is_string, STRING_TYPES),
            "documents": (lambda t: _is_list_of(t, _is_document_struct), _DOCS_ACCEPTED),
            "choices": (lambda t: _is_list_of(t, _is_string), _STRINGS_ACCEPTED),
            "gold": (lambda t: _is_list_of(t, _is_string), _STRINGS_ACCEPTED)}


def check_schema(schema: pa.Schema, file: str, task: str | None = None) -> None:
    """Check column presence and types. With a fixed ``task`` the ``task`` column is optional.
    Columns not in the input schema are ignored. Accepted types (all cast to :data:`CANONICAL`
    by :func:`conform`): strings as ``string``, ``large_string``, ``string_view`` or a
    dictionary of those; lists as ``list``, ``large_list``, ``list_view`` or
    ``large_list_view``; document structs with their fields in any order, extra fields ignored;
    an all-null column of any of these.

    Raises:
        InputSchemaError: a required column is missing, a known column appears more than
            once, or a known column has a type that means something else, naming the column,
            the type found and the types accepted.
    """
    names = set(schema.names)
    for col in (*REQUIRED, *OPTIONAL):
        if schema.names.count(col) > 1:
            raise InputSchemaError(file, col, f"appears {schema.names.count(col)} times; "
                                   "a column name must be unique")
    for col in REQUIRED:
        if col == "task" and task is not None and col not in names:
            continue
        if col not in names:
            raise InputSchemaError(file, col, f"required column missing (have: {sorted(names)})")
    for col, (ok, accepted) in _ACCEPTS.items():
        if col in names and not (ok(schema.field(col).type) or pa.types.is_null(schema.field(col).type)):
            raise InputSchemaError(file, col, f"got {schema.field(col).type}; accepted: {accepted}")


def _list_from_view(arr: pa.Array) -> pa.Array:
    """A ``list_view`` array as a ``list`` array, same lists. pyarrow 26's list_view -> list
    cast returns invalid offsets (and wrong values for out-of-order views), so the lists are
    rebuilt from the flattened values and the lengths (whole-array kernels, no row loop)."""
    lengths = pc.fill_null(pc.list_value_length(arr), 0).cast(pa.int64())
    offsets = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(lengths)])
    return pa.LargeListArray.from_arrays(offsets, pc.list_flatten(arr), mask=arr.is_null())


def conform(table: pa.Table, file: str, task: str | None = None) -> pa.Table:
    """The input columns of ``table`` (``query_id``, ``query``, ``task``, ``documents``,
    ``choices``, ``gold``, those present) cast once to :data:`CANONICAL`; other columns dropped.
    Missing ``doc_id``/``title`` struct fields come out null; integer ``doc_id`` and
    ``query_id`` values are cast to their decimal strings.

    Raises:
        InputSchemaError: see :func:`check_schema` and :func:`check_query_ids`; also a string
            that is not valid UTF-8 (naming the column, and the row of a top-level string column).
    """
    if table.schema.names.count("query_id") == 1:
        check_query_ids(table.column("query_id"), file)
    check_schema(table.schema, file, task)
    cols = {}
    for name in CANONICAL:
        if name not in table.schema.names:
            continue
        col = table.column(name)
        if _is_list_view(col.type):
            col = pa.chunked_array([_list_from_view(c) for c in col.chunks],
                                   pa.large_list(col.type.value_type))
        try:
            cols[name] = col.cast(CANONICAL[name])
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise InputSchemaError(file, name, f"cannot read {col.type} as {CANONICAL[name]}: {e}") from e
        _check_utf8(cols[name], file, name)
    return pa.table(cols)


def conform_corpus(table: pa.Table, file: str) -> pa.Table:
    """A retrieval corpus (``index build``) as ``doc_id``, ``title``, ``text`` strings, other
    columns dropped. Field types as a document's in the input (:func:`check_schema`):
    ``doc_id`` a string or an integer (read as its decimal string), ``text`` a string,
    ``title`` a string or absent (then null); any string layout, or an all-null column.
    A null ``text`` or ``title`` is kept (a retrieved empty passage is removed from its row and
    flagged ``empty_documents_removed``).

    Raises:
        InputSchemaError: no rows; ``doc_id`` or ``text`` missing or repeated (``title``
            repeated); a column of another type;
            a null or repeated ``doc_id`` (naming the rows); a string that is not UTF-8
            (naming the row)."""
    names = table.schema.names
    for col in DOC_FIELDS:
        if names.count(col) > 1:
            raise InputSchemaError(file, col, f"appears {names.count(col)} times; a column name must be unique")
    for col in ("doc_id", "text"):
        if col not in names:
            raise InputSchemaError(file, col, f"required column missing (have: {sorted(names)})")
    if table.num_rows == 0:
        raise InputSchemaError(file, "doc_id", "no rows: an index over an empty corpus retrieves nothing")
    cols = {}
    for col in DOC_FIELDS:
        if col not in names:
            cols[col] = pa.nulls(table.num_rows, _STRING)
            continue
        t = table.schema.field(col).type
        if not (_is_string(t) or (col == "doc_id" and pa.types.is_integer(t))):
            accepted = STRING_TYPES + (", or an integer type" if col == "doc_id" else "")
            raise InputSchemaError(file, col, f"got {t}; accepted: {accepted}")
        cols[col] = table.column(col).cast(_STRING)
        _check_utf8(cols[col], file, col)
    ids = cols["doc_id"].to_pylist()
    first: dict[str, int] = {}
    for i, doc_id in enumerate(ids):
        if doc_id is None:
            raise InputSchemaError(file, "doc_id", f"row {i}: null; every passage needs an id")
        if doc_id in first:
            raise InputSchemaError(file, "doc_id", f"duplicate doc_id {doc_id!r} (rows {first[doc_id]} and {i})")
        first[doc_id] = i
    return pa.table(cols)


_STRING_INDEX = re.compile(r"Invalid UTF8 sequence at string index (\d+)")


def _check_utf8(col: pa.ChunkedArray, file: str, name: str) -> None:
    """Every string in ``col`` (nested ones too) is UTF-8: bytes of another encoding stored under
    a string type would otherwise fail later as a bare ``UnicodeDecodeError``.

    Raises:
        InputSchemaError: naming the column and, for a top-level string column, the row."""
    offset = 0
    for chunk in col.chunks:
        try:
            chunk.validate(full=True)
        except pa.ArrowInvalid as e:
            m = _STRING_INDEX.search(str(e))
            at = f"row {offset + int(m.group(1))}: " if m and pa.types.is_string(col.type) else ""
            raise InputSchemaError(file, name, f"{at}not valid UTF-8 (Arrow: {e})") from None
        offset += len(chunk)


def validate_table(table: pa.Table, file: str, seen_ids: Mapping[str, str] | set[str] | None = None,
                   task: str | None = None) -> list[QueryRow]:
    """Validate a shard and return one :class:`QueryRow` per input row, in input order.

    Args:
        table: the shard as read from Parquet.
        file: its URI, used in messages.
        seen_ids: query ids another shard of this run answers (:func:`run.plan_ids`), each
            with that shard's URI when a mapping (named in the error). A repeated id (within
            or across shards) gets a row error (``duplicate_query_id``, ``error`` naming where
            the id is held), never a silent drop.
        task: the run's fixed task (config ``task``, e.g. ``claim`` for bulk claim
            verification): a missing ``task`` column means every row has it, and a row naming
            another task gets a row error.

    Raises:
        InputSchemaError: file-level problem (see :func:`check_schema`); accepted column
            types are cast once to :data:`CANONICAL` (:func:`conform`).
    """
    table = conform(table, file, task)
    seen = dict(seen_ids) if isinstance(seen_ids, Mapping) else dict.fromkeys(seen_ids or (), "")
    cols = {c: table.column(c).to_pylist() for c in (*REQUIRED, *OPTIONAL) if c in table.schema.names}
    if "task" not in cols:
        cols["task"] = [task] * table.num_rows
    elif task is not None:  # a null cell means the run's task, as a missing column does
        cols["task"] = [t if t is not None else task for t in cols["task"]]
    rows: list[QueryRow] = []
    for i in range(table.num_rows):
        qid = cols["query_id"][i]
        row = QueryRow(row_index=i, query_id=qid if qid is not None else f"<row {i}>",
                       query=cols["query"][i] or "", task=cols["task"][i] or "")
        err = code = None
        if qid is None or not visible_text(qid):
            err, code = row_error(i, None, "query_id", "null or empty", where=file), ErrorReason.EMPTY_QUERY_ID
        elif SYNTHETIC_ID.fullmatch(qid):  # the form a null id is given in the output
            err = row_error(i, qid, "query_id", f"{qid!r} has the reserved form '<row N>' "
                            "given to rows with a null id", where=file)
            code = ErrorReason.EMPTY_QUERY_ID
        elif qid in seen:
            where = f", held by {seen[qid]}" if seen[qid] else ""
            err = row_error(i, None, "query_id", f"duplicate id {qid!r}{where}", where=file)
            code = ErrorReason.DUPLICATE_QUERY_ID
        elif cols["query"][i] is None or not visible_text(cols["query"][i]):
            err, code = row_error(i, qid, "query", "null or empty", where=file), ErrorReason.EMPTY_QUERY
        elif cols["task"][i] not in TASKS:
            err = row_error(i, qid, "task", f"unknown value {cols['task'][i]!r} "
                            f"(expected one of {', '.join(TASKS)})", where=file)
            code = ErrorReason.UNKNOWN_TASK
        elif task is not None and cols["task"][i] != task:
            err = row_error(i, qid, "task", f"{cols['task'][i]!r}, but this run only takes "
                            f"{task!r} rows (config 'task')", where=file)
            code = ErrorReason.TASK_NOT_IN_RUN
        if qid is not None:
            seen.setdefault(qid, f"row {i} of this shard")
        docs = cols.get("documents", [None] * table.num_rows)[i]
        if docs is not None:
            row.documents = [
                Document(doc_id=str(d.get("doc_id") if d.get("doc_id") is not None else j),
                         title=d.get("title") or "", text=d.get("text") or "")
                for j, d in enumerate(docs) if d is not None]
        row.choices = cols.get("choices", [None] * table.num_rows)[i]
        row.gold = cols.get("gold", [None] * table.num_rows)[i]
        if err is None and row.task == "choice":
            opts = [c for c in (row.choices or []) if c is not None and visible_text(c)]
            if not opts:
                err = row_error(i, qid, "choices", "missing or empty for task 'choice'", where=file)
                code = ErrorReason.NO_CHOICES
            else:
                row.choices = opts
        row.error, row.error_reason = err, code
        rows.append(row)
    return rows


_SCORES = [(name, pa.float64())
           for name in ("score", "score_draft", "score_self_consistency", "score_self_reflection")]

DRAFT_TYPE = pa.struct([
    ("doc_ids", pa.list_(pa.string())), ("answer", pa.string()), ("written_answer", pa.string()),
    ("rationale", pa.string()), *_SCORES, ("logprob_yes", pa.float64()), ("logprob_no", pa.float64()),
    *[(f"tokens_{part}", pa.int32()) for part in ("draft", "answer", "rationale")],
    ("flags", pa.list_(pa.string())),
    ("label_logprobs", pa.list_(pa.struct([("label", pa.string()), ("logprob", pa.float64())]))),
])
"""One draft: ``answer`` canonical (label / option text), ``written_answer`` α as the drafter
wrote it (what the verifier scored, e.g. ``B``); ``logprob_yes``/``logprob_no`` the verifier's
log P(Yes), log P(No) after R; ``tokens_*`` the number of tokens behind each score (drafter
tokens of β+α for ``score_draft``; verifier tokens of α and of β for
``score_self_consistency``; ``score_self_reflection`` is one position); ``label_logprobs``
the drafter's log P(label | Q, δ, β) per label of a claim/choice row (``selection.label_distribution``).
Written and read by :meth:`records.Draft.to_record` / :meth:`records.Draft.from_record`."""

DRAFT_RECORD_TYPE = pa.struct([*DRAFT_TYPE, ("valid", pa.bool_())])
"""A draft as the intermediate draft Parquet holds it: :data:`DRAFT_TYPE` and ``valid`` (whether
the draft takes part in selection; the output keeps only its flags)."""

OUTPUT_SCHEMA = pa.schema([
    *[(name, pa.string()) for name in ("query_id", "task", "query", "answer", "rationale")],
    *_SCORES, ("low_confidence", pa.bool_()), ("confidence", pa.float64()), ("fast_path", pa.bool_()),
    ("num_documents", pa.int32()),
    ("drafts", pa.list_(DRAFT_TYPE)), ("flags", pa.list_(pa.string())), ("error", pa.string()),
    ("error_reason", pa.string()),
    ("gold", pa.list_(pa.string())), ("correct", pa.bool_()), ("exact_match", pa.bool_()),
    ("f1", pa.float64()), ("draft_rounds", pa.int32()), ("answer_source", pa.string()),
    ("first_answer", pa.string()), ("first_score", pa.float64()), ("first_correct", pa.bool_()),
    ("fallback_error", pa.string()), ("verifier_drafts_deduplicated", pa.int32()),
    ("reused_from", pa.string()), ("reused_answer_source", pa.string()),
    ("label_distribution", pa.list_(pa.struct([("label", pa.string()), ("probability", pa.float64())]))),
    ("label_probability", pa.float64()),
    *[(name, pa.string()) for name in ("mode", "drafter_model", "verifier_model", "run_id", "source_file")],
])
"""Output schema: one row per input row. ``score*`` are natural-log probabilities
(log ρ, log ρ_draft, log ρ_SC, log ρ_SR); a term that was switched off or skipped is null.
``confidence``: the calibrated probability that the answer is right (``selection.confidence:
calibrated``, :mod:`specrag_batch.confidence.measures`; of the first pass on a row the fallback answered),
null under the other measures.
``correct`` is the paper's metric (match for QA, accuracy for claim/choice) where gold exists.
``error_reason``: the :class:`~specrag_batch.core.records.ErrorReason` code of ``error`` (null when
the row has none).
``draft_rounds``: adaptive drafting's rounds (1 = stopped on the first round's consensus, 2;
null when ``sampling.adaptive`` is off). ``answer_source``: which pass the answer columns
come from, ``first`` or the fallback pass (``fallback_standard``, ``fallback_wider``: the
first answer was low-confidence, ``selection.fallback``); ``first_answer``, ``first_score``,
``first_correct`` keep the first pass's answer of a row the fallback answered;
``fallback_error``: why a flagged row kept its first answer (flag ``fallback_failed``).
``verifier_drafts_deduplicated``: verifier forward passes saved on the row by
``verifier.deduplicate_drafts`` (drafts scored from another draft's pass with the same input
tokens; both passes of a row the fallback answered); null when it is off or the verifier
scored none of the row's drafts.
``reused_from``: the earlier output shard a row was copied from (``answer_source: reused``,
:mod:`specrag_batch.run.reuse`), ``reused_answer_source`` the pass that answered it there; null
for a row computed in this run.
``label_distribution``, ``label_probability``: a claim/choice
row's distribution over its labels and its answer's probability (``selection.label_distribution``;
null otherwise)."""
