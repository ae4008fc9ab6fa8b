"""Shared fixtures: a real moto S3 server process, Prefect's test harness, small real inputs,
and the SmolLM2 test config (real vLLM engine; one engine serves both roles)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"

os.environ.setdefault("SPECRAG_PROGRESS", "0")


def subprocess_env(tmp_path) -> dict:
    """Environment for CLI subprocesses: their own Prefect home (a temporary database)."""
    return {**os.environ, "SPECRAG_PROGRESS": "0", "PREFECT_HOME": str(tmp_path / "prefect-home"),
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180"}


def small_config(**over):
    """SmolLM2-135M in both roles; short drafts; paper's m/k scaled down for speed."""
    from specrag_batch.config import load_config

    cfg = load_config(ROOT / "configs" / "test-smollm2.yaml")
    data = cfg.model_dump()
    for k, v in over.items():
        node = data
        parts = k.split(".")
        for p in parts[:-1]:
            node = node[p]
        node[parts[-1]] = v
    return type(cfg).model_validate(data)


def sample_rows(name: str, n: int, skip: int = 0) -> pa.Table:
    """First n rows (after skip) of a bundled demo shard."""
    return pq.read_table(SAMPLES / "demo" / f"{name}.parquet").slice(skip, n)


@pytest.fixture
def fake_engine(monkeypatch):
    """The fake engine (:class:`specrag_batch.run.testing.FakeEngine`) in place of every vLLM engine of
    this process: ``engines.get_engine`` returns it and the usage snapshots count it."""
    from specrag_batch.engines import engine as engines
    from specrag_batch.run.testing import FakeEngine

    engine = FakeEngine()
    monkeypatch.setattr(engines, "get_engine", lambda cfg, seed=0: engine)
    monkeypatch.setattr(engines, "loaded_engines", lambda: [engine])
    return engine


@pytest.fixture(scope="session")
def prefect_harness():
    """Prefect with a temporary local database (ephemeral API; no server process)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def stop_process_group(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM a process started with ``start_new_session=True`` and its children; SIGKILL
    them if they are still there after ``timeout`` seconds."""
    import signal

    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server():
    """moto's standalone S3 server as a separate process on 127.0.0.1 (as s3fs's tests do).

    Yields the endpoint URL; sets the AWS variables and SPECRAG_S3_ENDPOINT_URL for the session."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            time.sleep(0.2)
    else:
        proc.kill()
        raise RuntimeError("moto server did not start")
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "SPECRAG_S3_ENDPOINT_URL": endpoint}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(10)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def s3_bucket(s3_server, request):
    """A fresh bucket per test: returns ``s3://<bucket>``."""
    import s3fs

    name = "t-" + request.node.name.lower().replace("_", "-")[:40].strip("-")
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": s3_server}, skip_instance_cache=True)
    fs.mkdir(name)
    return f"s3://{name}"


def pytest_collection_modifyitems(config, items):
    """Mark each test by the folder it lives in (``tests/<kind>/``): ``-m unit``,
    ``-m integration``, ``-m engine``, ``-m flows``, ``-m scaleout``, ``-m infra`` select what a
    run needs."""
    kinds = {"unit", "integration", "engine", "flows", "scaleout", "infra"}
    for item in items:
        path = Path(str(item.fspath))
        if ROOT / "tests" not in path.parents:  # another test tree collected in the same session
            continue
        parts = path.relative_to(ROOT / "tests").parts
        if len(parts) > 1 and parts[0] in kinds:
            item.add_marker(getattr(pytest.mark, parts[0]))


@pytest.fixture(autouse=True)
def _shipped_packaged_models_count_as_installed(monkeypatch):
    """The model check (``models.packaged_missing``) answers the same on every machine: CI
    installs only the test models' packages (``make models-test``), a developer's machine also
    the demo's. A model of the shipped ``PACKAGED_MODELS`` table counts as installed; a model a
    test adds to the table is checked for real (tests/unit/test_model_names.py). In-process
    only: a test that runs the console script uses installed models (the test config's)."""
    from specrag_batch.engines import models

    real, shipped = models.packaged_missing, frozenset(models.PACKAGED_MODELS)
    monkeypatch.setattr(models, "packaged_missing", lambda name: [] if name in shipped else real(name))


_PLACE: list[tuple[str, str]] = []
KEEP_ENGINES = 2
"""In-process engines a test module may inherit from the ones before it in the same folder."""


@pytest.hookimpl(tryfirst=True)  # before the item's fixtures are set up
def pytest_runtest_setup(item):
    """Close the engines cached in-process (``engines.close_engines``) when the run moves to
    another test folder (``tests/<kind>/``, ``benchmarks/tests``), and at a module boundary when
    more than :data:`KEEP_ENGINES` are cached: engines stay cached across a module's tests and
    its neighbours with the same config, but a whole ``make test`` in one process would
    otherwise hold every config's engine (2 GiB of KV cache each) to its end, and the
    scale-out tier's Ray workers, which start their own engines, found too little memory left
    for theirs (CI, stop 42)."""
    path = Path(str(item.fspath))
    folder = str(path.parent.relative_to(ROOT)) if ROOT in path.parents else str(path.parent)
    place = ("/".join(folder.split("/")[:2]), str(path))
    engines = sys.modules.get("specrag_batch.engines.engine")  # never imported here: the unit tier's guard
    if _PLACE and engines is not None and engines.loaded_engines():
        (folder_before, module_before) = _PLACE[0]
        if folder_before != place[0] or (module_before != place[1]
                                         and len(engines.loaded_engines()) > KEEP_ENGINES):
            engines.close_engines()
    _PLACE[:] = [place]


def pytest_sessionfinish(session, exitstatus):
    """Close the vLLM engines the session cached in-process (``engines.close_engines``: each
    engine core shut down in turn, then garbage collection) while the interpreter is whole,
    instead of leaving them to interpreter finalization. One CI run (stop 25, 2026-12-02)
    printed its test summary and then died of a segmentation fault at exit."""
    from specrag_batch.engines import engine as engines

    engines.close_engines()
