"""Reuse of rows answered on earlier runs (issue 52) through the real flow (``run_batch``:
planning, shard tasks, done markers, key indexes) on the fake engine (tests/fakes.py, real
tokenizer, real Prefect flow runs): a second night whose rows mostly repeat the first copies
them, equal to what recomputation writes; another config, a damaged key index or output, and a
night still running are never trusted (their rows computed, one warning line); a reusing night
resumes; the nightly flow reuses the last nights and ``reuse.nights: 0`` turns it off."""

from __future__ import annotations

import json
import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from specrag_batch.run import resume
from specrag_batch.core import storage
from specrag_batch.run.orchestration import run_batch
from specrag_batch.run.reuse import key_index_uri

from ..conftest import small_config

pytestmark = pytest.mark.integration

PER_ROW = ("run_id", "source_file", "answer_source", "reused_from", "reused_answer_source")
"""Columns a reused row and its recomputation may differ in (where from, which run)."""


def _config(**over):
    return small_config(**{"sampling.strategy": "random", "sampling.num_drafts": 2, **over})


def _rows(ids, prefix="q", night="n1") -> list[dict]:
    """Rows numbered ``ids`` (the same number: the same query id, query, task, documents and
    gold on every night); ``night`` names nothing in them; ``prefix`` other than ``q``: the same
    rows under other query ids."""
    out = []
    for i in ids:
        task = ("qa", "claim", "choice")[i % 3]
        out.append({"query_id": f"{prefix}{i}", "query": f"Question {i}: which sea rose by {i} mm?",
                    "task": task, "documents": [{"doc_id": f"d{i}-{j}", "title": "Sea", "text": f"Note {j} on sea {i}."}
                                                for j in range(3)],
                    "choices": ["North Sea", "Baltic Sea"] if task == "choice" else None,
                    "gold": {"qa": ["North Sea"], "claim": ["SUPPORTS"], "choice": ["North Sea"]}[task]})
    return out


def _write(root, shards: dict[str, list[dict]]) -> str:
    for name, rows in shards.items():
        storage.write_parquet_atomic(storage.join(str(root), name), pa.Table.from_pylist(rows))
    return str(root)


def _out(prefix) -> list[dict]:
    files = sorted(f for f in storage.parquet_files(str(prefix))[0])
    return [r for f in files for r in pq.read_table(f).to_pylist()]


def _by_number(rows: list[dict]) -> dict[str, dict]:
    return {r["query_id"]: r for r in rows}


@pytest.fixture
def first_night(prefect_harness, fake_engine, tmp_path):
    inp = _write(tmp_path / "in1", {"a.parquet": _rows(range(0, 10)), "b.parquet": _rows(range(10, 20))})
    out = str(tmp_path / "out1")
    m = run_batch(inp, out, config=_config())
    assert m["failed_shards"] == 0 and m["reuse"]["rows"] == 0
    return out


def _second_input(tmp_path, name="in2") -> str:
    """16 rows of the first night (80%) and 4 new ones."""
    return _write(tmp_path / name, {"a.parquet": _rows([*range(2, 10), *range(12, 20), 90, 91, 92, 93], night="n2")})


def test_a_repeated_row_is_copied_and_equals_its_recomputation(first_night, fake_engine, tmp_path):
    inp = _second_input(tmp_path)
    calls = len(fake_engine.calls)
    m = run_batch(inp, str(tmp_path / "out2"), config=_config(**{"reuse.sources": [first_night]}))
    prompts_reusing = sum(c.prompts for c in fake_engine.calls[calls:])
    assert m["failed_shards"] == 0 and m["reuse"]["rows"] == 16 and m["reuse"]["seconds_saved"] > 0
    assert m["shards"][0]["rows_reused"] == 16
    report = json.loads(storage.read_bytes(storage.join(str(tmp_path / "out2"), "_report", "summary.json")))
    assert report["reuse"]["rows"] == 16 and report["answer_source"] == {"reused": 16, "first": 4}
    profile = json.loads(storage.read_bytes(storage.join(str(tmp_path / "out2"), "_report", "profile.json")))
    assert profile["rows_reused"] == 16  # reused rows count under the pass that answered them:
    assert profile["shares"]["answer_source"] == {"n": 20, "counts": {"first": 20}}
    shard_seconds = m["cost"]["output"]["shard_seconds"]  # costs per computed row (4), not per output row
    assert profile["per_row"]["seconds_per_row"] == pytest.approx(shard_seconds / 4)
    got = _by_number(_out(tmp_path / "out2"))
    calls = len(fake_engine.calls)
    fresh = run_batch(inp, str(tmp_path / "fresh"), config=_config())
    assert fresh["reuse"]["rows"] == 0
    prompts_fresh = sum(c.prompts for c in fake_engine.calls[calls:])
    assert prompts_reusing * 4 < prompts_fresh  # 4 of 20 rows computed
    want = _by_number(_out(tmp_path / "fresh"))
    assert got.keys() == want.keys()
    for n, row in got.items():
        if int(n[1:]) >= 90:
            assert row["answer_source"] == "first" and row["reused_from"] is None
            continue
        assert row["answer_source"] == "reused", n
        assert row["reused_from"].startswith(first_night) and row["reused_answer_source"] == want[n]["answer_source"]
        assert {k: v for k, v in row.items() if k not in PER_ROW} == {k: v for k, v in want[n].items() if k not in PER_ROW}
    # reused rows are indexed again: a third night can reuse from the second
    third = run_batch(inp, str(tmp_path / "out3"), config=_config(**{"reuse.sources": [str(tmp_path / "out2")]}))
    assert third["reuse"]["rows"] == 20


def test_another_config_reuses_nothing_with_one_warning(first_night, tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        m = run_batch(_second_input(tmp_path), str(tmp_path / "out2"),
                      config=_config(seed=7, **{"reuse.sources": [first_night]}))
    assert m["failed_shards"] == 0 and m["reuse"]["rows"] == 0
    lines = [r.getMessage() for r in caplog.records if "reuse:" in r.getMessage()]
    assert len(lines) == 1 and "not this run's" in lines[0], lines


def test_a_damaged_earlier_output_is_computed_with_one_warning(first_night, tmp_path, caplog):
    a_keys = key_index_uri(first_night, storage.join(first_night, "a.parquet"))
    storage.write_bytes_atomic(a_keys, b"not parquet")  # a's key index damaged
    b_out = storage.join(first_night, "b.parquet")
    t = pq.read_table(b_out)
    storage.write_parquet_atomic(b_out, t.slice(0, 5))  # b's output cut short
    with caplog.at_level(logging.WARNING):
        m = run_batch(_second_input(tmp_path), str(tmp_path / "out2"), config=_config(**{"reuse.sources": [first_night]}))
    assert m["failed_shards"] == 0 and m["reuse"]["rows"] == 0 and m["rows_out"] == 20
    lines = [r.getMessage() for r in caplog.records if "reuse:" in r.getMessage()]
    assert len(lines) == 2 and any("a.parquet is not a key index" in x for x in lines) and any(
        "b.parquet cannot be reused" in x for x in lines), lines
    assert all(r["answer_source"] == "first" for r in _out(tmp_path / "out2"))


def test_a_missing_source_and_a_night_still_running_are_not_trusted(first_night, tmp_path, caplog):
    resume._remove(resume.marker_uri(first_night, storage.join(first_night, "a.parquet")))  # a not finished yet
    with caplog.at_level(logging.WARNING):
        m = run_batch(_second_input(tmp_path), str(tmp_path / "out2"),
                      config=_config(**{"reuse.sources": [str(tmp_path / "nowhere"), first_night]}))
    assert m["failed_shards"] == 0 and m["reuse"]["rows"] == 8  # b's rows only
    lines = [r.getMessage() for r in caplog.records if "reuse:" in r.getMessage()]
    assert len(lines) == 1 and "holds no run" in lines[0], lines


def test_a_reusing_night_resumes(first_night, fake_engine, tmp_path):
    inp = _write(tmp_path / "in2", {"a.parquet": _rows([2, 3, 4, 90], night="n2"), "b.parquet": _rows([12, 13, 91], night="n2")})
    out, cfg = str(tmp_path / "out2"), _config(**{"reuse.sources": [first_night]})
    m = run_batch(inp, out, config=cfg)
    assert m["reuse"]["rows"] == 5
    before = _out(out)
    b_out = storage.join(out, "b.parquet")
    resume._remove(resume.marker_uri(out, b_out))  # b crashed before its done marker
    storage.write_bytes_atomic(b_out, b"partial")
    again = run_batch(inp, out, config=cfg)
    assert again["resumed_shards"] == 1 and again["failed_shards"] == 0 and again["reuse"]["rows"] == 5
    drop = ("run_id",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in _out(out)] == \
        [{k: v for k, v in r.items() if k not in drop} for r in before]


def test_the_nightly_flow_reuses_the_last_nights_and_zero_turns_it_off(prefect_harness, fake_engine, tmp_path):
    from specrag_batch.run.scheduled.nightly import nightly_flow

    inp, out = str(tmp_path / "queries"), str(tmp_path / "answers")
    _write(tmp_path / "queries", {"date=2026-05-01/p.parquet": _rows(range(10)),
                                  "date=2026-05-02/p.parquet": _rows(range(2, 12), night="n2"),
                                  "date=2026-05-03/p.parquet": _rows(range(2, 12), night="n3")})
    cfg = _config(**{"drift.enabled": False}).model_dump(mode="json")
    assert nightly_flow(inp, out, date="2026-05-01", config=cfg)["reuse"]["rows"] == 0
    m = nightly_flow(inp, out, date="2026-05-02", config=cfg)
    assert m["reuse"]["rows"] == 8 and m["reuse"]["sources"] == [storage.join(out, "date=2026-05-01")]
    off = nightly_flow(inp, out, date="2026-05-03", config={**cfg, "reuse": {"nights": 0}})
    assert off["reuse"]["rows"] == 0


def test_the_same_rows_under_other_query_ids_are_reused_only_where_the_id_decides_nothing(
        prefect_harness, fake_engine, tmp_path):
    """Speculative RAG seeds each row's subsets by its query id (paper §3.2, ``row_seed``): a
    row under another id may get other subsets, so it is computed; Standard RAG reuses it."""
    first = _write(tmp_path / "in1", {"a.parquet": _rows(range(6))})
    again = _write(tmp_path / "in2", {"a.parquet": _rows(range(6), prefix="other")})
    for mode, reused in (("speculative", 0), ("standard", 6)):
        cfg = _config(mode=mode)
        run_batch(first, str(tmp_path / f"{mode}1"), config=cfg)
        m = run_batch(again, str(tmp_path / f"{mode}2"),
                      config=_config(mode=mode, **{"reuse.sources": [str(tmp_path / f"{mode}1")]}))
        assert m["reuse"]["rows"] == reused, mode


def test_run_reuse_from_is_repeatable(first_night, tmp_path):
    from typer.testing import CliRunner

    from specrag_batch.cli.commands import app

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(_config().model_dump(mode="json", exclude={"reuse", "drift"})))
    out = tmp_path / "out2"
    r = CliRunner().invoke(app, ["run", "-i", _second_input(tmp_path), "-o", str(out), "-c", str(cfg), "--json",
                                 "--reuse-from", str(tmp_path / "nowhere"), "--reuse-from", first_night])
    assert r.exit_code == 0, r.output
    m = json.loads(storage.read_bytes(storage.join(str(out), "_manifest.json")))
    assert m["reuse"]["sources"] == [str(tmp_path / "nowhere"), first_night] and m["reuse"]["rows"] == 16
