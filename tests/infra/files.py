"""Paths and loaders of the repository files the infra tests check (no network, no Docker).

Everything is read from the checkout: the Dockerfile and .dockerignore, ``infra/`` (compose,
Kubernetes manifests, Helm values), ``prefect.yaml``, ``pyproject.toml``, the package source, and
the JSON schemas under ``tests/infra/schemas/`` that no registry package ships.
"""

from __future__ import annotations

import copy
import importlib
import json
import re
import shlex
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
INFRA = ROOT / "infra"
COMPOSE = INFRA / "docker-compose.yml"
K8S_DIR = INFRA / "k8s"
HELM_VALUES = INFRA / "helm" / "prefect-worker-gpu-values.yaml"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
K8S_VERSION = "1.33"  # Kubernetes API version the manifests are validated against
IMAGE_NAME = "specrag-batch"  # repository basename of our own images, tagged <version>-<target>


def require(module: str, package: str):
    """Import a validator or fail (never skip): the test extra must provide it.

    ``module`` is the import name, ``package`` the PyPI name shown in the failure message.
    Returns the imported module; calls ``pytest.fail`` if it is not installed.
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        pytest.fail(f"{module} is missing: install the test extra (pip install -e '.[test]', "
                    f"PyPI package {package})")


@lru_cache
def load_schema(name: str) -> dict:
    """The JSON schema ``tests/infra/schemas/<name>`` as a dict (read once per process).

    Raises FileNotFoundError if the file is missing, json.JSONDecodeError if it is not JSON.
    """
    return json.loads((SCHEMAS / name).read_text())


def error_lines(errors) -> str:
    """jsonschema errors as ``path/to/field: message`` lines, for an assertion message."""
    return "\n".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors)


@lru_cache
def pyproject() -> dict:
    """``pyproject.toml`` parsed."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@lru_cache
def code_text() -> str:
    """All of the package's source, to check that env names used in infra/ are real."""
    return "\n".join(p.read_text() for p in sorted((ROOT / "specrag_batch").rglob("*.py")))


# ---------------------------------------------------------------------------------------------
# docker compose

_INTERP = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


def interp(value):
    """Compose interpolation with an empty environment: `${X:-d}` -> d, `$$` -> `$`.

    Applied recursively to strings inside lists and dicts; other values are returned as is.
    """
    if isinstance(value, str):
        return _INTERP.sub(lambda m: m.group(2) or "", value.replace("$$", "\0")).replace("\0", "$")
    if isinstance(value, list):
        return [interp(v) for v in value]
    if isinstance(value, dict):
        return {k: interp(v) for k, v in value.items()}
    return value


@lru_cache
def compose_raw() -> dict:
    """``infra/docker-compose.yml`` as written (no interpolation); do not mutate."""
    return yaml.safe_load(COMPOSE.read_text())


def compose() -> dict:
    """``infra/docker-compose.yml`` interpolated with an empty environment (a fresh copy)."""
    return interp(copy.deepcopy(compose_raw()))


def service_env(svc: dict) -> dict[str, str]:
    """A compose service's ``environment`` (list or mapping form) as a str -> str dict."""
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    return {k: str(v) for k, v in env.items()}


def service_command(svc: dict, key: str = "command") -> list[str]:
    """A compose service's ``command`` (or ``key``, e.g. a healthcheck's ``test``) as argv."""
    c = svc.get(key) or []
    return shlex.split(c) if isinstance(c, str) else [str(x) for x in c]


# ---------------------------------------------------------------------------------------------
# Helm values and Kubernetes manifests


def helm_values() -> dict:
    """``infra/helm/prefect-worker-gpu-values.yaml`` parsed (a fresh copy)."""
    return yaml.safe_load(HELM_VALUES.read_text())


def gpu_job_template() -> dict:
    """The gpu-pool base job template embedded in the Helm values (``variables`` and
    ``job_configuration``), parsed from its JSON string."""
    return json.loads(helm_values()["worker"]["config"]["baseJobTemplate"]["configuration"])


def k8s_docs() -> list[tuple[str, dict]]:
    """(file name, object) of every document in ``infra/k8s/*.yaml`` but kustomization.yaml."""
    out = []
    for p in sorted(K8S_DIR.glob("*.yaml")):
        if p.name == "kustomization.yaml":
            continue
        out += [(p.name, d) for d in yaml.safe_load_all(p.read_text()) if d]
    return out


def k8s_objects(kind: str) -> dict[str, dict]:
    """The ``infra/k8s`` objects of one ``kind``, keyed by ``metadata.name``."""
    return {d["metadata"]["name"]: d for _, d in k8s_docs() if d["kind"] == kind}


def raycluster() -> dict:
    """The one RayCluster in ``infra/k8s`` (fails if there is not exactly one)."""
    (rc,) = k8s_objects("RayCluster").values()
    return rc
