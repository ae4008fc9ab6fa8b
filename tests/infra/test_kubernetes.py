"""Offline checks of infra/k8s (no cluster needed).

Core objects against the Kubernetes OpenAPI schemas bundled in PyPI ``kubernetes-validate``
(strict: unknown fields fail). No registry package ships KubeRay's CRD schema, so the RayCluster
is checked against ``schemas/raycluster.schema.json``, written from KubeRay's ray.io/v1 Go types
(RayClusterSpec, HeadGroupSpec, WorkerGroupSpec), whose pod templates reference the bundled
core/v1 PodTemplateSpec schema (strict). Then the RayCluster's groups: head, GPU and CPU workers.
"""

from __future__ import annotations

import copy
import json
import shlex

import pytest
import yaml

from .files import K8S_DIR, K8S_VERSION, code_text, k8s_docs, k8s_objects, raycluster, require
from .kube import pod_checks, raycluster_validator, validate_k8s, validate_raycluster


def test_k8s_manifests_validate_against_the_kubernetes_schemas():
    kinds = []
    for _, doc in k8s_docs():
        kinds.append(doc["kind"])
        if doc["apiVersion"] == "ray.io/v1":
            validate_raycluster(doc)
        else:
            validate_k8s(doc)
    assert {"Namespace", "ConfigMap", "Secret", "PersistentVolumeClaim", "RayCluster"} <= set(kinds)

    # the validators are live: an unknown field fails both the core and the RayCluster schema
    kv = require("kubernetes_validate", "kubernetes-validate")
    with pytest.raises(kv.ValidationError):
        kv.validate({**k8s_objects("ConfigMap")["specrag-config"], "dta": {}}, K8S_VERSION, True)
    rc = copy.deepcopy(next(iter(k8s_objects("RayCluster").values())))
    rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["imagePullPolicy"] = 7
    assert list(raycluster_validator().iter_errors(rc))

    # one namespace for everything; kustomization applies every manifest but the secret template
    ns = set(k8s_objects("Namespace"))
    assert len(ns) == 1
    for fname, doc in k8s_docs():
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") in ns, f"{fname}: namespace"
    kust = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())
    listed = set(kust["resources"])
    files = {p.name for p in K8S_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == {f for f in files if not f.endswith(".example.yaml")}
    for fname, doc in k8s_docs():
        if doc["kind"] == "Secret":
            assert fname.endswith(".example.yaml"), "real secrets do not belong in the repo"
            assert all(v == "REPLACE_ME" for v in doc.get("stringData", {}).values())
    cm = k8s_objects("ConfigMap")["specrag-config"]["data"]
    for k in cm:
        if k.startswith("SPECRAG_"):
            assert k in code_text(), f"ConfigMap sets {k}, which the code never reads"


def test_raycluster_groups():
    rc = raycluster()
    spec = rc["spec"]
    head = spec["headGroupSpec"]
    assert head["rayStartParams"].get("dashboard-host") == "0.0.0.0"
    assert head["rayStartParams"].get("num-cpus") == "0", "keep tasks off the head"
    ports = {p["containerPort"] for p in head["template"]["spec"]["containers"][0]["ports"]}
    assert {6379, 8265, 10001} <= ports
    pod_checks("head", head["template"]["spec"], expect_gpu=False)

    groups = {g["groupName"]: g for g in spec["workerGroupSpecs"]}
    assert len(groups) == len(spec["workerGroupSpecs"]), "duplicate groupName"
    gpu = [g for g in groups.values() if "num-gpus" in g["rayStartParams"]]
    cpu = [g for g in groups.values() if "num-gpus" not in g["rayStartParams"]]
    assert gpu and cpu, "need a GPU verifier group and a CPU drafter group"
    for g in groups.values():
        assert g["minReplicas"] <= g.get("replicas", g["minReplicas"]) <= g["maxReplicas"]
        custom = g["rayStartParams"].get("resources")
        if custom:  # KubeRay pastes it into `ray start --resources=...` run by bash
            (word,) = shlex.split(custom)
            assert all(isinstance(v, (int, float)) for v in json.loads(word).values()), custom
    for g in gpu:
        n = int(g["rayStartParams"]["num-gpus"])
        c = g["template"]["spec"]["containers"][0]
        assert int(c["resources"]["limits"]["nvidia.com/gpu"]) == n >= 1
        pod_checks(g["groupName"], g["template"]["spec"], expect_gpu=True)
    for g in cpu:
        pod_checks(g["groupName"], g["template"]["spec"], expect_gpu=False)
