"""The intermediate draft format (``intermediate``): rows, their errors and their drafts' scores
go through the draft Parquet of a disaggregated run bit for bit, and a draft shard written
before ``error_reason`` existed still reads."""

from __future__ import annotations

import pyarrow as pa
import pytest

from specrag_batch.run import intermediate
from specrag_batch.core.schema import QueryRow
from specrag_batch.core.records import Draft


def test_intermediate_round_trip_keeps_rows_errors_and_scores_exactly():
    rows = [QueryRow(0, "q0", "Q0?", "qa", gold=["a"], flags=["truncated_documents"], num_documents=4),
            QueryRow(1, "q1", "Q1?", "choice", choices=["x", "y"], error="f: row 1: field 'choices': bad",
                     error_reason="no_choices"),
            QueryRow(2, "q2", "Q2?", "claim", num_documents=2)]
    drafts = {0: [Draft(["d1", "d2"], "Paris", "because", ["no_answer_field"], True, -12.345678901234567),
                  Draft(["d3"], "", "", [], False, None)],
              2: [Draft(["d9"], "SUPPORTS", "it says so", [], True, -0.1 - 0.2)]}
    table = intermediate.to_table(rows, drafts)
    assert table.schema == intermediate.DRAFTS_SCHEMA and "documents" not in table.column_names
    back_rows, back_drafts = intermediate.from_table(table, "d.parquet")
    assert back_rows == rows and back_drafts == drafts  # floats bit for bit
    # a draft shard written before error_reason existed still reads (the code as null)
    old_rows, _ = intermediate.from_table(table.drop_columns(["error_reason"]), "d.parquet")
    assert [r.error_reason for r in old_rows] == [None, None, None] and old_rows[1].error == rows[1].error
    with pytest.raises(ValueError, match="d.parquet: not an intermediate draft shard"):
        intermediate.from_table(pa.table({"query_id": ["a"]}), "d.parquet")
