"""Packaged GGUF weights to what vLLM loads: the GGUF's tokenizer and its dequantisation to
Hugging Face safetensors with transformers (``gguf_file=``)."""

from __future__ import annotations

from pathlib import Path


def gguf_tokenizer(gguf: Path, chat_template: str | None = None):
    """The GGUF's tokenizer (``transformers.AutoTokenizer``, ``gguf_file=``); ``chat_template``
    (a file name in ``specrag_batch/engines/chat_templates``) is attached when the GGUF has none."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if chat_template and not tok.chat_template:
        tok.chat_template = (Path(__file__).parent / "chat_templates" / chat_template).read_text()
    return tok


def convert_gguf(gguf: Path, out_dir: Path, chat_template: str | None = None) -> None:
    """Dequantise a GGUF with transformers and save HF safetensors (bf16) + tokenizer
    (:func:`gguf_tokenizer`)."""
    import torch
    from transformers import AutoModelForCausalLM

    tok = gguf_tokenizer(gguf, chat_template)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
    # the GGUF quantizer stays attached after dequantisation; vLLM would read it back
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(out_dir))
    tok.save_pretrained(str(out_dir))
