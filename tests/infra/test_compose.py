"""Offline checks of infra/docker-compose.yml (no Docker engine needed).

The Compose Specification JSON schema (as vendored by the PyPI package ``check-jsonschema``),
then the service wiring: health-gated start order, URLs, env names the code reads, volumes.
"""

from __future__ import annotations

import copy
from urllib.parse import urlparse

import jsonschema

from .dockerfile import stage, stage_env
from .files import (COMPOSE, DOCKERFILE, ROOT, code_text, compose, compose_raw, error_lines,
                    require, service_command, service_env)


def test_compose_matches_the_compose_specification_schema():
    builtin = require("check_jsonschema.builtin_schemas", "check-jsonschema")
    schema = builtin.get_builtin_schema("vendor.compose-spec")
    assert "Compose Specification" in schema.get("title", "")
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(compose_raw()),
                    key=lambda e: list(e.path))
    assert not errors, error_lines(errors)
    # the schema itself is sound, and rejects what it should (so the check above is live)
    jsonschema.Draft202012Validator.check_schema(schema)
    broken = copy.deepcopy(compose_raw())
    broken["services"]["worker"]["depends_on"]["prefect-server"]["condition"] = "service_ready"
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(broken))


def test_compose_stack_wiring():
    c = compose()
    s = c["services"]
    assert {"postgres", "prefect-server", "minio", "minio-init", "worker"} <= set(s)

    # start order is gated on health, and every health-gated service has a healthcheck
    def cond(svc, dep):
        return s[svc]["depends_on"][dep]["condition"]
    assert cond("prefect-server", "postgres") == "service_healthy"
    assert cond("minio-init", "minio") == "service_healthy"
    assert cond("worker", "prefect-server") == "service_healthy"
    assert cond("worker", "minio-init") == "service_completed_successfully"
    for name, svc in s.items():
        for dep, spec in (svc.get("depends_on") or {}).items():
            assert dep in s, f"{name} depends on unknown {dep}"
            if spec.get("condition") == "service_healthy":
                assert s[dep].get("healthcheck", {}).get("test"), f"{dep} has no healthcheck"

    # images: explicit, non-latest tags (build-only services excepted)
    for name, svc in s.items():
        img = svc.get("image")
        assert img or svc.get("build"), name
        if img and not svc.get("build"):
            assert ":" in img.split("/")[-1] and not img.endswith(":latest"), f"{name}: {img}"

    # Prefect server on Postgres
    server = s["prefect-server"]
    assert server["image"].startswith("prefecthq/prefect:3") and "python3.11" in server["image"]
    cmd = service_command(server)
    assert cmd[:3] == ["prefect", "server", "start"] and "--host" in cmd
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0"
    db = urlparse(service_env(server)["PREFECT_API_DATABASE_CONNECTION_URL"])
    pg = service_env(s["postgres"])
    assert db.scheme == "postgresql+asyncpg" and db.hostname == "postgres"
    assert (db.username, db.password, db.path.lstrip("/")) == (
        pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], pg["POSTGRES_DB"])
    server_port = int(server["ports"][0].split(":")[-1])

    # worker: the Dockerfile's cpu target, a process worker on cpu-pool, wired to server + MinIO
    w = s["worker"]
    build = w["build"]
    assert (COMPOSE.parent / build["context"] / build.get("dockerfile", "Dockerfile")).resolve() \
        == DOCKERFILE
    assert build["target"] == "cpu" and stage("cpu")
    cmd = service_command(w)
    assert cmd[:3] == ["prefect", "worker", "start"]
    assert cmd[cmd.index("--pool") + 1] == "cpu-pool" and cmd[cmd.index("--type") + 1] == "process"
    env = service_env(w)
    api = urlparse(env["PREFECT_API_URL"])
    assert (api.hostname, api.port, api.path) == ("prefect-server", server_port, "/api")
    assert "SPECRAG_S3_ENDPOINT_URL" in (ROOT / "specrag_batch" / "core" / "storage.py").read_text()
    s3 = urlparse(env["SPECRAG_S3_ENDPOINT_URL"])
    assert s3.hostname == "minio" and s3.port == 9000
    mini = service_env(s["minio"])
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == (
        mini["MINIO_ROOT_USER"], mini["MINIO_ROOT_PASSWORD"])
    for k in env:
        if k.startswith("SPECRAG_"):
            assert k in code_text(), f"worker sets {k}, which the code never reads"
    if "--with-healthcheck" in cmd:
        assert env.get("PREFECT_WORKER_WEBSERVER_PORT", "8080") in " ".join(
            service_command(w["healthcheck"], "test"))

    # model cache and HF cache: named volumes at the paths the image's variables point to
    cpu_env = stage_env("cpu")
    mounts = {}
    for v in w["volumes"]:
        src, dst = (v.split(":")[:2] if isinstance(v, str) else (v["source"], v["target"]))
        mounts[dst] = src
    for var in ("SPECRAG_MODEL_CACHE", "HF_HOME"):
        path = env.get(var, cpu_env[var])
        assert path == cpu_env[var], f"{var}: compose {path} != image {cpu_env[var]}"
        assert path in mounts and mounts[path] in c["volumes"], f"{var} ({path}) is not a volume"

    # bucket creation: mc against the minio service with its credentials
    init = " ".join(service_command(s["minio-init"]))
    assert "mc alias set" in init and "http://minio:9000" in init and "mc mb" in init
    assert s["minio-init"].get("restart") in ("no", None)
