"""Kubernetes validation for the infra tests, offline.

Core objects are validated with PyPI ``kubernetes-validate`` (its bundled OpenAPI schemas,
strict: unknown fields fail). The RayCluster is validated against
``schemas/raycluster.schema.json``, whose ``$ref``s to
``https://kubernetes.io/api/_definitions.json`` resolve to the same bundled definitions through a
``referencing`` registry (nothing is fetched). ``pod_checks`` holds the cross-file checks shared
by the RayCluster, the Helm job template and the manifests.
"""

from __future__ import annotations

import json
from functools import lru_cache

import jsonschema
import pytest

from .dockerfile import app_uid, stage_env
from .files import K8S_VERSION, error_lines, k8s_objects, load_schema, require


@lru_cache
def k8s_registry():
    """A ``referencing.Registry`` holding kubernetes-validate's strict ``_definitions.json`` for
    Kubernetes ``K8S_VERSION`` (the newest patch release bundled) under its kubernetes.io URI."""
    kv = require("kubernetes_validate", "kubernetes-validate")
    from importlib.resources import files

    from referencing import Registry, Resource
    base = files(kv.__name__) / "kubernetes-json-schema"
    versions = sorted((p.name for p in base.iterdir() if p.name.endswith("-local-strict")),
                      key=lambda n: [int(x) for x in n[1:].split("-")[0].split(".")])
    chosen = [v for v in versions if v.startswith(f"v{K8S_VERSION}.")]
    assert chosen, f"kubernetes-validate has no schemas for {K8S_VERSION}: {versions}"
    defs = json.loads((base / chosen[-1] / "_definitions.json").read_text())
    return Resource.from_contents(defs) @ Registry()


def raycluster_validator() -> jsonschema.Draft202012Validator:
    """A validator for ``schemas/raycluster.schema.json`` with the bundled core/v1 schemas."""
    return jsonschema.Draft202012Validator(load_schema("raycluster.schema.json"),
                                           registry=k8s_registry())


def validate_k8s(doc: dict) -> None:
    """Validate one core Kubernetes object strictly; fails the test naming kind/name and path."""
    kv = require("kubernetes_validate", "kubernetes-validate")
    try:
        kv.validate(doc, K8S_VERSION, strict=True)
    except kv.ValidationError as e:
        meta = doc["metadata"]
        pytest.fail(f"{doc['kind']}/{meta.get('name', meta.get('generateName'))}: "
                    f"{'/'.join(map(str, e.path))}: {e.message}")


def validate_raycluster(doc: dict) -> None:
    """Assert that a ray.io/v1 RayCluster fits ``schemas/raycluster.schema.json``."""
    errors = list(raycluster_validator().iter_errors(doc))
    assert not errors, error_lines(errors)


def pod_checks(where: str, pod: dict, expect_gpu: bool | None) -> None:
    """Cross-file checks for one pod spec: user, env sources, volumes, mounts, GPUs.

    ``where`` names the pod in failure messages; ``expect_gpu`` True/False asserts that every
    container does/does not ask for ``nvidia.com/gpu`` and uses the ``-gpu``/``-cpu`` image,
    None skips that check.
    """
    secrets = k8s_objects("Secret")
    config_maps = k8s_objects("ConfigMap")
    pvcs = k8s_objects("PersistentVolumeClaim")
    sc = pod.get("securityContext", {})
    assert sc.get("runAsNonRoot") is True and sc.get("runAsUser") == app_uid(), where
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    for v in vols.values():
        if "persistentVolumeClaim" in v:
            assert v["persistentVolumeClaim"]["claimName"] in pvcs, f"{where}: PVC {v}"
    image_env = stage_env("cpu")
    for c in pod["containers"]:
        for e in c.get("env", []):
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert ref["name"] in secrets, f"{where}: no Secret {ref['name']}"
                assert ref["key"] in secrets[ref["name"]]["stringData"], f"{where}: {ref}"
        for src in c.get("envFrom", []):
            if "configMapRef" in src:
                assert src["configMapRef"]["name"] in config_maps, where
        mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
        for m in mounts.values():
            assert m["name"] in vols, f"{where}: mount of undeclared volume {m['name']}"
        limits = c.get("resources", {}).get("limits", {})
        gpus = int(limits.get("nvidia.com/gpu", 0))
        if expect_gpu is not None:
            assert (gpus > 0) == expect_gpu, f"{where}: nvidia.com/gpu limit {gpus}"
            img = c["image"]
            assert img.rsplit(":", 1)[-1].endswith("-gpu" if expect_gpu else "-cpu"), img
        if gpus:
            assert any(t.get("key") == "nvidia.com/gpu" for t in pod.get("tolerations", [])), where
            assert "/dev/shm" in mounts, f"{where}: vLLM/Ray need a large /dev/shm"
            # converted models and HF cache where the image's variables point
            for var in ("SPECRAG_MODEL_CACHE", "HF_HOME"):
                assert image_env[var] in mounts, f"{where}: {var} path not mounted"
