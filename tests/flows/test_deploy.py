"""prefect.yaml deployments, built by `prefect deploy` against a real local Prefect server
process and checked through its REST API; the nightly, claim and backfill flows run end to end
(real vLLM engine, real Prefect flow runs, moto's S3 server)."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
import yaml

from specrag_batch.core import storage
from specrag_batch.config import load_config
from specrag_batch.config.execution import ExecutionConfig

from ..conftest import ROOT, _free_port, sample_rows, small_config, stop_process_group

PREFECT = str(Path(sys.executable).with_name("prefect"))
SPEC = yaml.safe_load((ROOT / "prefect.yaml").read_text())


def api_post(url: str, json: dict, timeout: float = 30) -> httpx.Response:
    """POST to the test's Prefect server, retrying 503 as Prefect's own client does: the
    server's SQLite answers 503 while another writer (its scheduler, a deploy) holds the
    database lock, which happens on a loaded 2-core machine (seen in CI). Any other status
    is returned at once."""
    for attempt in range(8):
        r = httpx.post(url, json=json, timeout=timeout)
        if r.status_code != 503:
            return r
        time.sleep(min(2 ** attempt, 15))
    return r


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory):
    """`prefect server start` as its own process group on 127.0.0.1 (SQLite in a temp home)."""
    home = tmp_path_factory.mktemp("prefect-server")
    port = _free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_UI_ENABLED": "false",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_API_URL": ""}
    log = open(home / "server.log", "wb")
    proc = subprocess.Popen([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    api = f"http://127.0.0.1:{port}/api"
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, (home / "server.log").read_text()
        time.sleep(1)
    else:
        pytest.fail("prefect server did not start: " + (home / "server.log").read_text()[-2000:])
    cli_env = {**env, "PREFECT_API_URL": api}
    for pool, kind in (("cpu-pool", "process"), ("gpu-pool", "kubernetes")):
        subprocess.run([PREFECT, "work-pool", "create", pool, "--type", kind], env=cli_env,
                       check=True, capture_output=True)
    yield api, cli_env
    stop_process_group(proc, 20)
    log.close()


def deploy(prefect_file: Path, env: dict, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([PREFECT, "--no-prompt", "deploy", "--all", "--prefect-file", str(prefect_file)],
                          env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def deployed(prefect_server):
    api, env = prefect_server
    r = deploy(ROOT / "prefect.yaml", env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    deps = api_post(f"{api}/deployments/filter", json={}, timeout=30).json()
    return api, {d["name"]: d for d in deps}


@pytest.mark.slow  # starts a `prefect server` process (minutes on 2 cores)
def test_prefect_yaml_deploys_every_deployment(deployed):
    _api, deps = deployed
    assert sorted(deps) == sorted(d["name"] for d in SPEC["deployments"])
    for spec in SPEC["deployments"]:
        d = deps[spec["name"]]
        assert d["entrypoint"] == spec["entrypoint"]
        assert d["work_pool_name"] == spec["work_pool"]["name"]
        assert d["enforce_parameter_schema"] is True
        assert d["parameters"] == spec["parameters"]
        # the flow's own parameter schema came from the code (required args are required)
        required = set(d["parameter_openapi_schema"].get("required", []))
        assert required - set(spec["parameters"]) <= {"start_date", "end_date"}


@pytest.mark.slow  # starts a `prefect server` process (minutes on 2 cores)
def test_nightly_schedule_cron_timezone_and_pools(deployed):
    api, deps = deployed
    nightly = deps["nightly-gpu"]
    [sched] = nightly["schedules"]
    assert sched["schedule"]["cron"] == "30 2 * * *"
    assert sched["schedule"]["timezone"] == "Europe/Amsterdam" == nightly["parameters"]["timezone"]
    assert sched["active"] is True
    assert deps["nightly-cpu"]["schedules"][0]["active"] is False  # never two nightly runs
    pools = {p["name"]: p["type"] for p in api_post(f"{api}/work_pools/filter", json={}).json()}
    assert pools["gpu-pool"] == "kubernetes" and pools["cpu-pool"] == "process"
    assert nightly["job_variables"]["image"].endswith("-gpu")
    # the server's scheduler turns the schedule into runs at 02:30 Amsterdam time (asked now
    # rather than waiting for its loop)
    r = api_post(f"{api}/deployments/{nightly['id']}/schedule", json={"max_runs": 3}, timeout=30)
    assert r.status_code in (200, 201), r.text
    runs = api_post(f"{api}/flow_runs/filter", json={
        "deployments": {"id": {"any_": [nightly["id"]]}}}).json()
    assert runs, "no scheduled runs for the nightly deployment"
    from zoneinfo import ZoneInfo
    for r in runs:
        t = dt.datetime.fromisoformat(r["expected_start_time"]).astimezone(ZoneInfo("Europe/Amsterdam"))
        assert (t.hour, t.minute) == (2, 30)


@pytest.mark.slow  # starts a `prefect server` process (minutes on 2 cores)
def test_deployment_parameters_are_valid_configs(deployed):
    """Every config_path exists and validates; every execution block validates; the server
    accepts a flow run of each deployment with its defaults (backfill: plus its dates)."""
    api, deps = deployed
    for spec in SPEC["deployments"]:
        p = spec["parameters"]
        load_config(ROOT / p["config_path"])
        ExecutionConfig.model_validate(p.get("execution") or {})
        extra = {"start_date": "2026-11-01", "end_date": "2026-11-02"} if "backfill" in spec["name"] else {}
        r = api_post(f"{api}/deployments/{deps[spec['name']]['id']}/create_flow_run",
                       json={"parameters": extra, "state": {"type": "SCHEDULED"}}, timeout=30)
        assert r.status_code == 201, r.text


@pytest.mark.slow  # starts a `prefect server` process (minutes on 2 cores)
def test_bad_parameters_are_refused(deployed, prefect_server, tmp_path):
    api, deps = deployed
    _, env = prefect_server
    bad = (ROOT / "prefect.yaml").read_text().replace("max_concurrency: 2", "max_concurrency: two")
    (tmp_path / "prefect.yaml").write_text(bad)
    r = deploy(tmp_path / "prefect.yaml", env)
    assert "Validation failed for field 'max_concurrency'" in r.stdout + r.stderr
    r = api_post(f"{api}/deployments/{deps['nightly-gpu']['id']}/create_flow_run",
                   json={"parameters": {"lag_days": "one"}}, timeout=30)
    assert r.status_code in (409, 422) and "lag_days" in r.text


# -- the flows, end to end ----------------------------------------------------------------

def _partition(root: str, date: str, name: str, table: pa.Table) -> None:
    storage.write_parquet_atomic(storage.join(root, f"date={date}", name), table)


def _rows(prefix: str) -> list[dict]:
    files = [f for f in storage.list_files(prefix)
             if f.endswith(".parquet") and "/_" not in f[len(prefix):]]
    return [r for f in files for r in storage.read_parquet(f).to_pylist()]


pytest_slow = pytest.mark.slow


@pytest_slow
def test_backfill_two_dates_on_s3_resumes_and_reports_missing(prefect_harness, s3_bucket):
    from flows.backfill import backfill_flow

    inp, out = f"{s3_bucket}/queries", f"{s3_bucket}/answers"
    days = {"2026-11-27": sample_rows("popqa", 2), "2026-11-28": sample_rows("climate_fever", 2)}
    for day, t in days.items():
        _partition(inp, day, "part-0.parquet", t)
    cfg = small_config().model_dump(mode="json")
    s = backfill_flow(inp, out, "2026-11-27", "2026-11-28", max_concurrency=2, config=cfg)
    assert [d["date"] for d in s["dates"]] == list(days) and s["ok"] == 2 and s["failed"] == 0
    for day, t in days.items():
        rows = _rows(f"{out}/date={day}")
        assert sorted(r["query_id"] for r in rows) == sorted(t.column("query_id").to_pylist())
        assert all(r["answer"] and r["error"] is None for r in rows)
        m = json.loads(storage.read_bytes(f"{out}/date={day}/_manifest.json"))
        assert m["input"] == f"{inp}/date={day}" and m["rows_out"] == 2
    # a re-run is a no-op per date; a range with a date lacking input fails after the others ran
    with pytest.raises(RuntimeError, match="2026-11-29"):
        backfill_flow(inp, out, "2026-11-27", "2026-11-29", max_concurrency=1, config=cfg)
    for day in days:
        m = json.loads(storage.read_bytes(f"{out}/date={day}/_manifest.json"))
        assert m["resumed_shards"] == 1 and m["failed_shards"] == 0
    s = backfill_flow(inp, out, "2026-11-27", "2026-11-29", config=cfg, allow_missing=True)
    assert (s["ok"], s["missing"]) == (2, 1) and s["dates"][2]["status"] == "missing"


@pytest_slow
def test_nightly_flow_processes_the_dated_partition(prefect_harness, tmp_path):
    from flows.nightly import nightly_flow

    inp, out = str(tmp_path / "q"), str(tmp_path / "a")
    _partition(inp, "2026-11-28", "x.parquet", sample_rows("popqa", 2, skip=5))
    m = nightly_flow(inp, out, date="2026-11-28", config=small_config().model_dump(mode="json"))
    assert m["date"] == "2026-11-28" and m["output"] == f"{out}/date=2026-11-28"
    assert len(_rows(f"{out}/date=2026-11-28")) == 2
    with pytest.raises(FileNotFoundError, match="date=2026-11-29"):
        nightly_flow(inp, out, date="2026-11-29", config=small_config().model_dump(mode="json"))
    shutil.rmtree(out)


@pytest_slow
def test_claim_verification_flow_fixed_task_and_labels(prefect_harness, tmp_path):
    """Rows without a task column are claims; a row naming another task gets a row error;
    answers are labels of the configured set."""
    from flows.claim_verification import claim_verification_flow

    t = sample_rows("climate_fever", 3).drop_columns(["task"])
    bad = sample_rows("popqa", 1)
    storage.write_parquet_atomic(str(tmp_path / "in" / "claims.parquet"), t)
    storage.write_parquet_atomic(str(tmp_path / "in" / "mixed.parquet"), bad)
    labels = ["SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO", "DISPUTED"]
    m = claim_verification_flow(str(tmp_path / "in"), str(tmp_path / "out"),
                                config=small_config().model_dump(mode="json"), claim_labels=labels)
    rows = {r["query_id"]: r for r in _rows(str(tmp_path / "out"))}
    assert len(rows) == 4 and m["config"]["task"] == "claim"
    qid = bad.column("query_id")[0].as_py()
    assert rows[qid]["error"].endswith("field 'task': 'qa', but this run only takes 'claim' rows (config 'task')")
    claims = [r for k, r in rows.items() if k != qid]
    assert all(r["task"] == "claim" and r["error"] is None for r in claims)
    expected = {lab: 0 for lab in labels} | {"(no answer)": 1}  # the task-mismatch row
    for r in claims:
        key = r["answer"] if r["answer"] in labels else "(not a label)" if r["answer"] else "(no answer)"
        expected[key] = expected.get(key, 0) + 1
    assert m["label_counts"] == expected
    for r in claims:  # a valid label, or flagged as not one (never silently accepted)
        assert r["answer"] in labels or "answer_not_a_label" in r["flags"]


@pytest_slow
def test_cli_nightly_and_backfill_commands(tmp_path):
    """The same flows from the command line, in a fresh process (its own Prefect database)."""
    from ..conftest import subprocess_env

    cli = str(Path(sys.executable).with_name("specrag-batch"))
    inp, out = str(tmp_path / "q"), str(tmp_path / "a")
    _partition(inp, "2026-11-27", "x.parquet", sample_rows("popqa", 1, skip=7))
    _partition(inp, "2026-11-28", "x.parquet", sample_rows("climate_fever", 1, skip=7))
    cfg = str(ROOT / "configs" / "test-smollm2.yaml")
    r = subprocess.run([cli, "backfill", "--input-root", inp, "--output-root", out, "--start", "2026-11-27",
                        "--end", "2026-11-28", "--config", cfg], env=subprocess_env(tmp_path),
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "2026-11-27" in r.stdout and "2026-11-28" in r.stdout
    assert len(_rows(f"{out}/date=2026-11-27")) == len(_rows(f"{out}/date=2026-11-28")) == 1
    r = subprocess.run([cli, "nightly", "--input-root", inp, "--output-root", out, "--date", "2026-11-28",
                        "--config", cfg], env=subprocess_env(tmp_path), capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "1 already done" in r.stdout  # the backfill's result for that date is reused


def test_cli_backfill_with_missing_dates_fails_in_one_line(tmp_path):
    """A backfill whose dates have no input partition ends in a Failed flow state with one
    error line naming them, and no Prefect traceback before it."""
    from ..conftest import subprocess_env

    cli = str(Path(sys.executable).with_name("specrag-batch"))
    (tmp_path / "q").mkdir()
    r = subprocess.run([cli, "backfill", "--input-root", str(tmp_path / "q"), "--output-root", str(tmp_path / "a"),
                        "--start", "2026-11-27", "--end", "2026-11-28",
                        "--config", str(ROOT / "configs" / "test-smollm2.yaml")],
                       env=subprocess_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert r.returncode != 0
    assert "2 of 2 dates not completed" in r.stderr, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
