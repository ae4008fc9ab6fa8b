"""Night over night through the real flows (issue 41): a backfill of 6 dates on the fake engine
(tests/fakes.py, real tokenizer, real Prefect flow runs), one date with a shifted claim label
mix and twice the low-confidence rate, one identical to an earlier date; the drift section
written for each date in date order, flagging exactly the planted measures; ``drift.fail_on``
failing the run; another config hash and an unreadable profile named in one line each;
``specrag-batch drift`` reproducing a night; and an ``s3://`` root (moto).

The fake's drafts put their whole log-probability on the first token, a hash of the prompt, so a
row's score does not depend on its answer: the planted rows change the label mix and, answering
outside the claim labels (no valid draft, low confidence by rule), the low-confidence rate,
and nothing else. Seconds per row are the fake's process noise, so their threshold is raised."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from specrag_batch.engines import engine as engines
from specrag_batch.core import storage
from specrag_batch.run.drift.watch import NO_BASELINE_TAG, TAG, DriftError

from ..conftest import small_config
from ..fakes import FakeEngine, digest

pytestmark = pytest.mark.integration

DATES = [f"2026-03-0{i}" for i in range(1, 7)]
SHIFTED, IDENTICAL = "2026-03-05", "2026-03-04"  # 2026-03-04 holds 2026-03-02's rows
ROWS = 60


def _reply(text: str, h: int) -> str:
    label = "UNSURE" if "(u)" in text else "SUPPORTS" if "(a)" in text else "REFUTES"
    return f" The documents point to it (case {h % 97}).\nAnswer: {label}"


class NightEngine(FakeEngine):
    """The fake engine whose draft score is a hash of the prompt alone (first token's log-prob)."""

    def generate(self, prompts, **kw):
        out = super().generate(prompts, **kw)
        for p, r in zip(prompts, out):
            r.logprobs = [-(digest(p, kw["seed"]) % 97) / 10] + [0.0] * (len(r.logprobs) - 1)
        return out


def _night(seed: int, shifted: bool = False, rows: int = ROWS) -> pa.Table:
    """``rows`` claims, labelled (a) / (b) alternately; shifted: every fourth one (u) instead."""
    recs = []
    for i in range(rows):
        tag = "u" if shifted and i % 4 == 0 else "ab"[i % 2]
        recs.append({"query_id": f"n{seed}-{i}", "query": f"Claim {seed}-{i} ({tag}): the sea rose by {i} mm.",
                     "task": "claim", "documents": [{"doc_id": f"d{j}", "title": "Sea", "text": f"Sea level note {j}."}
                                                    for j in range(3)]})
    return pa.Table.from_pylist(recs)


def _config(**drift):
    return small_config(**{"sampling.strategy": "random", "sampling.num_drafts": 2,
                           "selection.consensus_enabled": False, "selection.tau_min": -7.0,
                           "drift.min_effect": {"seconds_per_row": 20.0}, **{f"drift.{k}": v for k, v in drift.items()}})


@pytest.fixture
def fake_engine(monkeypatch):
    engine = NightEngine(reply=_reply)
    monkeypatch.setattr(engines, "get_engine", lambda cfg, seed=0: engine)
    monkeypatch.setattr(engines, "loaded_engines", lambda: [engine])  # its usage is recorded
    return engine


def _write_inputs(root: str, nights: dict[str, pa.Table]) -> None:
    for date, t in nights.items():
        storage.write_parquet_atomic(storage.join(root, f"date={date}", "part-0.parquet"), t)


def _tagged(tag: str) -> list[str]:
    """Names of the flows whose runs carry ``tag``."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[tag])))
        return sorted({client.read_flow(r.flow_id).name for r in runs})


def _drift(out: str, date: str) -> dict:
    return json.loads(storage.read_bytes(storage.join(out, f"date={date}", "_report", "drift.json")))


def test_backfill_flags_exactly_the_shifted_measures_in_date_order(prefect_harness, fake_engine, tmp_path):
    from specrag_batch.cli.commands import app
    from specrag_batch.run.scheduled.backfill import backfill_flow
    from specrag_batch.run.scheduled.nightly import nightly_flow

    inp, out = str(tmp_path / "queries"), str(tmp_path / "answers")
    nights = {d: _night(i) for i, d in enumerate(DATES)}
    nights[IDENTICAL], nights[SHIFTED] = _night(1), _night(4, shifted=True)
    _write_inputs(inp, nights)
    s = backfill_flow(inp, out, DATES[0], DATES[-1], max_concurrency=2, config=_config().model_dump(mode="json"))
    assert s["ok"] == 6
    first = _drift(out, DATES[0])
    assert first["status"] == "no_baseline" and first["notes"] == [
        f"first night: no earlier night under {out}, nothing to compare"]
    for date in DATES[1:]:
        r = _drift(out, date)
        assert r["status"] == "compared" and r["baseline"] == sorted((d for d in DATES if d < date), reverse=True)
        assert r["moved"] == (["answers:claim", "low_confidence_rate"] if date == SHIFTED else []), (date, r["measures"])
    shifted = {m["measure"]: m for m in _drift(out, SHIFTED)["measures"]}
    low = shifted["low_confidence_rate"]
    assert low["tonight"]["rate"] > 1.6 * low["baseline"]["rate"] and low["p_value"] < 0.01
    assert shifted["answers:claim"]["tonight"]["shares"]["(not a label)"] == 0.25
    assert {"score:claim", "draft_tokens", "error_rate", "seconds_per_row"} <= set(shifted)  # compared
    assert any(m.startswith("tokens_per_row:") and m.endswith(":generated") for m in shifted)
    report = storage.read_bytes(f"{out}/date={SHIFTED}/_report/report.md").decode()
    head = report.split("<!-- /drift -->")[0]
    assert head.startswith("# Run report") and "## Changes since the last 4 nights" in head
    assert "`answers:claim`" in head and "`low_confidence_rate`" in head and "`score:claim`" not in head
    assert s["dates"][4]["drift"]["moved"] == ["answers:claim", "low_confidence_rate"]
    assert _tagged(f"{TAG}:low_confidence_rate") == ["specrag-backfill"]  # what an automation matches

    # by hand: the same comparison, printed
    res = CliRunner().invoke(app, ["drift", out, "--date", SHIFTED, "--no-write"])
    assert res.exit_code == 0, res.output
    assert "| `answers:claim` |" in res.output and "| `low_confidence_rate` |" in res.output
    assert res.output.count("| `") == 2

    # the user asked to fail on the low-confidence rate: the same backfill (resumed) fails naming the date
    with pytest.raises(DriftError, match=f"drift on {SHIFTED}: 1 measure\\(s\\) of drift.fail_on moved: "
                                         "`low_confidence_rate`"):
        backfill_flow(inp, out, DATES[0], DATES[-1], config=_config(fail_on=["low_confidence_rate"]).model_dump(mode="json"))
    res = CliRunner().invoke(app, ["drift", out, "--date", SHIFTED, "--no-write"])  # the night's stored drift section
    assert res.exit_code == 1 and "drift.fail_on moved" in res.output

    # another config hash: every earlier night named and left out, the run does not fail
    _write_inputs(inp, {"2026-03-07": _night(6)})
    other = _config().model_dump(mode="json")
    other["selection"]["tau_min"] = -6.0
    m = nightly_flow(inp, out, date="2026-03-07", config=other)
    assert m["drift"]["status"] == "no_baseline"
    notes = _drift(out, "2026-03-07")["notes"]
    assert notes[0].startswith("6 earlier nights left out: another config hash than this night's") and len(notes) == 2

    # an unreadable profile is left out with one line, by hand as in the flow
    (tmp_path / "answers" / f"date={DATES[2]}" / "_report" / "profile.json").write_text("{broken")
    res = CliRunner().invoke(app, ["drift", out, "--date", DATES[5]])
    assert res.exit_code == 0 and f"- {DATES[2]} left out: profile unreadable" in res.output
    assert _drift(out, DATES[5])["baseline"] == [DATES[4], DATES[3], DATES[1], DATES[0]]


def test_nightly_on_s3_compares_with_the_night_before(prefect_harness, fake_engine, s3_bucket):
    from specrag_batch.run.scheduled.nightly import nightly_flow

    inp, out = f"{s3_bucket}/queries", f"{s3_bucket}/answers"
    _write_inputs(inp, {DATES[0]: _night(0, rows=12), DATES[1]: _night(0, rows=12)})
    cfg = _config().model_dump(mode="json")
    assert nightly_flow(inp, out, date=DATES[0], config=cfg)["drift"]["status"] == "no_baseline"
    m = nightly_flow(inp, out, date=DATES[1], config=cfg)
    assert m["drift"]["status"] == "compared" and m["drift"]["baseline"] == [DATES[0]] and m["drift"]["moved"] == []
    assert m["drift"]["uri"] == f"{out}/date={DATES[1]}/_report/drift.json"
    report = storage.read_bytes(f"{out}/date={DATES[1]}/_report/report.md").decode()
    assert "## Changes since the last night\n" in report and "Nothing moved." in report
    assert storage.exists(f"{out}/date={DATES[0]}/_report/profile.json")
    assert "specrag-nightly" in _tagged(NO_BASELINE_TAG)


def _nightly_cli(inp, out, date: str, config, tmp_path):
    import subprocess
    import sys

    from ..conftest import ROOT, subprocess_env

    return subprocess.run([sys.executable, "-m", "tests.fake_engine_cli", "nightly", "--input-root", str(inp),
                           "--output-root", str(out), "--date", date, "-c", str(config)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600, env=subprocess_env(tmp_path))


def test_a_drift_failure_is_one_line_and_a_malformed_profile_never_crashes_the_night(prefect_harness, fake_engine,
                                                                                    tmp_path):
    """A documented drift failure (drift.require_baseline here) is the one-line error alone,
    without Prefect's "Encountered exception during execution" and traceback; an earlier night's
    ``profile.json`` with ``rates.error_rate: null`` is left out of the comparison instead of
    crashing the nightly flow after the answers were written."""
    from specrag_batch.run.scheduled.nightly import nightly_flow

    from ..conftest import ROOT, sample_rows

    # in-process: the flow run ends Failed with the one-line message as its state's
    inp = str(tmp_path / "queries")
    _write_inputs(inp, {DATES[0]: _night(0, rows=8)})
    state = nightly_flow(inp, str(tmp_path / "answers-0"), date=DATES[0],
                         config=_config(require_baseline=True).model_dump(mode="json"), return_state=True)
    assert state.is_failed() and state.message.startswith(
        f"drift on {DATES[0]}: no comparison (drift.require_baseline): first night"), state.message
    with pytest.raises(DriftError, match="drift.require_baseline"):
        state.result()

    # the console script: exit 1, the error line and no traceback
    cli_in, out = tmp_path / "cli-in", tmp_path / "cli-out"
    _write_inputs(str(cli_in), {d: sample_rows("climate_fever", 4) for d in ("2026-12-02", "2026-12-03")})
    strict, lax = tmp_path / "strict.yaml", tmp_path / "lax.yaml"
    base = (ROOT / "configs" / "test-smollm2.yaml").read_text()
    strict.write_text(base + "\ndrift:\n  require_baseline: true\n")
    lax.write_text(base)
    r = _nightly_cli(cli_in, out, "2026-12-02", strict, tmp_path)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "Encountered exception" not in r.stderr, r.stderr[-3000:]
    assert [line for line in r.stderr.splitlines() if line.startswith("error:")] == [
        f"error: drift on 2026-12-02: no comparison (drift.require_baseline): first night: no earlier night under "
        f"{out}, nothing to compare; see {out}/date=2026-12-02/_report/drift.json"]

    # an earlier night's malformed profile: left out in one line, the night finishes (exit 0)
    profile = out / "date=2026-12-02" / "_report" / "profile.json"
    p = json.loads(profile.read_text())
    p["rates"]["error_rate"] = None
    profile.write_text(json.dumps(p))
    r = _nightly_cli(cli_in, out, "2026-12-03", lax, tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    d = _drift(str(out), "2026-12-03")
    assert d["status"] == "no_baseline" and d["notes"][0] == (
        '2026-12-02 left out: profile unreadable (_report/profile.json: rates.error_rate: expected a count pair '
        '{"k", "n"}, got null)')
    report = (out / "date=2026-12-03" / "_report" / "report.md").read_text()
    assert "## No comparison: no baseline among 1 earlier night\n" in report


def test_a_backfill_of_an_earlier_date_redoes_the_later_nights_it_enters(prefect_harness, fake_engine, tmp_path,
                                                                           monkeypatch):
    """Backfilling an earlier date redoes the later nights' drift.json whose baseline (the last
    K nights by date) now holds it."""
    import yaml

    from specrag_batch.cli import commands as cli
    from specrag_batch.run.scheduled.nightly import nightly_flow

    monkeypatch.setattr(cli.console, "width", 2000)
    inp, out = str(tmp_path / "queries"), str(tmp_path / "answers")
    _write_inputs(inp, {DATES[0]: _night(0, rows=12), DATES[1]: _night(1, rows=12),
                        DATES[2]: _night(2, rows=12)})
    cfg = _config().model_dump(mode="json")
    for date in DATES[1:3]:
        nightly_flow(inp, out, date=date, config=cfg)
    assert _drift(out, DATES[1])["status"] == "no_baseline" and _drift(out, DATES[2])["baseline"] == [DATES[1]]

    config = tmp_path / "nightly.yaml"
    config.write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(cli.app, ["backfill", "--input-root", inp, "--output-root", out, "--start", DATES[0],
                                       "--end", DATES[0], "-c", str(config)])
    assert res.exit_code == 0, res.output
    assert _drift(out, DATES[1])["baseline"] == [DATES[0]]
    assert _drift(out, DATES[2])["baseline"] == [DATES[1], DATES[0]]
    later = [line for line in res.output.splitlines() if line.startswith("drift of later night")]
    assert later == [f"drift of later night {d} ({DATES[0]} now in its baseline) redone: "
                     f"{_drift_cell(_drift(out, d))}: {out}/date={d}/_report/drift.json" for d in DATES[1:3]], res.output
    assert _drift_cell(_drift(out, DATES[1])) == "nothing moved" and f"│ {DATES[0]} │ ok " in res.output
    report = storage.read_bytes(f"{out}/date={DATES[1]}/_report/report.md").decode()
    assert report.count("<!-- drift -->") == 1 and "## Changes since the last night\n" in report
    summary = json.loads(storage.read_bytes(f"{out}/_backfills/{DATES[0]}_{DATES[0]}.json"))
    assert [n["date"] for n in summary["later_nights"]] == DATES[1:3]


def _drift_cell(d: dict) -> str:
    from specrag_batch.cli.commands import _drift_cell as cell

    return cell(d)
