"""Night over night (issue 41), without a flow: the ``drift`` config section (not in the hash,
patterns checked), each kind of measure's test and thresholds (:mod:`specrag_batch.drift`), the
run profile of an output's rows (:mod:`specrag_batch.report.profile`), and the choice of the
baseline nights on local storage (:mod:`specrag_batch.scheduled.drift_watch`): by date, same
config hash, one line per night left out. The flows on the fake engine:
tests/integration/test_drift.py."""

from __future__ import annotations

import copy
import json

import polars as pl
import pytest
from pydantic import ValidationError

from specrag_batch import drift
from specrag_batch.config import DriftConfig, RunConfig
from specrag_batch.report.profile import PROFILE_VERSION, profile
from specrag_batch.report.rows import RunData
from specrag_batch.scheduled import drift_watch

pytestmark = pytest.mark.unit

CFG = DriftConfig()


def _profile(low=20, n=200, labels=None, reasons=None, scores=None, seconds=0.5, config_hash="h1") -> dict:
    """A profile of ``n`` answered rows: ``low`` low-confidence, claim answers ``labels``, error
    reasons ``reasons``, the selected scores ``scores`` (a spread of 200 values by default)."""
    labels = labels or {"SUPPORTS": n // 2, "REFUTES": n // 2}
    scores = scores if scores is not None else [-(i % 100) / 10 for i in range(n)]
    return {"profile_version": PROFILE_VERSION, "config_hash": config_hash, "rows": n, "answered": n,
            "rates": {"low_confidence_rate": {"k": low, "n": n}, "fast_path_rate": {"k": 0, "n": n},
                      "error_rate": {"k": sum((reasons or {}).values()), "n": n}},
            "shares": {"error_reason": {"n": n, "counts": dict(reasons or {})}},
            "mixes": {"answers:claim": labels},
            "distributions": {"score:claim": {"n": len(scores), "mean": sum(scores) / len(scores),
                                              "quantiles": {"0.5": sorted(scores)[len(scores) // 2]},
                                              "sample": sorted(scores)}},
            "per_row": {"seconds_per_row": seconds, "tokens_per_row:m:prompt": 300.0}}


def _moved(tonight, baselines, cfg=CFG) -> list[str]:
    return [r["measure"] for r in drift.compare(tonight, baselines, cfg) if r["moved"]]


def test_the_drift_section_is_not_in_the_config_hash_and_names_measures():
    base = RunConfig()
    tuned = RunConfig.model_validate({"drift": {"p_value": 0.05, "baseline_nights": 3, "fail_on": ["error_rate"],
                                                "min_effect": {"seconds_per_row": 2.0}}})
    assert tuned.config_hash() == base.config_hash() and tuned.scoring_hash() == base.scoring_hash()
    with pytest.raises(ValidationError, match="drift.fail_on: 'eror_rate' matches no measure"):
        RunConfig.model_validate({"drift": {"fail_on": ["eror_rate"]}})
    with pytest.raises(ValidationError, match="must be >= 0"):
        DriftConfig(min_effect={"score:*": -1})
    with pytest.raises(ValidationError, match="a number is needed"):
        DriftConfig(p_value=True)
    cfg = DriftConfig(fail_on=["error_reason:*"], min_effect={"seconds_per_row": 2.0})
    assert cfg.fails_on("error_reason:no_documents") and not cfg.fails_on("error_rate")
    assert cfg.effect_threshold("seconds_per_row", 0.5) == 2.0 and cfg.effect_threshold("score:qa", 0.1) == 0.1


def test_an_identical_night_moves_nothing():
    p = _profile()
    results = drift.compare(p, [p, p, p], CFG)
    assert results and not [r for r in results if r["moved"]]
    assert {r["kind"] for r in results} == {"rate", "mix", "distribution", "per_row"}


def test_a_doubled_low_confidence_rate_and_a_shifted_label_mix_move_exactly_those():
    tonight = _profile(low=40, labels={"SUPPORTS": 40, "REFUTES": 110, "(not a label)": 50})
    results = {r["measure"]: r for r in drift.compare(tonight, [_profile()] * 3, CFG)}
    assert [m for m, r in results.items() if r["moved"]] == ["answers:claim", "low_confidence_rate"]
    low = results["low_confidence_rate"]
    assert low["test"] == "Fisher's exact test" and low["p_value"] < 0.01
    assert low["tonight"]["rate"] == 0.2 and low["baseline"]["rate"] == 0.1
    mix = results["answers:claim"]
    assert mix["test"] == "chi-square test" and mix["effect_name"] == "Cramér's V" and mix["effect"] >= 0.1
    section = drift.markdown({"baseline": ["2026-01-03", "2026-01-02", "2026-01-01"], "config_hash": "h1",
                              "measures": list(results.values()), "notes": []})
    assert section.startswith("## Changes since the last 3 nights")
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == ["answers:claim", "low_confidence_rate"]  # only what moved


def test_a_new_error_reason_a_shifted_distribution_and_slower_rows_move():
    tonight = _profile(reasons={"no_documents": 12}, scores=[-(i % 100) / 10 - 3 for i in range(200)], seconds=1.2)
    moved = _moved(tonight, [_profile()] * 2)
    assert moved == ["error_rate", "error_reason:no_documents", "score:claim", "seconds_per_row"]
    # thresholds: an override keeps seconds per row, a small rate change below min_rate_change stays
    assert "seconds_per_row" not in _moved(tonight, [_profile()] * 2, DriftConfig(min_effect={"seconds*": 2.0}))
    assert _moved(_profile(low=24), [_profile()] * 7) == []


def test_fail_on_names_the_measures_that_fail_the_run():
    tonight = _profile(reasons={"no_documents": 12})
    results = drift.compare(tonight, [_profile()], DriftConfig(fail_on=["error_reason:*"]))
    assert [r["measure"] for r in results if r["fails"]] == ["error_reason:no_documents"]
    assert [r["measure"] for r in results if r["moved"] and not r["fails"]] == ["error_rate"]


def _frame(n: int, low: int) -> RunData:
    rows = [{"query_id": f"q{i}", "task": "claim" if i % 2 else "qa", "answer": None if i == 0 else
             ("SUPPORTS" if i % 4 == 1 else "MAYBE" if i % 4 == 3 else "Paris"),
             "error": "row 0: field 'query'" if i == 0 else None, "error_reason": "empty_query" if i == 0 else None,
             "low_confidence": 0 < i <= low, "fast_path": False, "score": -float(i), "confidence": None,
             "rationale": "x" * (10 + i), "correct": (i % 3 == 0) if i else None, "flags": [], "answer_source": None}
            for i in range(n)]
    return RunData("/out/date=2026-01-01", pl.DataFrame(rows), ["/out/date=2026-01-01/a.parquet"],
                   {"run_id": "r1", "config_hash": "abc"}, {"claim_labels": ["SUPPORTS", "REFUTES"]})


def test_the_profile_of_a_run_holds_what_a_comparison_reads():
    data = _frame(21, low=5)
    s = {"errors": 1, "errors_by_reason": {"empty_query": 1}, "shard_seconds": 4.2, "output_cost": {"rows": 21},
         "tokens_per_row": {"m": {"prompt": 310.0, "generated": 40.0, "engine_seconds": 2.1}}}
    p = profile(data, s)
    json.dumps(p)  # JSON-able
    assert p["config_hash"] == "abc" and p["rows"] == 21 and p["answered"] == 20
    assert p["rates"]["low_confidence_rate"] == {"k": 5, "n": 20} and p["rates"]["error_rate"] == {"k": 1, "n": 21}
    assert p["rates"]["accuracy:qa"]["n"] == 10 and p["rates"]["accuracy:claim"]["n"] == 10
    assert p["shares"]["error_reason"] == {"n": 21, "counts": {"empty_query": 1}}
    assert p["mixes"]["answers:claim"] == {"SUPPORTS": 5, "(not a label)": 5}
    assert set(p["distributions"]) == {"score:qa", "score:claim", "answer_length:qa", "rationale_length"}
    assert p["distributions"]["score:qa"]["n"] == 10 and len(p["distributions"]["score:qa"]["sample"]) == 10
    assert p["per_row"] == {"seconds_per_row": 0.2, "tokens_per_row:m:prompt": 310.0,
                            "tokens_per_row:m:generated": 40.0, "engine_seconds_per_row:m": 0.1}


def _write_night(root, date, p=None, raw=None, failed=0):
    d = root / f"date={date}" / "_report"
    d.mkdir(parents=True)
    (d / "profile.json").write_text(raw if raw is not None else json.dumps(p))
    (root / f"date={date}" / "_manifest.json").write_text(json.dumps({"failed_shards": failed}))


def test_the_baseline_is_the_last_k_nights_before_by_date_of_the_same_config_hash(tmp_path):
    root = tmp_path / "answers"
    # written out of date order, as a backfill's dates may finish
    for date in ("2026-01-05", "2026-01-02", "2026-01-04", "2026-01-01"):
        _write_night(root, date, _profile())
    _write_night(root, "2026-01-03", _profile(config_hash="other"))
    _write_night(root, "2026-01-06", _profile(low=60))
    (root / "date=2026-01-07").mkdir()  # a later night never counts
    (root / "notes").mkdir()
    r = drift_watch.night_drift(str(root), "2026-01-06", DriftConfig(baseline_nights=3))
    assert r["status"] == "compared" and r["baseline"] == ["2026-01-05", "2026-01-04", "2026-01-02"]
    assert r["excluded"] == [{"date": "2026-01-03", "reason": "another config hash (`other`)"}]
    assert r["notes"] == ["1 earlier night left out: another config hash than this night's `h1` (2026-01-03)"]
    assert r["moved"] == ["low_confidence_rate"] and r["fail_reason"] is None
    failing = drift_watch.night_drift(str(root), "2026-01-06", DriftConfig(fail_on=["low_confidence_rate"]))
    assert failing["fail_reason"].startswith("drift on 2026-01-06: 1 measure(s) of drift.fail_on moved: `low_confidence_rate`")


def test_first_night_other_hash_missing_and_corrupt_profiles_each_get_one_line(tmp_path):
    root = tmp_path / "answers"
    _write_night(root, "2026-01-01", _profile())
    first = drift_watch.night_drift(str(root), "2026-01-01", CFG)
    assert first["status"] == "no_baseline" and first["fail_reason"] is None
    assert first["notes"] == [f"first night: no earlier night under {root}, nothing to compare"]
    _write_night(root, "2026-01-02", _profile(config_hash="h2"))
    other = drift_watch.night_drift(str(root), "2026-01-02", CFG)
    assert other["notes"] == ["1 earlier night left out: another config hash than this night's `h2` (2026-01-01)",
                              "no baseline: none of the 1 earlier nights looked at can be compared (reasons above)"]
    _write_night(root, "2026-01-03", raw="{not json")
    _write_night(root, "2026-01-04", _profile(config_hash="h2"), failed=1)
    (root / "date=2026-01-05").mkdir()
    _write_night(root, "2026-01-06", _profile(config_hash="h2"))
    r = drift_watch.night_drift(str(root), "2026-01-06", CFG)
    assert r["status"] == "compared" and r["baseline"] == ["2026-01-02"]
    assert r["notes"][0].startswith("2026-01-05 left out: no profile (_report/profile.json missing")
    assert r["notes"][1] == "2026-01-04 left out: not finished (1 shard(s) failed)"
    assert r["notes"][2].startswith("2026-01-03 left out: profile unreadable (") and "not JSON" in r["notes"][2]
    assert r["notes"][3].startswith("1 earlier night left out: another config hash")
    strict = drift_watch.night_drift(str(root), "2026-01-01", DriftConfig(require_baseline=True))
    assert strict["fail_reason"].startswith("drift on 2026-01-01: no comparison (drift.require_baseline): first night")
    none = drift_watch.night_drift(str(root), "2026-01-05", CFG)
    assert none["status"] == "no_profile" and none["notes"][0].startswith("no comparison: this night has no profile")


def test_the_section_goes_to_the_top_of_the_report_once(tmp_path):
    root = tmp_path / "answers"
    _write_night(root, "2026-01-01", _profile())
    (root / "date=2026-01-01" / "_report" / "report.md").write_text("# Run report: `x`\n\n| | |\n")
    r = drift_watch.night_drift(str(root), "2026-01-01", CFG)
    drift_watch.write_drift(str(root), r)
    drift_watch.write_drift(str(root), r)  # again: replaced, not added
    md = (root / "date=2026-01-01" / "_report" / "report.md").read_text()
    assert md.startswith("# Run report: `x`\n\n<!-- drift -->\n## Changes since the last 0 nights\n\n- first night")
    assert md.count("<!-- drift -->") == 1 and md.endswith("<!-- /drift -->\n\n| | |\n")
    stored = json.loads((root / "date=2026-01-01" / "_report" / "drift.json").read_text())
    assert stored["status"] == "no_baseline" and stored["date"] == "2026-01-01"
    assert copy.deepcopy(stored)["notes"] == r["notes"]
