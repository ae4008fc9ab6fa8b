"""Offline checks of infra/helm and of the image references across infra/ (no cluster needed).

The prefect-worker chart's values.schema.json is not in any registry package, so the values are
checked against ``schemas/prefect-worker-values.schema.json``, the subset of that chart's keys
this project may set. The base job template is rendered with Prefect's own templating, given
the prefect-kubernetes worker's manifest transformations, and the resulting Job is validated as
batch/v1 (strict).
"""

from __future__ import annotations

import copy
import json
import shlex
from urllib.parse import urlparse

import jsonschema

from .dockerfile import stage
from .files import (IMAGE_NAME, compose, error_lines, gpu_job_template, helm_values, k8s_objects,
                    load_schema, raycluster)
from .kube import pod_checks, validate_k8s


def test_helm_values_and_gpu_base_job_template():
    values = helm_values()
    schema = load_schema("prefect-worker-values.schema.json")
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(values))
    assert not errors, error_lines(errors)
    w = values["worker"]
    assert w["config"]["type"] == "kubernetes" and w["config"]["workPool"] == "gpu-pool"
    assert w["apiConfig"] == "server"
    api = urlparse(w["serverApiConfig"]["apiUrl"])
    assert api.scheme in ("http", "https") and api.path == "/api"

    # base job template: a Prefect work-pool template whose Job asks for NVIDIA GPUs
    template = json.loads(w["config"]["baseJobTemplate"]["configuration"])
    assert set(template) == {"variables", "job_configuration"}
    variables = template["variables"]
    jsonschema.Draft202012Validator.check_schema(variables)
    props = variables["properties"]
    for prop in props.values():
        if "default" in prop:
            jsonschema.validate(prop["default"], prop)
    from prefect.utilities.templating import apply_values, find_placeholders
    job_cfg = template["job_configuration"]
    used = {p.name for p in find_placeholders(job_cfg)}
    assert used <= set(props), f"placeholders without a variable: {sorted(used - set(props))}"

    # render it as a worker would for one flow run: Prefect's templating with the variables'
    # defaults and typical run values, then prefect-kubernetes' manifest handling
    run_values = {k: p["default"] for k, p in props.items() if p.get("default") is not None}
    run_values |= {"name": "specrag-run", "command": "prefect flow-run execute",
                   "env": {"PREFECT_API_URL": w["serverApiConfig"]["apiUrl"]},
                   "labels": {"prefect.io/flow-run-id": "0"}}
    cfg = apply_values(copy.deepcopy(job_cfg), run_values)
    job = cfg["job_manifest"]
    pod = job["spec"]["template"]["spec"]
    c = pod["containers"][0]
    # prefect-kubernetes' required paths (its _get_base_job_manifest) and values
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert (pod.get("parallelism"), pod.get("completions")) == (1, 1)
    assert pod.get("restartPolicy") == "Never"
    assert c["name"] == "prefect-job"
    # the worker's transformations: env prepended as a list, args split, annotations present
    run_env = [{"name": k, "value": v} for k, v in cfg["env"].items()]
    c["env"] = run_env + c["env"] if isinstance(c.get("env"), list) else run_env
    if isinstance(c.get("args"), str):
        c["args"] = shlex.split(c["args"])
    job["metadata"].setdefault("annotations", {})
    # prefect-kubernetes' pod-level parallelism/completions are dropped by the API server
    # (unknown field, warning only); strict validation would reject them, so check without
    k8s_job = copy.deepcopy(job)
    for k in ("parallelism", "completions"):
        k8s_job["spec"]["template"]["spec"].pop(k)
    validate_k8s(k8s_job)

    assert int(c["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    assert job["metadata"]["namespace"] in k8s_objects("Namespace")
    pod_checks("gpu job", pod, expect_gpu=True)
    # the same gpu image as the Ray GPU workers
    rc = raycluster()
    ray_gpu_images = {g["template"]["spec"]["containers"][0]["image"]
                      for g in rc["spec"]["workerGroupSpecs"] if "num-gpus" in g["rayStartParams"]}
    assert {c["image"]} == ray_gpu_images


def test_image_references_agree():
    """Compose, RayCluster and job template all name <registry>/specrag-batch:<v>-<target>."""
    refs = [("compose worker", compose()["services"]["worker"]["image"])]
    rc = raycluster()
    groups = [rc["spec"]["headGroupSpec"], *rc["spec"]["workerGroupSpecs"]]
    refs += [(f"raycluster {g.get('groupName', 'head')}", c["image"])
             for g in groups for c in g["template"]["spec"]["containers"]]
    tpl = gpu_job_template()
    refs.append(("helm job template", tpl["variables"]["properties"]["image"]["default"]))
    versions, registries = set(), set()
    for where, ref in refs:
        repo, tag = ref.rsplit(":", 1)
        assert repo.rsplit("/", 1)[-1] == IMAGE_NAME, f"{where}: {ref}"
        version, _, target = tag.rpartition("-")
        assert target in ("cpu", "gpu") and stage(target), f"{where}: {ref}"
        versions.add(version)
        if where != "compose worker":  # compose builds locally, clusters pull from a registry
            registries.add(repo)
    assert len(versions) == 1, f"image versions disagree: {refs}"
    assert len(registries) == 1, f"image repositories disagree: {refs}"
