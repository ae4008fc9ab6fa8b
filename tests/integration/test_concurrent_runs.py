"""Two runs with different configs started into one output prefix at once (issue 40 item 5;
docs/operations.md, "Two runs into one output at once"): exactly one claims the output's run
key and computes, the other is refused with the one-line error and exit 2, printing no
traceback, and writes nothing. Locally and on S3 (moto's server, which honours the
conditional PUT ``If-None-Match: *`` as AWS S3 does).

Real ``specrag-batch run`` processes (tests/integration/race_cli.py: the product's CLI, Prefect
flow, storage and resume; tests/fakes.py's FakeEngine in place of vLLM), which meet right
after each has checked the output's key and before either writes it, so that the window the
check-then-write claim left open is hit on every run, not by chance."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specrag_batch.run import resume
from specrag_batch.core import storage

from ..conftest import ROOT, sample_rows, subprocess_env

pytestmark = pytest.mark.integration

CONFIG = str(ROOT / "configs" / "test-smollm2.yaml")


def _race(tmp_path, inp: str, out: str) -> dict[str, subprocess.CompletedProcess]:
    """Start run A (2 drafts) and run B (3 drafts: another config) together into ``out``;
    their finished processes by run id."""
    race_dir = tmp_path / "race"
    race_dir.mkdir()
    procs = {}
    for run_id, drafts in (("run-a", "2"), ("run-b", "3")):
        env = {**subprocess_env(tmp_path), "PREFECT_HOME": str(tmp_path / f"prefect-{run_id}"),
               "SPECRAG_TEST_RACE_DIR": str(race_dir), "SPECRAG_TEST_RACERS": "2"}
        cmd = [sys.executable, "-m", "tests.integration.race_cli", "run", "-i", inp, "-o", out, "-c",
               CONFIG, "-m", drafts, "--run-id", run_id]
        procs[run_id] = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)
    done = {}
    try:
        for run_id, p in procs.items():
            stdout, stderr = p.communicate(timeout=900)
            done[run_id] = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    return done


def _check_one_claimed(done: dict[str, subprocess.CompletedProcess], out: str) -> None:
    codes = {run_id: r.returncode for run_id, r in done.items()}
    logs = "\n".join(f"--- {k} (exit {r.returncode}) ---\n{r.stdout[-1500:]}\n{r.stderr[-4000:]}"
                     for k, r in done.items())
    assert sorted(codes.values()) == [0, 2], logs  # before: both claimed, both exit 0
    [winner] = [k for k, c in codes.items() if c == 0]
    [loser] = [k for k, c in codes.items() if c == 2]
    err = done[loser].stderr
    assert "Traceback" not in err and "Traceback" not in done[loser].stdout, logs
    lines = err.strip().splitlines()  # the one line, nothing else (before: Prefect's log too)
    assert len(lines) == 1 and lines[0].startswith("error: output "), logs
    assert "claimed by another run" in lines[0] and winner in lines[0], logs
    # the output is the winner's alone: its key, its manifest, its markers
    key = storage.read_json_object(storage.join(out, resume.RUN_FILE))
    manifest = storage.read_json_object(storage.join(out, "_manifest.json"))
    assert key["run_id"] == winner and manifest["run_id"] == winner
    markers = [json.loads(storage.read_bytes(f)) for f in storage.list_files(storage.join(out, resume.SHARDS_DIR))]
    assert markers and {m["run_id"] for m in markers} == {winner}
    assert {m["config_hash"] for m in markers} == {key["config_hash"]}


def _write_input(inp: str) -> None:
    for i in range(2):
        storage.write_parquet_atomic(storage.join(inp, f"s{i}.parquet"), sample_rows("climate_fever", 2, skip=2 * i))


def test_two_runs_at_once_into_a_local_output(tmp_path):
    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    _write_input(inp)
    _check_one_claimed(_race(tmp_path, inp, out), out)


def test_two_runs_at_once_into_an_s3_output(tmp_path, s3_bucket):
    inp, out = f"{s3_bucket}/in", f"{s3_bucket}/out"
    _write_input(inp)
    _check_one_claimed(_race(tmp_path, inp, out), out)


def test_create_exclusive_on_s3_is_a_conditional_put(s3_bucket):
    """``If-None-Match: *``: the second create of a key is refused by the server and leaves
    the first's bytes; of eight threads creating at once exactly one wins."""
    import threading

    uri = f"{s3_bucket}/out/_run.json"
    assert storage.create_exclusive(uri, b'{"run_id": "a"}') is True
    assert storage.create_exclusive(uri, b'{"run_id": "b"}') is False
    assert json.loads(storage.read_bytes(uri)) == {"run_id": "a"}
    race, n = f"{s3_bucket}/race/_run.json", 8
    start, won = threading.Barrier(n), []

    def claim(i: int) -> None:
        start.wait()
        if storage.create_exclusive(race, json.dumps({"run_id": i}).encode()):
            won.append(i)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and json.loads(storage.read_bytes(race)) == {"run_id": won[0]}
