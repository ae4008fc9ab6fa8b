"""Shard job, engine usage, file-level errors and the generated CLI options (no engine)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import typer

from specrag_batch.cli.options import COMMON, config_parameters, exit_codes
from specrag_batch.engines.usage import EngineUsage
from specrag_batch.engines.models import ModelNotInstalledError
from specrag_batch.run.resume import RunConflictError
from specrag_batch.run.shard_job import ShardJob, StorageIO, _with_file, draft_shard, process_shard, verify_shard

from ..conftest import small_config


def _job(tmp_path, name="a/b.parquet") -> ShardJob:
    return ShardJob(str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "in" / name),
                    small_config().model_dump_json(), "run-1", {"size": 1})


def test_job_names_prefixes_and_files(tmp_path):
    job = _job(tmp_path)
    assert job.output_file == str(tmp_path / "out" / "a__b.parquet")
    assert job.drafts_prefix == str(tmp_path / "out" / "_drafts")
    assert job.draft_file == str(tmp_path / "out" / "_drafts" / "a__b.parquet")
    assert job.config.config_hash() == small_config().config_hash()


def _engine(seconds, tokens):
    return SimpleNamespace(stats=SimpleNamespace(as_dict=lambda: {"seconds": seconds, "generated_tokens": tokens}))


def test_engine_usage_difference_and_sum():
    before = EngineUsage.snapshot({"d": _engine(1.0, 10)})
    now = EngineUsage.snapshot({"d": _engine(3.5, 25), "v": _engine(2.0, 4)})
    assert now.since(before).as_dict() == {"d": {"seconds": 2.5, "generated_tokens": 15},
                                           "v": {"seconds": 2.0, "generated_tokens": 4}}
    total = EngineUsage.total([now.since(before), {"d": {"seconds": 0.5, "generated_tokens": 1}}, {}])
    assert total.as_dict() == {"d": {"seconds": 3.0, "generated_tokens": 16},
                               "v": {"seconds": 2.0, "generated_tokens": 4}}


def test_usage_counts_every_engine_of_a_model(monkeypatch):
    """One model loaded twice in a process (another seed or engine setting: two engines under
    one name): the snapshot of the loaded engines (engines.usage_now) sums them, so a shard's usage counts the engine it used
    whichever was loaded last (before, the last one loaded hid the other: calls read 0)."""
    from specrag_batch.engines import engine as engines

    a = SimpleNamespace(name="m", stats=engines.EngineStats(seconds=1.0, generated_tokens=5, calls=1))
    b = SimpleNamespace(name="m", stats=engines.EngineStats(seconds=0.0, generated_tokens=0, calls=0))
    monkeypatch.setattr(engines, "_ENGINES", {("m", 1): a, ("m", 2): b})
    before = engines.usage_now()
    a.stats.calls, a.stats.generated_tokens = 2, 9  # the first engine does the shard's work
    usage = engines.usage_now().since(before).as_dict()["m"]
    assert usage["calls"] == 1 and usage["generated_tokens"] == 4


def test_usage_names_only_the_engines_called_in_between(monkeypatch):
    """Engines an earlier job left loaded (no call since the first snapshot) are not part of
    a shard's or run's usage."""
    from specrag_batch.engines import engine as engines

    used = SimpleNamespace(name="used", stats=engines.EngineStats(calls=1))
    idle = SimpleNamespace(name="idle", stats=engines.EngineStats(seconds=4.0, calls=3))
    monkeypatch.setattr(engines, "_ENGINES", {("used",): used, ("idle",): idle})
    before = engines.usage_now()
    used.stats.calls = 2
    assert set(engines.usage_now().since(before).as_dict()) == {"used"}


@pytest.mark.parametrize("run", ["process", "draft"])
def test_unreadable_shard_is_a_failed_result_naming_the_file(tmp_path, run):
    job = _job(tmp_path, "bad.parquet")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "bad.parquet").write_bytes(b"PAR1 not parquet")
    res = (process_shard(job, StorageIO(), drafter=None, verifier=None) if run == "process"
           else draft_shard(job, StorageIO(), drafter=None))
    assert res.status == "failed" and res.output is None and res.input == job.shard_file
    assert res.error.startswith(f"ArrowInvalid: {job.shard_file}")


def test_draft_shard_not_matching_its_drafting_result_fails_naming_the_draft_file(tmp_path):
    job = _job(tmp_path)
    res = verify_shard(job, StorageIO(), verifier=None, drafted={"output": job.draft_file, "rows_out": 1})
    assert res.status == "failed" and res.input == job.draft_file and job.draft_file in res.error


def test_stage_row_errors_get_the_file_prefix_once():
    recs = [{"error": "row 1 (query_id='q'): field 'query': too long"},
            {"error": "f.parquet: row 2 (query_id='r'): field 'task': bad"}, {"error": None}]
    assert [r["error"] for r in _with_file(recs, "f.parquet")] == [
        "f.parquet: row 1 (query_id='q'): field 'query': too long",
        "f.parquet: row 2 (query_id='r'): field 'task': bad", None]


def test_cli_options_follow_the_config_fields():
    params = {p.name: p for p in config_parameters()}
    assert len(params) == len(COMMON)
    drafts = params["cfg__sampling__num_drafts"]
    assert drafts.default.param_decls == ("--drafts", "-m") and "number of document subsets" in drafts.default.help
    assert "int" in str(drafts.annotation) and "float" in str(params["cfg__selection__tau_min"].annotation)
    assert "str" in str(params["cfg__mode"].annotation) and "task=mode" in params["cfg__mode"].default.help  # one word or task=mode pairs (issue 49)


@pytest.mark.parametrize("error, code", [(ValueError("bad"), 2), (FileNotFoundError("gone"), 2),
                                         (RunConflictError("other config"), 2),
                                         (ModelNotInstalledError("no package"), 2),
                                         (RuntimeError("2 shard(s) failed"), 1)])
def test_one_mapping_from_exceptions_to_exit_codes(error, code):
    seen = []
    with exit_codes(lambda e, c: seen.append((e, c))):
        raise error
    assert seen == [(error, code)]
    with pytest.raises(typer.Exit):  # a command's own exit code passes through
        with exit_codes(lambda e, c: seen.append((e, c))):
            raise typer.Exit(1)
    assert len(seen) == 1
