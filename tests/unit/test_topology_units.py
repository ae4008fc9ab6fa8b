"""Unit tests of the scheduled-flow helpers, the intermediate draft format, the fixed-task
input check and the execution settings (no engines, no Prefect runs)."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from flows.partitions import (
    dates_between,
    parse_date,
    partition_uri,
    resolve_config,
    scheduled_date,
)
from specrag_batch import intermediate
from specrag_batch.execution import ExecutionConfig
from specrag_batch.schema import InputSchemaError, QueryRow, validate_table
from specrag_batch.records import Draft

from ..conftest import ROOT

CLI = str(Path(sys.executable).with_name("specrag-batch"))


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


def test_config_hash_unchanged_by_unset_task():
    from specrag_batch.config import RunConfig

    base = RunConfig()
    assert base.config_hash() == RunConfig.model_validate(base.model_dump(exclude={"task"})).config_hash()
    assert RunConfig(task="claim").config_hash() != base.config_hash()


def _table(**cols):
    data = {"query_id": ["a", "b"], "query": ["x is y", "who?"], **cols}
    return pa.table(data)


def test_fixed_task_makes_task_column_optional_and_flags_other_tasks():
    rows = validate_table(_table(), "f.parquet", task="claim")
    assert [r.task for r in rows] == ["claim", "claim"] and all(r.error is None for r in rows)
    rows = validate_table(_table(task=["claim", "qa"]), "f.parquet", task="claim")
    assert rows[0].error is None
    assert rows[1].error == ("f.parquet: row 1 (query_id='b'): field 'task': 'qa', but this run "
                             "only takes 'claim' rows (config 'task')")
    with pytest.raises(InputSchemaError, match="column 'task': required column missing"):
        validate_table(_table(), "f.parquet")


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


def test_execution_config_ray_options():
    ex = ExecutionConfig.coerce({"task_runner": "ray", "drafter_resources": {"num_gpus": 1}})
    assert ex.distributed and ExecutionConfig.coerce(None).task_runner == "threads"
    from prefect_ray.context import RemoteOptionsContext

    with ex.remote({"num_gpus": 1, "resources": {"verifier": 1}}):
        opts = RemoteOptionsContext.get().current_remote_options
    assert opts == {"num_gpus": 1, "resources": {"verifier": 1}, "max_calls": 0}
    with ex.remote({"num_cpus": 1}):
        assert RemoteOptionsContext.get().current_remote_options == {"num_cpus": 1}
    with ExecutionConfig().remote({"num_gpus": 1}):  # threads: no Ray options at all
        assert RemoteOptionsContext.get().current_remote_options == {}
    with pytest.raises(Exception, match="stages"):
        ExecutionConfig.coerce({"stages": "split"})


def test_cli_usage_errors_name_the_flag():
    r = subprocess.run([CLI, "backfill", "--input-root", "x", "--output-root", "y",
                        "--start", "2026-11-05", "--end", "2026-11-01"], capture_output=True, text=True)
    assert r.returncode == 2 and "--end 2026-11-01 is before --start 2026-11-05" in r.stderr
    r = subprocess.run([CLI, "run", "-i", "x", "-o", "y", "--stages", "split"], capture_output=True, text=True)
    assert r.returncode == 2 and "--stages" in r.stderr


def test_normalized_uris_and_layout_checks(tmp_path, monkeypatch):
    from specrag_batch import storage
    from specrag_batch.planning import InputLayoutError, check_layout, plan_shards, shard_output_uri

    monkeypatch.chdir(tmp_path)
    assert storage.normalize_uri("in/") == storage.normalize_uri("./in") == str(tmp_path / "in")
    assert storage.normalize_uri("file://" + str(tmp_path / "in") + "/") == str(tmp_path / "in")
    assert storage.normalize_uri("s3://b/q//") == "s3://b/q"
    t = pa.table({"query_id": ["a"], "query": ["q"], "task": ["qa"]})
    for rel in ("x/a.parquet", "y/a.parquet", "_temporary/0/part.parquet", ".hidden/b.parquet",
                "_SUCCESS", "notes.txt"):
        (tmp_path / "in" / rel).parent.mkdir(parents=True, exist_ok=True)
        import pyarrow.parquet as pq
        pq.write_table(t, tmp_path / "in" / rel) if rel.endswith(".parquet") else \
            (tmp_path / "in" / rel).write_text("x")
    inp, out = storage.normalize_uri("in/"), storage.normalize_uri("out")
    shards, skipped = plan_shards(inp)
    assert [s[len(inp) + 1:] for s in shards] == ["x/a.parquet", "y/a.parquet"]
    assert sorted((s["input"][len(inp) + 1:], s["reason"]) for s in skipped) == [
        (".hidden/b.parquet", "inside a hidden or temporary directory (. or _)"),
        ("_temporary/0/part.parquet", "inside a hidden or temporary directory (. or _)"),
        ("notes.txt", "not a .parquet file")]
    names = [shard_output_uri(inp, s, out).rsplit("/", 1)[-1] for s in shards]
    assert names == ["x__a.parquet", "y__a.parquet"]  # the same base name in two folders
    check_layout(inp, out, shards)
    with pytest.raises(InputLayoutError, match="overlap"):
        check_layout(inp, inp + "/out", shards)
    with pytest.raises(InputLayoutError, match="overlap"):
        check_layout(inp + "/x", inp, shards)
    pq.write_table(t, tmp_path / "in" / "x__a.parquet")
    shards, _ = plan_shards(inp)
    with pytest.raises(InputLayoutError, match=r"x/a.parquet' and .*x__a.parquet' would both be written"):
        check_layout(inp, out, shards)


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


def test_null_task_cell_takes_the_fixed_task_and_labels_are_tidied():
    from specrag_batch.config import RunConfig

    rows = validate_table(_table(task=pa.array([None, "claim"], pa.string())), "f.parquet", task="claim")
    assert [(r.task, r.error) for r in rows] == [("claim", None), ("claim", None)]
    assert RunConfig(claim_labels=[" SUPPORTS ", "REFUTES"]).claim_labels == ["SUPPORTS", "REFUTES"]
    with pytest.raises(Exception, match="empty labels"):
        RunConfig(claim_labels=["SUPPORTS", " "])


def test_label_counts_group_non_labels(tmp_path):
    import pyarrow.parquet as pq

    from flows.claim_verification import label_counts

    pq.write_table(pa.table({"answer": ["SUPPORTS", "The claim is plausible.", None, "SUPPORTS"]}),
                   tmp_path / "o.parquet")
    m = {"shards": [{"status": "ok", "output": str(tmp_path / "o.parquet")},
                    {"status": "failed", "output": None}]}
    assert label_counts(m, ["SUPPORTS", "REFUTES"]) == {
        "SUPPORTS": 2, "REFUTES": 0, "(not a label)": 1, "(no answer)": 1}


def test_cli_nightly_usage_errors():
    for args, msg in ((["--timezone", "Bogus/Zone"], "unknown IANA time zone 'Bogus/Zone'"),
                      (["--date", ""], "parameter '--date': expected a date YYYY-MM-DD, got ''")):
        r = subprocess.run([CLI, "nightly", "--input-root", "x", "--output-root", "y", *args],
                           capture_output=True, text=True)
        assert r.returncode == 2 and msg in r.stderr and r.stdout == "", r.stdout + r.stderr


def test_cli_nightly_missing_root_or_partition_is_one_line_before_the_flow(tmp_path):
    """Trial finding (2026-12-03): a missing partition printed the failed flow run's Prefect
    traceback before the error line. Root and partition are now checked before the flow starts:
    exit 2, one ``error:`` line naming what is missing, no traceback, no flow run."""
    (tmp_path / "in" / "date=2026-01-02").mkdir(parents=True)
    (tmp_path / "in" / "date=2026-01-02" / "notes.txt").write_text("not parquet")
    for root, date, msg in ((tmp_path / "nope", "2026-01-01", "parameter '--input-root': "),
                            (tmp_path / "in", "2026-01-01", "date=2026-01-01' does not exist"),
                            (tmp_path / "in", "2026-01-02", "date=2026-01-02' has no Parquet shards (1 other files)")):
        r = subprocess.run([CLI, "nightly", "--input-root", str(root), "--output-root", str(tmp_path / "out"),
                            "--date", date], capture_output=True, text=True)
        err = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(err) == 1 and err[0].startswith("error:") and msg in err[0], r.stderr
        assert "Traceback" not in r.stderr and "flow run" not in r.stderr.lower() and r.stdout == "", r.stdout
    assert not (tmp_path / "out").exists()


def test_cli_invalid_run_config_is_a_usage_error(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("sampling:\n  num_drafts: 0\n")
    r = subprocess.run([CLI, "run", "-i", "x", "-o", "y", "-c", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 2 and "greater than or equal to 1" in r.stderr and "Traceback" not in r.stdout + r.stderr
