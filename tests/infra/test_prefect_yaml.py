"""Offline checks of prefect.yaml against the infrastructure its deployments run on.

Pools polled by a worker, job variables known to the gpu-pool template, Ray address and resource
requests satisfiable by the RayCluster's groups, buckets created in the compose stack, working
directory = image WORKDIR.
"""

from __future__ import annotations

import json
import shlex
from urllib.parse import urlparse

import yaml

from .dockerfile import stage
from .files import ROOT, compose, gpu_job_template, helm_values, raycluster, service_command, \
    service_env


def _s3_buckets(value) -> set[str]:
    if isinstance(value, str):
        return {urlparse(value).netloc} if value.startswith("s3://") else set()
    if isinstance(value, dict):
        return set().union(*(_s3_buckets(v) for v in value.values()), set())
    if isinstance(value, list):
        return set().union(*(_s3_buckets(v) for v in value), set())
    return set()


def test_prefect_deployments_fit_the_infrastructure():
    path = ROOT / "prefect.yaml"
    assert path.exists(), "prefect.yaml is missing (the Dockerfile copies it)"
    deployments = yaml.safe_load(path.read_text()).get("deployments") or []
    assert deployments
    pull = yaml.safe_load(path.read_text()).get("pull") or []
    workdirs = {d for step in pull for k, v in step.items()
                if k.endswith("set_working_directory") for d in [v["directory"]]}
    for target in ("cpu", "gpu"):  # flows run from the code in the image
        assert workdirs == {[x.args for x in stage(target) if x.cmd == "WORKDIR"][-1]}, workdirs

    c = compose()
    w_cmd = service_command(c["services"]["worker"])
    compose_pool = w_cmd[w_cmd.index("--pool") + 1]
    values = helm_values()["worker"]
    helm_pool = values["config"]["workPool"]
    template = gpu_job_template()
    rc = raycluster()
    groups = rc["spec"]["workerGroupSpecs"]
    head_port = next(p["containerPort"] for p in
                     rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"]
                     if p.get("name") == "client")
    init = " ".join(service_command(c["services"]["minio-init"])).replace(
        "${BUCKET}", service_env(c["services"]["minio-init"]).get("BUCKET", ""))

    for d in deployments:
        where = f"deployment {d['name']}"
        pool = d["work_pool"]["name"]
        assert pool in (compose_pool, helm_pool), f"{where}: no worker polls pool {pool}"
        entry = d["entrypoint"].split(":")[0]
        assert (ROOT / entry).is_file(), f"{where}: {entry}"
        params = d.get("parameters") or {}
        if "config_path" in params:
            assert (ROOT / params["config_path"]).is_file(), f"{where}: {params['config_path']}"
        job_vars = d["work_pool"].get("job_variables") or {}
        if pool == helm_pool:
            unknown = set(job_vars) - set(template["variables"]["properties"])
            assert not unknown, f"{where}: job variables the gpu-pool template lacks: {unknown}"
            image = job_vars.get("image", template["variables"]["properties"]["image"]["default"])
            assert image == template["variables"]["properties"]["image"]["default"], where
        else:  # runs in the compose stack: its buckets must be created there
            for b in _s3_buckets(params):
                assert f"mc mb --ignore-existing \"local/{b}\"" in init, (
                    f"{where}: bucket {b} is not created by minio-init")
        execution = params.get("execution") or {}
        if execution.get("task_runner") == "ray":
            addr = urlparse(execution["ray_address"])
            assert addr.scheme == "ray" and addr.port == head_port, where
            ns = rc["metadata"]["namespace"]
            assert addr.hostname in (f"{rc['metadata']['name']}-head-svc",
                                     f"{rc['metadata']['name']}-head-svc.{ns}.svc.cluster.local")
            for key, req in execution.items():
                if not key.endswith("_resources"):
                    continue
                fits = []
                for g in groups:
                    sp = g["rayStartParams"]
                    custom = json.loads(shlex.split(sp["resources"])[0]) if "resources" in sp \
                        else {}
                    fits.append(
                        float(sp.get("num-cpus", "inf")) >= req.get("num_cpus", 0)
                        and float(sp.get("num-gpus", 0)) >= req.get("num_gpus", 0)
                        and all(custom.get(k, 0) >= v
                                for k, v in (req.get("resources") or {}).items()))
                assert any(fits), f"{where}: no Ray worker group can run {key}={req}"
