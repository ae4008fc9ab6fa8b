"""``report s3://...`` whose credentials the store refuses names the location (issue 47 item 9):
s3fs raises ``PermissionError("Forbidden")``, which named nothing ("error: Forbidden"). A real
moto S3 server that checks credentials (``INITIAL_NO_AUTH_ACTION_COUNT=0``: every request is
authenticated, and no key is known to it). No credentials at all: tests/unit/test_cli_offline_commands.py."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from specrag_batch.cli.commands import app

from ..conftest import subprocess_env

pytestmark = pytest.mark.integration


@pytest.fixture
def strict_s3(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**subprocess_env(tmp_path), "INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("command", [["report"], ["calibrate", "--target-coverage", "0.5"]])
def test_refused_credentials_name_the_location(strict_s3, monkeypatch, command):
    for var, value in {"AWS_ACCESS_KEY_ID": "AKIAUNKNOWN", "AWS_SECRET_ACCESS_KEY": "wrong",
                       "AWS_DEFAULT_REGION": "us-east-1", "SPECRAG_S3_ENDPOINT_URL": strict_s3}.items():
        monkeypatch.setenv(var, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    prefix = "s3://some-bucket/runs/2026-12-01"
    r = CliRunner().invoke(app, [command[0], prefix, *command[1:]])
    assert r.exit_code == 2, r.output
    assert prefix in r.output and "Forbidden" in r.output and "Traceback" not in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1, r.output
