"""``calibrate --out s3://...`` (with and without ``--fallback-run``): a bucket that
is not there is refused in one line before any run is read; a bucket that is gets the snippet
(moto's S3 server)."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from specrag_batch.cli.commands import app
from tests.unit.test_cascade import _pair


@pytest.mark.parametrize("fallback", [True, False])
def test_out_in_a_missing_bucket_is_one_line_exit_2(tmp_path, s3_server, monkeypatch, fallback):
    spec, std = _pair(tmp_path)
    monkeypatch.setattr("specrag_batch.run.report.load_rows", lambda *a: pytest.fail("a run was read"))
    args = ["--fallback-run", std, "--target-accuracy", "0.9"] if fallback else ["--target-accuracy", "0.5"]
    r = CliRunner().invoke(app, ["calibrate", spec, *args, "--out", "s3://nobucket-xyz/x.yaml"])
    assert r.exit_code == 2 and len(r.output.splitlines()) == 1, r.output
    assert r.output.startswith("error: --out s3://nobucket-xyz/x.yaml: bucket 'nobucket-xyz' does not exist"), r.output


def test_out_in_a_bucket_gets_the_snippet(tmp_path, s3_bucket):
    from specrag_batch.core import storage

    spec, std = _pair(tmp_path)
    out = f"{s3_bucket}/snips/fallback.yaml"
    r = CliRunner().invoke(app, ["calibrate", spec, "--fallback-run", std, "--budget-share", "0.25", "--out", out])
    assert r.exit_code == 0, r.output
    assert yaml.safe_load(storage.read_bytes(out))["selection"]["tau_min"] == {"qa": -8.0}
    r = CliRunner().invoke(app, ["calibrate", spec, "--fallback-run", std, "--target-accuracy", "0.95", "--out", out])
    assert r.exit_code == 3 and "removed the older" in r.output and not storage.exists(out)
