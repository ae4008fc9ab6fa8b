"""The scheduled flows' helpers (``scheduled``, re-exported by flows/): dates and partitions,
the schedule's time zone, the config a deployment passes, partitions that must exist and hold
shards, and the claim-verification label counts (no engines, no Prefect runs)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from flows.partitions import (
    dates_between,
    parse_date,
    partition_uri,
    resolve_config,
    scheduled_date,
)
from specrag_batch.config.execution import ExecutionConfig

from ..conftest import ROOT


def test_dates_and_partitions():
    assert [d.isoformat() for d in dates_between("2026-02-27", "2026-03-01")] == \
        ["2026-02-27", "2026-02-28", "2026-03-01"]
    assert dates_between("2026-11-01", "2026-11-01") == [dt.date(2026, 11, 1)]
    with pytest.raises(ValueError, match="end_date 2026-10-31 is before start_date 2026-11-01"):
        dates_between("2026-11-01", "2026-10-31")
    with pytest.raises(ValueError, match="parameter 'start_date': expected a date YYYY-MM-DD, got '2026-13-01'"):
        dates_between("2026-13-01", "2026-12-01")
    assert partition_uri("s3://b/q/", dt.date(2026, 1, 2)) == "s3://b/q/date=2026-01-02"
    assert parse_date(dt.date(2026, 1, 2), "date") == dt.date(2026, 1, 2)


def test_scheduled_date_uses_the_schedule_timezone():
    # 23:30 UTC on the 28th is already the 29th in Amsterdam (UTC+1): yesterday = the 28th there
    now = dt.datetime(2026, 11, 28, 23, 30, tzinfo=dt.UTC)
    assert scheduled_date("Europe/Amsterdam", 1, now) == dt.date(2026, 11, 28)
    assert scheduled_date("UTC", 1, now) == dt.date(2026, 11, 27)
    assert scheduled_date("America/New_York", 0, now) == dt.date(2026, 11, 28)


def test_resolve_config_path_inline_and_overrides():
    cfg = resolve_config(None, str(ROOT / "configs" / "claims.yaml"), {"sampling.num_drafts": 3})
    assert cfg.task == "claim" and cfg.sampling.num_drafts == 3
    cfg = resolve_config({"seed": 7}, None, {"task": "claim"})
    assert cfg.seed == 7 and cfg.task == "claim"
    with pytest.raises(ValueError, match="not both"):
        resolve_config({"seed": 7}, "configs/demo.yaml")


def test_partitions_must_exist_and_hold_shards(tmp_path):
    from flows.nightly import MissingPartitionError, run_partition
    from flows.partitions import require_directory

    (tmp_path / "q" / "date=2026-11-28").mkdir(parents=True)
    (tmp_path / "q" / "date=2026-11-28" / "_SUCCESS").write_text("")
    with pytest.raises(MissingPartitionError, match="date=2026-11-28' has no Parquet shards"):
        run_partition(str(tmp_path / "q"), str(tmp_path / "a"), "2026-11-28", {}, ExecutionConfig())
    with pytest.raises(MissingPartitionError, match="date=2026-11-27' does not exist"):
        run_partition(str(tmp_path / "q"), str(tmp_path / "a"), "2026-11-27", {}, ExecutionConfig())
    with pytest.raises(FileNotFoundError, match="parameter 'input_root': .* does not exist"):
        require_directory(str(tmp_path / "typo"), "input_root")
    (tmp_path / "f").write_text("")
    with pytest.raises(FileNotFoundError, match="is a file, not a directory"):
        require_directory(str(tmp_path / "f"), "input_root")
    with pytest.raises(ValueError, match="parameter 'date': expected a date YYYY-MM-DD, got '20261101'"):
        parse_date("20261101", "date")
    with pytest.raises(ValueError, match="unknown IANA time zone 'Bogus/Zone'"):
        scheduled_date("Bogus/Zone", 1)


def test_label_counts_group_non_labels(tmp_path):
    import pyarrow.parquet as pq

    from flows.claim_verification import label_counts

    pq.write_table(pa.table({"answer": ["SUPPORTS", "The claim is plausible.", None, "SUPPORTS"]}),
                   tmp_path / "o.parquet")
    m = {"shards": [{"status": "ok", "output": str(tmp_path / "o.parquet")},
                    {"status": "failed", "output": None}]}
    assert label_counts(m, ["SUPPORTS", "REFUTES"]) == {
        "SUPPORTS": 2, "REFUTES": 0, "(not a label)": 1, "(no answer)": 1}
