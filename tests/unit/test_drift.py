"""Night over night (issue 41), without a flow: the ``drift`` config section (not in the hash,
patterns checked), each kind of measure's test and thresholds (:mod:`specrag_batch.run.drift.compare`), the
run profile of an output's rows (:mod:`specrag_batch.run.drift.profile`), and the choice of the
baseline nights on local storage (:mod:`specrag_batch.run.drift.watch`): by date, same
config hash, one line per night left out. The flows on the fake engine:
tests/integration/test_drift.py."""

from __future__ import annotations

import copy
import json

import polars as pl
import pytest
from pydantic import ValidationError

from specrag_batch.run.drift import compare as drift
from specrag_batch.config import DriftConfig, RunConfig
from specrag_batch.run.drift.profile import PROFILE_VERSION, profile
from specrag_batch.run.results import RunData
from specrag_batch.run.drift import watch as drift_watch

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
             "draft_tokens": 10 + i, "correct": (i % 3 == 0) if i else None, "flags": [], "answer_source": None}
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
    assert set(p["distributions"]) == {"score:qa", "score:claim", "answer_length:qa", "draft_tokens"}
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
                              "no baseline: the one earlier night looked at cannot be compared (reason above)"]
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
    assert md.startswith("# Run report: `x`\n\n<!-- drift -->\n## No comparison: first night\n\n- first night")
    assert md.count("<!-- drift -->") == 1 and md.endswith("<!-- /drift -->\n\n| | |\n")
    stored = json.loads((root / "date=2026-01-01" / "_report" / "drift.json").read_text())
    assert stored["status"] == "no_baseline" and stored["date"] == "2026-01-01"
    assert copy.deepcopy(stored)["notes"] == r["notes"]


# bad input to the comparison, the command and the section: refused or left out in one line, never a crash


def _set(path: str, value):
    """A change to a profile: ``value`` at the dotted ``path`` (the last part may be a list index)."""
    def change(p: dict) -> None:
        *head, last = path.split(".")
        node = p
        for k in head:
            node = node[k]
        if isinstance(node, list):
            node[int(last)] = value
        elif value is _DROP:
            del node[last]
        else:
            node[last] = value
    return change


_DROP = object()
MALFORMED = [  # (change, the field and message the line names)
    (_set("rates.error_rate", None), 'rates.error_rate: expected a count pair {"k", "n"}, got null'),
    (_set("rates.error_rate.k", "3"), 'rates.error_rate.k: expected a whole number, got "3"'),
    (_set("rates.low_confidence_rate.n", 10**30), "rates.low_confidence_rate.n: expected a count from 0 to 1,000,000,000"),
    (_set("rates.error_rate.n", float("inf")), "rates.error_rate.n: expected a whole number, got inf"),
    (_set("distributions.score:claim.n", float("inf")), "distributions.score:claim.n: expected a whole number, got inf"),
    (_set("distributions.score:claim", None), "distributions.score:claim: expected an object"),
    (_set("distributions.score:claim.sample.0", "x"), 'distributions.score:claim.sample[0]: expected a finite number, got "x"'),
    (_set("distributions.score:claim.sample.3", float("nan")), "distributions.score:claim.sample[3]: expected a finite number, got nan"),
    (_set("distributions.score:claim.sample.1", float("-inf")), "distributions.score:claim.sample[1]: expected a finite number, got -inf"),
    (_set("mixes.answers:claim.SUPPORTS", float("inf")), "mixes.answers:claim.SUPPORTS: expected a whole number, got inf"),
    (_set("rates.low_confidence_rate.k", 201), "rates.low_confidence_rate.k: expected a count from 0 to its n (200), got 201"),
    (_set("rates.low_confidence_rate.k", -1), "rates.low_confidence_rate.k: expected a count from 0 to its n (200), got -1"),
    (_set("rates.low_confidence_rate.k", float("nan")), "rates.low_confidence_rate.k: expected a whole number, got nan"),
    (_set("shares.error_reason.counts.x", 999), "shares.error_reason.counts.x: expected a count from 0 to its n (200)"),
    (_set("per_row.seconds_per_row", float("inf")), "per_row.seconds_per_row: expected a finite number, got inf"),
    (_set("rates", _DROP), "rates: missing"),
    (_set("rates", []), "rates: expected an object, got a list"),
    (_set("config_hash", 3), "config_hash: expected a hash"),
]


@pytest.mark.parametrize("change,named", MALFORMED, ids=[m[1].split(":")[0] + f"-{i}" for i, m in enumerate(MALFORMED)])
def test_a_malformed_profile_is_left_out_in_one_line_naming_the_night_the_file_and_the_field(tmp_path, change, named):
    """A malformed earlier ``profile.json`` is left out of the comparison in one line naming the
    night, the file and the field (a profile without ``rates`` too), instead of crashing the
    nightly and backfill flows in drift.compare after the answers were written."""
    root = tmp_path / "answers"
    bad = _profile()
    change(bad)
    _write_night(root, "2026-12-02", _profile())
    _write_night(root, "2026-12-03", raw=json.dumps(bad))  # NaN, Infinity as Python's json writes them
    _write_night(root, "2026-12-04", _profile())
    r = drift_watch.night_drift(str(root), "2026-12-04", CFG)
    assert r["status"] == "compared" and r["baseline"] == ["2026-12-02"], r["notes"]
    assert len(r["notes"]) == 1 and r["notes"][0].endswith(")"), r["notes"]
    assert r["notes"][0].startswith(f"2026-12-03 left out: profile unreadable (_report/profile.json: {named}"), r["notes"]
    assert "\n" not in r["notes"][0] and len(r["notes"][0]) < 250
    tonight = drift_watch.night_drift(str(root), "2026-12-03", CFG)  # the night's own profile: one line
    assert tonight["status"] == "no_profile" and len(tonight["notes"]) == 1
    assert tonight["notes"][0].startswith(f"no comparison: this night (2026-12-03): profile unreadable "
                                          f"(_report/profile.json: {named}")
    assert drift.markdown(tonight).startswith("## No comparison: this night's profile is unreadable\n")


def test_rates_beyond_the_exact_tests_range_are_compared_not_called_unchanged():
    """Near 10**10 rows, where scipy's Fisher test overflows, a rate that went from 1/3 to 1/2 is
    compared by the chi-square test and called moved, not unchanged (p = 1)."""
    n = 10**9
    r = drift.compare_rate("error_rate", n // 2, n, 9 * (n // 3), 9 * n, CFG)
    assert r["p_value"] < 1e-6 and r["moved"] and r["test"] == "chi-square test"
    assert drift.compare_rate("error_rate", 30, 100, 300, 1000, CFG)["test"] == "Fisher's exact test"


def test_a_comparison_that_raises_is_one_line_and_drift_json_not_a_crash(tmp_path, monkeypatch):
    """The flow's drift step runs after the answers are written: whatever the comparison raises
    is one note and ``error`` in drift.json; the run fails only under drift.require_baseline."""
    root = tmp_path / "answers"
    _write_night(root, "2026-12-02", _profile())
    _write_night(root, "2026-12-03", _profile())

    def broken(*a, **k):
        raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")

    monkeypatch.setattr(drift, "compare", broken)
    monkeypatch.setattr(drift_watch, "announce", lambda *a: None)  # Prefect: the flows' tests
    r = drift_watch.night_drift(str(root), "2026-12-03", CFG)
    assert r["status"] == "error" and r["fail_reason"] is None and r["measures"] == []
    assert r["error"] == "TypeError: unsupported operand type(s) for +: 'int' and 'str'"
    assert r["notes"] == ["no comparison: the comparison failed (TypeError: unsupported operand type(s) for +: "
                          "'int' and 'str')"]
    assert drift.markdown(r).startswith("## No comparison: the comparison failed\n")
    strict = drift_watch.night_drift(str(root), "2026-12-03", DriftConfig(require_baseline=True))
    assert strict["fail_reason"].startswith("drift on 2026-12-03: no comparison (drift.require_baseline): "
                                            "no comparison: the comparison failed (TypeError")

    def unlisted(root):
        raise PermissionError(13, "Permission denied", root)

    monkeypatch.setattr(drift_watch, "nights", unlisted)  # a failure outside the comparison too
    w = drift_watch.watch_night(str(root), "2026-12-03", CFG)
    stored = json.loads((root / "date=2026-12-03" / "_report" / "drift.json").read_text())
    assert w["status"] == stored["status"] == "error" and stored["error"].startswith("PermissionError: ")
    assert w["fail_reason"] is None and w["uri"].endswith("date=2026-12-03/_report/drift.json")


def test_a_measure_that_fails_the_run_keeps_the_tables_six_columns():
    """A row marked **fails the run** keeps the table's six cells under its six-column header."""
    tonight = _profile(reasons={"no_documents": 12})
    measures = drift.compare(tonight, [_profile()], DriftConfig(fail_on=["error_reason:*"]))
    section = drift.markdown({"status": "compared", "baseline": ["2026-01-01"], "config_hash": "h1",
                              "measures": measures, "notes": []})
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert len(rows) == 4 and {line.count("|") for line in rows} == {7}, rows  # header, rule, 2 moved
    failing = next(line for line in rows if "no_documents" in line)
    assert "**fails the run**" in failing and failing.endswith(" |")
    assert "**fails the run**" not in next(line for line in rows if "`error_rate`" in line)


def test_the_heading_reads_naturally_for_one_night_several_and_none():
    """The heading and the per-row test read naturally for one baseline night ("the last
    night", "vs 1 night"; not "the last 1 night", "median of 1 nights"), several, and none."""
    tonight = _profile(seconds=2.0)
    one = {"status": "compared", "baseline": ["2026-01-01"], "config_hash": "h1", "notes": [],
           "measures": drift.compare(tonight, [_profile()], CFG)}
    assert drift.markdown(one).startswith("## Changes since the last night\n")
    assert next(r for r in one["measures"] if r["measure"] == "seconds_per_row")["test"] == "relative change vs 1 night"
    three = {**one, "baseline": ["2026-01-03", "2026-01-02", "2026-01-01"],
             "measures": drift.compare(tonight, [_profile()] * 3, CFG)}
    assert drift.markdown(three).startswith("## Changes since the last 3 nights\n")
    assert next(r for r in three["measures"] if r["measure"] == "seconds_per_row")["test"] == \
        "relative change vs median of 3 nights"
    assert "; 1 measure compared, 0 moved." in drift.markdown({**one, "measures": [
        drift.compare_rate("error_rate", 1, 100, 1, 100, CFG)]})
    for none in ({"status": "no_baseline", "baseline": [], "reason": "first night"},
                 {"status": "no_baseline", "baseline": [], "reason": "no baseline among 1 earlier night"},
                 {"status": "compared", "baseline": []}):
        section = drift.markdown({**none, "notes": [], "measures": []})
        assert section.startswith(f"## No comparison: {none.get('reason', 'no baseline night')}\n"), section
        assert "since the last" not in section


def test_a_table_cell_from_the_profile_cannot_break_the_row():
    tonight = _profile(labels={"A|B": 150, "REFUTES\nx": 50})
    r = drift.compare_mix("answers:choice", tonight["mixes"]["answers:claim"], {"A|B": 50, "REFUTES\nx": 150}, CFG)
    row = drift.describe(r)
    assert "\n" not in row and row.replace("\\|", "").count("|") == 7 and "A\\|B" in row


@pytest.fixture
def drift_cli(monkeypatch):
    """``specrag-batch drift`` in-process, lines unwrapped."""
    from typer.testing import CliRunner

    from specrag_batch.cli import commands as cli

    monkeypatch.setattr(cli.console, "width", 2000)
    monkeypatch.setattr(cli.err_console, "width", 2000)
    return lambda *args: CliRunner().invoke(cli.app, ["drift", *map(str, args)])


def _errors(res) -> list[str]:
    return [line for line in res.output.splitlines() if line.strip()]


def test_drift_for_a_night_without_a_partition_exits_2_and_writes_nothing(tmp_path, drift_cli):
    """``drift ROOT --date D`` for a partition that does not exist, a partition given as ROOT, and
    a root without partitions each exit 2 and write nothing (no made-up ``date=D/_report/``,
    no ``date=D/date=D/``)."""
    root = tmp_path / "answers"
    _write_night(root, "2026-12-04", _profile())
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    res = drift_cli(root, "--date", "2026-12-05")
    assert res.exit_code == 2 and _errors(res) == [
        f"error: no partition date=2026-12-05 under {root} (it holds 1 partition(s), 2026-12-04 to 2026-12-04)"]
    part = root / "date=2026-12-04"
    res = drift_cli(part, "--date", "2026-12-04")
    assert res.exit_code == 2 and _errors(res) == [
        f"error: no partition date=2026-12-04 under {part} (OUTPUT_ROOT is itself a date= partition; give the "
        "directory that holds the partitions)"]
    (tmp_path / "empty").mkdir()
    res = drift_cli(tmp_path / "empty", "--date", "2026-12-05")
    assert res.exit_code == 2 and _errors(res) == [
        f"error: no partition date=2026-12-05 under {tmp_path / 'empty'} (it holds no date=YYYY-MM-DD partitions)"]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before + [tmp_path.joinpath("empty").relative_to(tmp_path)]
    assert drift_cli(root, "--date", "2026-12-04").exit_code == 0  # the partition that is there


def test_drift_config_errors_are_one_line_naming_the_file_and_the_field(tmp_path, drift_cli):
    """``drift -c`` with a bad config, and a stored manifest's unknown ``config.drift`` key, are
    each one line naming the file and the field, not pydantic's multi-line error."""
    root = tmp_path / "answers"
    _write_night(root, "2026-12-04", _profile())
    cfg = tmp_path / "nightly.yaml"
    cfg.write_text("drift:\n  p_value: 2\n")
    res = drift_cli(root, "--date", "2026-12-04", "-c", cfg)
    assert res.exit_code == 2 and _errors(res) == [
        f"error: {cfg}: drift.p_value: Input should be less than 1 (got 2)"], res.output
    cfg.write_text("drift:\n  fail_onn: [error_rate]\n")
    res = drift_cli(root, "--date", "2026-12-04", "-c", cfg)
    assert res.exit_code == 2 and len(_errors(res)) == 1 and _errors(res)[0].startswith(
        f"error: {cfg}: drift.fail_onn: unknown key"), res.output
    manifest = root / "date=2026-12-04" / "_manifest.json"
    manifest.write_text(json.dumps({"failed_shards": 0, "config": {"drift": {"fail_onn": ["error_rate"]}}}))
    res = drift_cli(root, "--date", "2026-12-04")
    assert res.exit_code == 2 and len(_errors(res)) == 1 and _errors(res)[0].startswith(
        f"error: {manifest}: drift.fail_onn: unknown key"), res.output
    manifest.write_text(json.dumps({"failed_shards": 0, "config": {"drift": ["x"]}}))
    res = drift_cli(root, "--date", "2026-12-04")
    assert res.exit_code == 2 and _errors(res) == [f"error: {manifest}: config.drift: expected a mapping"]
    assert not (root / "date=2026-12-04" / "_report" / "drift.json").exists()


def _finished_night(root, date: str, n: int = 8) -> str:
    """A finished nightly partition under ``root``: one output shard listed ``ok``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from specrag_batch.core.schema import OUTPUT_SCHEMA

    out = root / f"date={date}"
    out.mkdir(parents=True)
    rows = [{"query_id": f"q{i}", "task": "qa", "answer": "x", "score": -1.0 - i, "score_draft": -1.0 - i,
             "low_confidence": False, "fast_path": False, "drafts": [], "flags": [], "mode": "speculative",
             "correct": i % 2 == 0} for i in range(n)]
    pq.write_table(pa.Table.from_pylist(rows, schema=OUTPUT_SCHEMA), out / "a.parquet")
    (out / "_manifest.json").write_text(json.dumps({"failed_shards": 0, "config_hash": "h1",
                                                    "shards": [{"status": "ok", "output": str(out / "a.parquet")}]}))
    return str(out)


def test_report_by_hand_keeps_the_drift_section_from_drift_json(tmp_path, drift_cli):
    """``specrag-batch report`` on a nightly partition keeps the "Changes since ..." section the
    nightly flow put at the top of report.md, rebuilt from ``drift.json``."""
    from typer.testing import CliRunner

    from specrag_batch.cli import commands as cli

    report = lambda prefix: CliRunner().invoke(cli.app, ["report", str(prefix)])  # noqa: E731
    root = tmp_path / "answers"
    first, second = _finished_night(root, "2026-12-03"), _finished_night(root, "2026-12-04")
    assert report(first).exit_code == 0 and report(second).exit_code == 0  # profiles
    assert drift_cli(root, "--date", "2026-12-04").exit_code == 0
    md = tmp_path / "answers" / "date=2026-12-04" / "_report" / "report.md"
    before = md.read_text()
    assert "## Changes since the last night\n" in before

    res = report(second)
    assert res.exit_code == 0, res.output
    assert md.read_text() == before and before.count(drift_watch.SECTION_START) == 1
    assert f"drift section kept from {second}/_report/drift.json" in res.output

    # read, not recomputed: what drift.json holds is what the section shows
    stored_uri = tmp_path / "answers" / "date=2026-12-04" / "_report" / "drift.json"
    stored = json.loads(stored_uri.read_text())
    stored_uri.write_text(json.dumps({**stored, "notes": ["a note only drift.json holds"]}))
    assert report(second).exit_code == 0
    assert "- a note only drift.json holds\n" in md.read_text().split(drift_watch.SECTION_END)[0]

    # no drift.json: no section and not a word about drift
    res = report(first)
    assert res.exit_code == 0 and "drift" not in res.output.lower()
    assert drift_watch.SECTION_START not in (root / "date=2026-12-03" / "_report" / "report.md").read_text()

    # a drift.json that is not a comparison: the report is written, one warning, no section
    stored_uri.write_text(json.dumps({"baseline": 3}))
    res = report(second)
    assert res.exit_code == 0 and drift_watch.SECTION_START not in md.read_text()
    assert [line for line in res.output.splitlines() if line.startswith("warning:")] == [
        f"warning: drift section not kept: {second}/_report/drift.json: not a drift comparison "
        "(date: Field required)"], res.output
    # wrong types are refused naming the field, never rendered (a "false" string must not show as moved)
    measure = stored["measures"][0]
    for bad, field in (({**stored, "measures": [{**measure, "moved": "false"}]}, "measures.0.moved"),
                       ({**stored, "baseline": "2026-12-03"}, "baseline"),
                       ({**stored, "status": "fine"}, "status"),
                       ({**stored, "measures": [{**measure, "p_value": "0.01"}]}, "measures.0.p_value"),
                       # out-of-range numbers, a contradictory status, huge strings, shapes the
                       # renderer would end in a KeyError on, JSON nested past the parser's recursion limit
                       ({**stored, "measures": [{**measure, "p_value": float("inf")}]}, "measures.0.p_value"),
                       ({**stored, "measures": [{**measure, "p_value": 1.5}]}, "measures.0.p_value"),
                       ({**stored, "baseline": []}, "the file"),
                       ({**stored, "reason": "x" * 5_000_000}, "reason"),
                       ({**stored, "measures": [{**measure, "measure": "m" * 3000}]}, "measures.0.measure"),
                       ({k: v for k, v in stored.items() if k != "measures"}, "measures"),
                       ({**stored, "measures": [{**measure, "tonight": {}}]}, "measures.0.tonight"),
                       ({**stored, "moved": "low_confidence_rate"}, "moved"),
                       ({**stored, "error": {"x": 1}}, "error"),
                       ('{"measures": ' + "[" * 100_000 + "]" * 100_000 + "}", "drift.json: not a JSON file")):
        stored_uri.write_text(bad if isinstance(bad, str) else json.dumps(bad))
        res = report(second)
        assert res.exit_code == 0 and drift_watch.SECTION_START not in md.read_text()
        warnings = [line for line in res.output.splitlines() if line.startswith("warning:")]
        want = field if field.startswith("drift.json") else f"not a drift comparison ({field}: "
        assert len(warnings) == 1 and want in warnings[0] and len(res.output) < 5000, res.output[:3000]


def test_a_backfilled_earlier_night_redoes_the_later_nights_whose_baseline_it_enters(tmp_path, monkeypatch):
    """A backfill that adds an earlier date redoes the drift.json of the later nights whose
    baseline (the last K nights before them) it enters."""
    monkeypatch.setattr(drift_watch, "announce", lambda *a: None)  # Prefect: the flows' tests
    root = tmp_path / "answers"
    k2 = {"failed_shards": 0, "config": {"drift": {"baseline_nights": 2}}}
    for date in ("2026-01-01", "2026-01-02", "2026-01-04", "2026-01-05", "2026-01-06"):
        _write_night(root, date, _profile())
        (root / f"date={date}" / "_manifest.json").write_text(json.dumps(k2))
    (root / "date=2026-01-04" / "_manifest.json").write_text(json.dumps(
        {"failed_shards": 0, "config": {"drift": {"baseline_nights": 2, "fail_on": ["low_confidence_rate"]}}}))
    _write_night(root, "2026-01-07", _profile(config_hash="h2"))
    _write_night(root, "2026-01-08", _profile())  # never compared: no drift.json, nothing to go stale
    for date in ("2026-01-01", "2026-01-02", "2026-01-04", "2026-01-05", "2026-01-06", "2026-01-07"):
        drift_watch.write_drift(str(root), drift_watch.night_drift(str(root), date, DriftConfig(baseline_nights=2)))
    assert json.loads((root / "date=2026-01-04/_report/drift.json").read_text())["baseline"] == ["2026-01-02", "2026-01-01"]

    # the backfill adds 2026-01-03, twice the low-confidence rate, and compares it
    _write_night(root, "2026-01-03", _profile(low=60))
    drift_watch.write_drift(str(root), drift_watch.night_drift(str(root), "2026-01-03", DriftConfig(baseline_nights=2)))
    stale = drift_watch.later_nights(str(root), {"2026-01-03": "h1"}, redo=False)
    assert [(n["date"], n["why"], n["redone"]) for n in stale] == [
        ("2026-01-04", "2026-01-03 now in its baseline", False), ("2026-01-05", "2026-01-03 now in its baseline", False)]
    assert stale[0]["command"] == f"specrag-batch drift {root} --date 2026-01-04"
    assert json.loads((root / "date=2026-01-04/_report/drift.json").read_text())["baseline"] == ["2026-01-02", "2026-01-01"]

    redone = drift_watch.later_nights(str(root), {"2026-01-03": "h1"})
    assert [(n["date"], n["redone"], n["baseline"]) for n in redone] == [
        ("2026-01-04", True, ["2026-01-03", "2026-01-02"]), ("2026-01-05", True, ["2026-01-04", "2026-01-03"])]
    assert redone[0]["moved"] == ["low_confidence_rate"]  # against a baseline holding the new night
    assert redone[0]["fails"] == ["low_confidence_rate"]  # its own drift section; said, never raised
    assert redone[0]["fail_reason"].startswith("drift on 2026-01-04: 1 measure(s) of drift.fail_on moved")
    for date, baseline in (("2026-01-04", ["2026-01-03", "2026-01-02"]), ("2026-01-05", ["2026-01-04", "2026-01-03"]),
                           ("2026-01-06", ["2026-01-05", "2026-01-04"])):  # 01-06's window never reached 01-03
        stored = json.loads((root / f"date={date}" / "_report" / "drift.json").read_text())
        assert stored["baseline"] == baseline, date
    assert not (root / "date=2026-01-08" / "_report" / "drift.json").exists()

    # the same backfill again: the nights whose baseline holds 2026-01-03 are redone (its profile may
    # have been written again), with the same result
    again = drift_watch.later_nights(str(root), {"2026-01-03": "h1"})
    assert [(n["date"], n["why"]) for n in again] == [
        ("2026-01-04", "its baseline holds 2026-01-03, which this backfill ran again"),
        ("2026-01-05", "its baseline holds 2026-01-03, which this backfill ran again")]
    assert [n["moved"] for n in again] == [n["moved"] for n in redone]

    # a night whose stored drift section does not validate is marked, not redone
    (root / "date=2026-01-05" / "_manifest.json").write_text(json.dumps({"config": {"drift": {"p_value": 3}}}))
    marked = drift_watch.later_nights(str(root), {"2026-01-03": "h1"})[1]
    assert marked["date"] == "2026-01-05" and not marked["redone"] and "uri" not in marked
    assert marked["error"].startswith(f"its stored drift section: {root}/date=2026-01-05/_manifest.json: drift.p_value")


def test_a_partition_name_with_a_trailing_newline_is_not_a_night(tmp_path):
    """``date=2026-11-26\\n`` (and a trailing space) is no night: not counted as 2026-11-26 ("$"
    matches before a final newline), so the report never points at a path that does not exist."""
    (tmp_path / "date=2026-12-02").mkdir()
    (tmp_path / "date=2026-11-26\n").mkdir()
    (tmp_path / "date=2026-11-27 ").mkdir()
    import datetime as dt

    assert drift_watch.nights(str(tmp_path)) == [dt.date(2026, 12, 2)]


def test_report_by_hand_with_a_drift_json_that_cannot_be_read_warns_and_writes_the_report(tmp_path):
    """A ``_report/drift.json`` that cannot be read (a directory) gives ``specrag-batch report`` a
    warning, and the report is written, not a raw OS error after report.md was rewritten."""
    from typer.testing import CliRunner

    from specrag_batch.cli import commands as cli

    night = _finished_night(tmp_path / "answers", "2026-12-04")
    (tmp_path / "answers" / "date=2026-12-04" / "_report" / "drift.json").mkdir(parents=True)
    res = CliRunner().invoke(cli.app, ["report", night])
    assert res.exit_code == 0, res.output
    warnings = [line for line in res.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "drift section not kept" in warnings[0] and "drift.json" in warnings[0]
    assert (tmp_path / "answers" / "date=2026-12-04" / "_report" / "report.md").exists()
