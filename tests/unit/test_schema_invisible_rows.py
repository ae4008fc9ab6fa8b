"""Row validation judges query, query_id and choices on their visible text (NFKC, format
characters dropped), and a real query_id cannot take the '<row N>' form given to null ids."""

import pyarrow as pa

from specrag_batch.core.records import ErrorReason
from specrag_batch.core.schema import validate_table


def rows(**cols):
    n = len(cols["query_id"])
    cols.setdefault("query", ["Capital of France?"] * n)
    cols.setdefault("task", ["qa"] * n)
    return validate_table(pa.table(cols), "in.parquet")


def test_invisible_query_id_query_and_choices_are_empty():
    out = rows(query_id=["\u200b", "q2", "q3"],
               query=["Q?", "\u200b\ufeff\u00ad", "Q?"],
               task=["qa", "qa", "choice"],
               choices=[None, None, ["\u200b", "\ufeff"]])
    assert [r.error_reason for r in out] == [ErrorReason.EMPTY_QUERY_ID, ErrorReason.EMPTY_QUERY,
                                             ErrorReason.NO_CHOICES]


def test_real_id_in_synthetic_form_is_refused():
    out = rows(query_id=["<row 1>", None])
    assert out[0].error_reason == ErrorReason.EMPTY_QUERY_ID
    assert "reserved form" in out[0].error and "row 0" in out[0].error
    assert out[1].query_id == "<row 1>" and out[1].error_reason == ErrorReason.EMPTY_QUERY_ID
