"""``specrag-batch tune``'s statistics and rule (issue 49): the sample checks, the split into
shards per task, the per-task comparison, the rule, and the rows a too-small sample would need.
The command end to end: tests/integration/test_tune.py."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest

from specrag_batch.core import stats
from specrag_batch.run import tuning

from ..conftest import sample_rows


def _sample(claims: int = 12, qa: int = 12) -> pa.Table:
    return pa.concat_tables([sample_rows("climate_fever", claims), sample_rows("popqa", qa)])


def test_the_sample_is_refused_in_one_line_when_it_cannot_decide():
    assert tuning.check_sample(_sample(), "s.parquet", None, 10) == {"claim": 12, "qa": 12}
    cases = [(_sample().drop_columns(["gold"]), "s.parquet: no 'gold' column"),
             (sample_rows("popqa", 12), "one task only (qa, 12 rows)"),
             (_sample(claims=12, qa=4), "task qa has 4 rows with gold, under the minimum of 10 (--min-rows)")]
    for table, words in cases:
        with pytest.raises(ValueError) as e:
            tuning.check_sample(table, "s.parquet", None, 10)
        assert words in str(e.value) and "\n" not in str(e.value)


def test_rows_without_gold_do_not_count_towards_the_minimum():
    t = _sample(claims=12, qa=12)
    gold = t.column("gold").to_pylist()
    t = t.set_column(t.column_names.index("gold"), "gold", pa.array(gold[:15] + [None] * 9, t.schema.field("gold").type))
    with pytest.raises(ValueError, match="task qa has 3 rows with gold"):
        tuning.check_sample(t, "s", None, 10)


def test_the_sample_is_split_into_shards_of_one_task_every_row_once():
    t = pa.concat_tables([_sample(40, 12), sample_rows("popqa", 1, skip=12)])
    shards = tuning.split_sample(t, None)
    assert all(name.split("-")[0] == set(s.column("task").to_pylist()).pop() for name, s in shards.items())
    assert sorted(q for s in shards.values() for q in s.column("query_id").to_pylist()) == \
        sorted(t.column("query_id").to_pylist())
    assert len([n for n in shards if n.startswith("claim")]) == 8 and min(s.num_rows for s in shards.values()) >= 5


def _cand(correct: dict[str, bool], seconds: dict[str, float]) -> dict:
    rows = [{"query_id": q, "task": q.split(":")[0], "correct": c, "error": None} for q, c in correct.items()]
    shards = [{"input": f"/x/sample/{name}", "status": "ok", "seconds": s, "rows_out": 5} for name, s in seconds.items()]
    return {"rows": rows, "shards": shards}


def test_compare_pairs_the_rows_and_shards_of_each_task_and_the_rule_decides_per_task():
    n = 200
    ids = [f"claim:{i}" for i in range(n)] + [f"qa:{i}" for i in range(n)]
    std = {q: i % 2 == 0 for i, q in enumerate(ids)}
    spec = {q: (std[q] if q.startswith("claim") else i % 4 == 0) for i, q in enumerate(ids)}  # qa: 25 points worse
    units = {f"{t}-{k}.parquet": 1.0 + 0.01 * k for t in ("claim", "qa") for k in range(8)}
    figures = tuning.compare({"speculative": _cand(spec, {k: 0.5 * v for k, v in units.items()}),
                              "standard": _cand(std, units)}, ["claim", "qa"], reps=500)
    c, q = figures["claim"]["speculative"]["vs_standard"], figures["qa"]["speculative"]["vs_standard"]
    assert c["diff"] == 0 and c["ci95"] == [0, 0] and c["mcnemar_p"] == 1.0 and c["ratio"] == pytest.approx(0.5)
    assert q["diff"] == pytest.approx(-0.25) and q["ci95"][1] < 0 and q["mcnemar_p"] < 1e-6
    assert figures["qa"]["standard"]["accuracy"] == 0.5 and figures["qa"]["standard"]["seconds_per_row"] == \
        pytest.approx(sum(v for k, v in units.items() if k.startswith("qa")) / 40)
    d = tuning.decide(figures, 2.0, ["speculative"])
    assert d["modes"] == {"claim": "speculative", "qa": "standard"} and d["too_small"] == {}
    assert tuning.tuned_config({"seed": 3}, d, None, "speculative") == {
        "seed": 3, "mode": {"claim": "speculative", "qa": "standard", "default": "speculative"}}


def test_a_sample_too_small_to_decide_says_how_many_rows_would_be():
    """Point estimates that meet the rule and an interval that does not: the rows needed for
    the interval to clear the margin at the same estimate (half-width ~ 1/sqrt(n))."""
    v = {"n": 40, "diff": 0.02, "ci95": [-0.06, 0.10], "ratio": 0.7, "ratio_ci95": [0.6, 0.8], "units": 8,
         "rows_per_unit": 5, "mcnemar_p": 0.7}
    assert not tuning.passes(v, 2.0)
    need = tuning.rows_needed(v, 2.0)
    assert need == math.ceil(40 * (0.08 / 0.04) ** 2) == 160
    figures = {"claim": {"speculative": {"vs_standard": v}, "standard": {"vs_standard": None}}}
    d = tuning.decide(figures, 2.0, ["speculative"])
    assert d["modes"] == {"claim": "standard"} and d["too_small"] == {"claim": 160}
    [line] = tuning.too_small_lines(d, figures)
    assert "claim: the sample is too small to decide (n = 40): about 160 rows" in line
    assert tuning.rows_needed({**v, "diff": -0.03}, 2.0) is None  # worse than the margin: rows would not help


def test_rows_to_clear():
    assert stats.rows_to_clear(100, 0.0, -0.04, -0.02) == 400
    assert stats.rows_to_clear(100, -0.03, -0.05, -0.02) is None
    assert stats.rows_to_clear(10, math.log(0.8), math.log(1.2), 0.0) == math.ceil(10 * (math.log(1.2) - math.log(0.8)) ** 2
                                                                                / math.log(0.8) ** 2)


def test_with_a_drafter_the_config_takes_the_speculative_candidate_chosen_for_more_tasks():
    ok = {"n": 100, "diff": 0.0, "ci95": [0.0, 0.0], "ratio": 0.5, "ratio_ci95": [0.4, 0.6]}
    bad = {**ok, "ci95": [-0.2, -0.1]}
    figures = {"claim": {"speculative": {"vs_standard": bad}, "speculative-big": {"vs_standard": ok}},
               "choice": {"speculative": {"vs_standard": ok}, "speculative-big": {"vs_standard": ok}},
               "qa": {"speculative": {"vs_standard": bad}, "speculative-big": {"vs_standard": bad}}}
    d = tuning.decide(figures, 2.0, ["speculative", "speculative-big"])
    assert d["candidate"] == "speculative-big"
    assert d["modes"] == {"claim": "speculative", "choice": "speculative", "qa": "standard"}
    assert tuning.tuned_config(None, d, "big", "speculative")["drafter"] == {"model": "big"}
    assert "the config takes the one the rule chooses for more tasks" in tuning.rule_text(2.0, "big")


def test_a_candidate_whose_run_fails_stops_tune_in_one_line(monkeypatch):
    """A shard of a candidate failed: nothing is decided; the line names the candidate, the
    shard and its error (the command exits 1, as a run with a failed shard does)."""
    from specrag_batch.cli import tune as cli_tune
    from specrag_batch.run import orchestration

    def failed_run(sample, out, config):
        return {"shards": [{"input": "s/claim-0.parquet", "status": "ok", "output": "o"},
                           {"input": "s/qa-0.parquet", "status": "failed", "error": "qa-0.parquet: engine lost"}],
                "manifest_uri": "out/runs/standard/_manifest.json"}

    monkeypatch.setattr(orchestration, "run_batch", failed_run)
    with pytest.raises(RuntimeError) as e:
        cli_tune._run_candidate("standard", "s", "out", {})
    assert str(e.value) == ("candidate standard failed: 1 shard(s), first s/qa-0.parquet: qa-0.parquet: engine lost; "
                            "nothing decided (see out/runs/standard/_manifest.json)")
