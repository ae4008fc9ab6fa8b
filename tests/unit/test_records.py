"""The typed records: one draft conversion, flag names, one row-error format, stage contracts."""

import pyarrow as pa
import pytest

from specrag_batch.core.records import Draft, Flag, QueryRow, is_valid_draft, row_error
from specrag_batch.core.schema import DRAFT_RECORD_TYPE, DRAFT_TYPE
from specrag_batch.run.pipeline import Pipeline
from specrag_batch.stages import Stage, StageContractError


def _draft() -> Draft:
    return Draft(["d1", "d2"], "Mercury", "closest to the Sun", [Flag.NON_FINITE_LOGPROB], True,
                 score_draft=-1.25, score_self_consistency=-3.5, score_self_reflection=-0.1 - 0.2,
                 score=-4.85, written_answer="C", logprob_yes=-0.3, logprob_no=-1.5,
                 tokens_draft=12, tokens_answer=1, tokens_rationale=6)


def test_draft_round_trips_through_its_parquet_record_exactly():
    draft = _draft()
    table = pa.Table.from_pylist([{"d": draft.to_record()}], schema=pa.schema([("d", DRAFT_RECORD_TYPE)]))
    back = Draft.from_record(table.to_pylist()[0]["d"])
    assert back == draft and back.score_self_reflection == -0.1 - 0.2  # floats bit for bit


def test_output_draft_record_has_no_valid_and_is_judged_by_its_flags():
    names = {DRAFT_TYPE.field(i).name for i in range(DRAFT_TYPE.num_fields)}
    assert set(_draft().to_record()) - names == {"valid"}
    record = {k: v for k, v in _draft().to_record().items() if k in names}
    assert Draft.from_record(record).valid
    record["flags"] = ["empty_rationale"]
    assert not Draft.from_record(record).valid and not is_valid_draft(record["flags"])
    assert Draft(["d"], "Paris", "x").to_record()["written_answer"] == "Paris"  # empty = as answer


def test_flags_are_their_names():
    assert Flag.NON_FINITE_LOGPROB == "non_finite_logprob" and "truncated_documents" in [Flag.TRUNCATED_DOCUMENTS]


def test_row_error_format():
    assert row_error(3, "q7", "documents", "no documents (N = 0)") == \
        "row 3 (query_id='q7'): field 'documents': no documents (N = 0)"
    assert row_error(0, None, "query_id", "null or empty", where="s3://b/x.parquet") == \
        "s3://b/x.parquet: row 0: field 'query_id': null or empty"


class _Forgets(Stage):
    name = timer_name = "forgets"
    reads = ("query",)
    writes = ("subsets",)

    def __call__(self, rows):
        rows[0].subsets = [(0,)]  # the second row gets nothing


def test_pipeline_checks_what_a_stage_wrote_on_every_row_without_error():
    rows = [QueryRow(0, "a", "A?", "qa"), QueryRow(1, "b", "B?", "qa")]
    with pytest.raises(StageContractError, match="after stage 'forgets': row 1 .* has no 'subsets'"):
        Pipeline([_Forgets()], chunk_rows=2).run(rows)
    rows = [QueryRow(0, "a", "A?", "qa"), QueryRow(1, "b", "B?", "qa", error="bad")]
    Pipeline([_Forgets()], chunk_rows=2).run(rows)  # a row with an error is passed over
    assert rows[0].subsets == [(0,)] and rows[1].subsets is None
