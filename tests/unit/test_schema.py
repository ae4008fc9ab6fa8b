import pyarrow as pa
import pytest

from specrag_batch.core.schema import InputSchemaError, validate_table

DOCS = pa.list_(pa.struct([("doc_id", pa.string()), ("title", pa.string()), ("text", pa.string())]))


def table(**cols):
    base = {"query_id": ["q1", "q2"], "query": ["a?", "b?"], "task": ["qa", "qa"]}
    base.update(cols)
    return pa.table({k: v for k, v in base.items() if v is not None})


def test_valid_rows():
    rows = validate_table(table(documents=pa.array([[{"doc_id": "d", "title": "t", "text": "x"}], None], DOCS)), "f.parquet")
    assert [r.error for r in rows] == [None, None]
    assert rows[0].documents[0].text == "x" and rows[1].documents is None


def test_missing_required_column_names_file_and_field():
    with pytest.raises(InputSchemaError, match=r"f\.parquet: column 'task': required column missing"):
        validate_table(table(task=None), "f.parquet")


def test_wrong_column_type():
    with pytest.raises(InputSchemaError, match=r"f\.parquet: column 'query': got int64; accepted: string"):
        validate_table(table(query=[1, 2]), "f.parquet")
    with pytest.raises(InputSchemaError, match=r"column 'documents': got list<item: string>; accepted: a list"):
        validate_table(table(documents=[["a"], ["b"]]), "f.parquet")
    with pytest.raises(InputSchemaError, match=r"column 'gold': got int64; accepted: a list"):
        validate_table(table(gold=[1, 2]), "f.parquet")


def test_row_errors_name_row_and_field_and_keep_other_rows():
    t = pa.table({"query_id": ["q1", "q2", "q1", None, "q5", "q6"],
                  "query": ["a?", None, "c?", "d?", "e?", "  "],
                  "task": ["qa", "qa", "qa", "qa", "poem", "qa"]})
    rows = validate_table(t, "f.parquet")
    assert len(rows) == 6
    assert rows[0].error is None
    assert rows[1].error == "f.parquet: row 1 (query_id='q2'): field 'query': null or empty"
    assert rows[2].error == "f.parquet: row 2: field 'query_id': duplicate id 'q1', held by row 0 of this shard"
    assert rows[3].error == "f.parquet: row 3: field 'query_id': null or empty"
    assert rows[4].error == ("f.parquet: row 4 (query_id='q5'): field 'task': unknown value 'poem' "
                             "(expected one of qa, claim, choice)")
    assert rows[5].error == "f.parquet: row 5 (query_id='q6'): field 'query': null or empty"
    assert [r.error_reason for r in rows] == [None, "empty_query", "duplicate_query_id", "empty_query_id",
                                              "unknown_task", "empty_query"]


def test_duplicate_across_shards_via_seen_ids():
    rows = validate_table(table(), "g.parquet", seen_ids={"q2"})
    assert rows[0].error is None and rows[1].error.endswith("duplicate id 'q2'")
    rows = validate_table(table(), "g.parquet", seen_ids={"q2": "s3://b/in/a.parquet"})
    assert rows[0].error is None
    assert rows[1].error.endswith("duplicate id 'q2', held by s3://b/in/a.parquet")


def test_choice_needs_choices():
    t = table(task=["choice", "choice"], choices=pa.array([["x", "y"], []], pa.list_(pa.string())))
    rows = validate_table(t, "f.parquet")
    assert rows[0].error is None and rows[0].choices == ["x", "y"]
    assert rows[1].error == "f.parquet: row 1 (query_id='q2'): field 'choices': missing or empty for task 'choice'"
    assert rows[1].error_reason == "no_choices" and rows[0].error_reason is None


def test_zero_rows():
    assert validate_table(table(query_id=pa.array([], pa.string()), query=pa.array([], pa.string()),
                                task=pa.array([], pa.string())), "f.parquet") == []
