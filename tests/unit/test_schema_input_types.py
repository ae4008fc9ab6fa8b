"""Input shards as other teams' tools write them: Polars, pandas (pyarrow engine), DuckDB's
``COPY ... TO``, pyarrow itself. Every type that means the same thing is read (cast once to the
canonical schema); a type that means something else is refused naming column, type, accepted."""

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specrag_batch.run.planning import read_validated
from specrag_batch.core.schema import CANONICAL, InputSchemaError, conform, validate_table

DOC = {"doc_id": "d1", "title": "Tokyo", "text": "The yen is the currency of Japan."}


def _rows(path, task=None):
    return read_validated(str(path), set(), task)


def _check(rows, n=2):
    assert len(rows) == n and [r.error for r in rows] == [None] * n
    assert rows[0].query_id == "q1" and rows[0].query == "What is the currency of Japan?"
    assert rows[0].task == "qa"


def test_polars_categorical_enum_empty_lists_and_struct_order(tmp_path):
    """``pl.DataFrame.write_parquet``: Categorical -> dictionary<string>, Enum list ->
    list<dictionary>, an all-empty list column -> large_list<null>, struct fields in Polars'
    order plus an extra numeric field."""
    df = pl.DataFrame({
        "query_id": ["q1", "q2"],
        "query": ["What is the currency of Japan?", "Capital of France?"],
        "task": pl.Series(["qa", "choice"], dtype=pl.Categorical),
        "documents": [[{"title": "Tokyo", "score": 0.9, "text": DOC["text"], "doc_id": "d1"}],
                      [{"title": "Paris", "score": 0.5, "text": "Paris is the capital.", "doc_id": "d2"}]],
        "choices": pl.Series([[], ["Paris", "Lyon"]], dtype=pl.List(pl.Enum(["Paris", "Lyon"]))),
        "gold": [[], []],
        "extra": [1, 2],
    })
    df.write_parquet(tmp_path / "pl.parquet")
    rows = _rows(tmp_path / "pl.parquet")
    assert [r.error for r in rows] == [None, None]
    assert rows[0].task == "qa" and rows[1].task == "choice"
    assert rows[0].documents[0].__dict__ == DOC
    assert rows[1].choices == ["Paris", "Lyon"] and rows[0].gold == []


def test_polars_string_view(tmp_path):
    """Polars' writer storing Arrow's string_view (``arrow_schema=``, as the issue's shard had
    it): string_view strings, large_list of string_view, documents with string_view fields."""
    sv = pa.string_view()
    df = pl.DataFrame({"query_id": ["q1", "q2"], "query": ["What is the currency of Japan?", "b?"],
                       "task": ["qa", "qa"], "documents": [[DOC], [DOC]], "gold": [["yen"], ["x"]]})
    schema = pa.schema([("query_id", sv), ("query", sv), ("task", sv),
                        ("documents", pa.large_list(pa.struct([(k, sv) for k in DOC]))),
                        ("gold", pa.large_list(sv))])
    df.write_parquet(tmp_path / "plv.parquet", arrow_schema=schema)
    assert pq.read_schema(tmp_path / "plv.parquet").field("query").type == sv
    rows = _rows(tmp_path / "plv.parquet")
    _check(rows)
    assert rows[0].documents[0].__dict__ == DOC and rows[0].gold == ["yen"]


def test_pandas_category_column(tmp_path):
    """pandas with pyarrow: a ``category`` column is written as dictionary<string>."""
    df = pd.DataFrame({"query_id": ["q1", "q2"], "query": ["What is the currency of Japan?", "b?"],
                       "task": pd.Categorical(["qa", "qa"]),
                       "documents": [[DOC], [{"text": "only text"}]], "gold": [["yen"], None]})
    df.to_parquet(tmp_path / "pd.parquet", engine="pyarrow")
    assert pa.types.is_dictionary(pq.read_schema(tmp_path / "pd.parquet").field("task").type)
    rows = _rows(tmp_path / "pd.parquet")
    _check(rows)
    assert rows[1].documents[0].text == "only text" and rows[1].documents[0].doc_id == "0"


def test_duckdb_copy_to(tmp_path):
    """DuckDB ``COPY ... TO 'x.parquet'``: VARCHAR, ENUM, LIST and STRUCT (fields in another
    order, an extra INTEGER field, no title)."""
    out = tmp_path / "duck.parquet"
    con = duckdb.connect()
    con.execute("CREATE TYPE task_t AS ENUM ('qa', 'claim', 'choice')")
    con.execute(f"""COPY (SELECT * FROM (VALUES
        ('q1', 'What is the currency of Japan?', 'qa'::task_t,
         [{{'text': '{DOC["text"]}', 'rank': 1, 'doc_id': 'd1'}}], ['yen']),
        ('q2', 'b?', 'qa'::task_t, [{{'text': 'x', 'rank': 2, 'doc_id': 'd2'}}], [])
        ) AS t(query_id, query, task, documents, gold)) TO '{out}' (FORMAT parquet)""")
    rows = _rows(out)
    _check(rows)
    assert rows[0].documents[0].__dict__ == {"doc_id": "d1", "title": "", "text": DOC["text"]}
    assert rows[0].gold == ["yen"] and rows[1].gold == []


def test_pyarrow_list_view_and_large_list_view(tmp_path):
    """list_view columns (out-of-order views included) keep their lists exactly."""
    lv = pa.ListViewArray.from_arrays([1, 0], [2, 1], pa.array(["a", "b", "c"]))
    assert lv.to_pylist() == [["b", "c"], ["a"]]
    t = pa.table({"query_id": ["q1", "q2"], "query": ["What is the currency of Japan?", "b?"],
                  "task": ["qa", "qa"], "gold": lv,
                  "choices": pa.array([["x"], None], pa.large_list_view(pa.string_view()))})
    pq.write_table(t, tmp_path / "lv.parquet")
    rows = _rows(tmp_path / "lv.parquet")
    _check(rows)
    assert [r.gold for r in rows] == [["b", "c"], ["a"]]
    assert [r.choices for r in rows] == [["x"], None]


def test_conform_casts_once_to_canonical_and_drops_other_columns():
    t = pa.table({"query_id": pa.array(["q1"], pa.string_view()), "query": pa.array(["a"], pa.large_string()),
                  "task": pa.array(["qa"]).dictionary_encode(), "gold": pa.array([["g"]], pa.large_list(pa.string_view())),
                  "other": [1]})
    out = conform(t, "f.parquet")
    assert out.schema == pa.schema([(n, CANONICAL[n]) for n in ("query_id", "query", "task", "gold")])


@pytest.mark.parametrize("col, arr, found", [
    ("query_id", pa.array([[1], [2]]), "list<item: int64>"),
    ("task", pa.array([1, 2]).dictionary_encode(), "dictionary<values=int64"),
    ("gold", pa.array([[1], [2]]), "list<item: int64>"),
    ("documents", pa.array([[{"title": "t"}], []]), "list<item: struct<title: string>>"),
    ("documents", pa.array([[{"text": 1}], []]), "list<item: struct<text: int64>>"),
    ("choices", pa.array(["a", "b"]), "string"),
])
def test_refuses_what_really_differs_naming_column_type_and_accepted(col, arr, found):
    base = {"query_id": ["q1", "q2"], "query": ["a?", "b?"], "task": ["qa", "qa"]}
    base[col] = arr
    with pytest.raises(InputSchemaError) as e:
        validate_table(pa.table(base), "f.parquet")
    msg = str(e.value)
    if col == "query_id":  # the first row with a value is named (schema.check_query_ids)
        found = f"row 0: [1] is a {found} value"
    else:
        found = f"got {found}"
    assert msg.startswith(f"f.parquet: column '{col}': {found}")
    assert "accepted:" in msg and "string_view" in msg and "dictionary" in msg
    if col in ("gold", "choices", "documents"):
        assert "large_list" in msg and "list_view" in msg


def test_integer_ids_are_read_as_decimal_strings(tmp_path):
    """pandas' integer ids are read as the ids' decimal strings, in validation and in
    planning's id read alike, and the shard's rows are kept (not dropped)."""
    from specrag_batch.run.planning import read_ids

    pd.DataFrame({"query_id": [7, 12], "query": ["a?", "b?"], "task": ["qa", "qa"]}).to_parquet(
        tmp_path / "ints.parquet", engine="pyarrow")
    assert [r.query_id for r in _rows(tmp_path / "ints.parquet")] == ["7", "12"]
    assert read_ids(str(tmp_path / "ints.parquet")) == ["7", "12"]
    for t in (pa.uint8(), pa.int32()):
        rows = validate_table(pa.table({"query_id": pa.array([None, 3], t), "query": ["a?", "b?"],
                                        "task": ["qa", "qa"]}), "f.parquet")
        assert [r.query_id for r in rows] == ["<row 0>", "3"] and rows[0].error_reason == "empty_query_id"


def test_float_ids_are_refused_naming_the_row_and_the_field(tmp_path):
    """pandas writes integer ids with a missing value as float64: 1.0 is not read as "1"."""
    from specrag_batch.run.planning import read_ids

    pd.DataFrame({"query_id": [None, 1.0], "query": ["a?", "b?"], "task": ["qa", "qa"]}).to_parquet(
        tmp_path / "floats.parquet", engine="pyarrow")
    want = (f"{tmp_path / 'floats.parquet'}: column 'query_id': row 1: 1.0 is a double value; accepted: string, "
            "large_string, string_view, dictionary<_, string> (or all null), or an integer type (read as its "
            "decimal string); write the ids as strings or integers (a float id such as 1.0 is not read as 1)")
    with pytest.raises(InputSchemaError) as e:
        _rows(tmp_path / "floats.parquet")
    assert str(e.value) == want
    with pytest.raises(InputSchemaError) as e:
        read_ids(str(tmp_path / "floats.parquet"))
    assert str(e.value) == want
