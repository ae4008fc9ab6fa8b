"""A row's key: sha256 over a canonical JSON of everything that decides its answer.

Two parts. The row's: ``query``, ``task``, ``choices`` and the documents it is answered from
(``doc_id``, ``title``, ``text`` in order): the input's documents when the row has them (known
before any engine work), else the top-N documents retrieval found in the index (known after
retrieval, before drafting), with where they came from. The run's
(:class:`ScoringIdentity`): the config hash (:meth:`RunConfig.config_hash`: models, sampling,
selection, prompts' settings, seed, ...), the weights' identity of the drafter (with its LoRA
adapter) and of the verifier (:func:`identity.drafter_identity`), a digest of the prompt and
parsing code, and :data:`SCORING_VERSION`. ``query_id`` is in it where it decides the answer
(:func:`query_id_decides`: the per-row sampling seed of speculative mode), else not. Never in
it: ``gold`` (it changes no answer; a reused row is graded against tonight's gold).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from ...config import RunConfig
from ...engines.weights import drafter_identity
from ...core.records import Document
from ...core.schema import OUTPUT_SCHEMA

SCORING_VERSION = 1
"""The product's scoring version: raised by hand whenever a change to the code makes a row's
answer or scores differ under the same config and models (the drafting, verification,
selection or output code), so that no earlier output is reused across it."""

_PROMPT_CODE = ("prompts.py", "parsing.py", "chat_templates")
"""Files (under the package) whose text decides what the models are asked and how their
output is read: hashed into :attr:`ScoringIdentity.prompts`."""


@dataclass(frozen=True)
class ScoringIdentity:
    """The run's part of a row key. ``config_hash``: :meth:`RunConfig.config_hash`;
    ``drafter`` / ``verifier``: the models' identity (:func:`identity.drafter_identity`, JSON);
    ``adapter``: the drafter's LoRA adapter identity (JSON, ``null`` without one); ``prompts``:
    sha256 of the prompt and parsing code; ``seed``: ``RunConfig.seed``; ``output_schema``:
    sha256 of :data:`schema.OUTPUT_SCHEMA` (a column added or changed: nothing older is
    reused, its rows would lack it); ``by_query_id``: the row's ``query_id`` is in its key
    (:func:`query_id_decides`); ``version``: :data:`SCORING_VERSION`."""

    config_hash: str
    drafter: str
    verifier: str
    adapter: str
    prompts: str
    seed: int
    output_schema: str = ""
    by_query_id: bool = True
    version: int = SCORING_VERSION

    @classmethod
    def of(cls, config: RunConfig) -> "ScoringIdentity":
        """The identity of ``config`` (model weights hashed once per process and model)."""
        drafter = _model_identity(config.drafter.model, config.drafter.adapter) if config.mode == "speculative" else "null"
        adapter = json.loads(drafter).get("adapter") if drafter != "null" else None
        return cls(config.config_hash(), drafter, _model_identity(config.verifier.model, None),
                   json.dumps(adapter, sort_keys=True), prompt_digest(), config.seed,
                   hashlib.sha256(OUTPUT_SCHEMA.to_string().encode()).hexdigest(), query_id_decides(config))


def query_id_decides(config: RunConfig) -> bool:
    """Whether a row's ``query_id`` decides its answer under ``config``: the per-row seed of
    multi-perspective sampling (paper §3.2: the random subsets, K-Means' initialisation) and of
    random selection is ``sha256(seed, query_id)`` (``stages.sampling.row_seed``). True in
    speculative mode and with ``selection.random_selection``; then only a row of the same
    ``query_id`` is reused. Standard RAG (one answer from all N documents) reuses across ids."""
    return config.mode == "speculative" or bool(config.selection.random_selection)


def _model_identity(model: str, adapter: str | None) -> str:
    """:func:`identity.drafter_identity` as JSON, hashed once per process and version of the
    files (a directory's weights replaced in place are hashed again)."""
    return _identity_of(model, adapter, _stamp(model), _stamp(adapter))


def _stamp(path: str | None) -> tuple:
    """(name, size, mtime) of the weight and manifest files of a local model directory; () else."""
    p = Path(path) if path else None
    if p is None or not p.is_dir():
        return ()
    return tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(p.iterdir())
                 if f.suffix in (".safetensors", ".json") and f.is_file())


@lru_cache(maxsize=16)
def _identity_of(model: str, adapter: str | None, _model_stamp: tuple, _adapter_stamp: tuple) -> str:
    return json.dumps(drafter_identity(model, adapter), sort_keys=True)


@lru_cache(maxsize=1)
def prompt_digest() -> str:
    """sha256 (hex) of the text of :data:`_PROMPT_CODE` (files sorted by path)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for name in _PROMPT_CODE:
        p = root / name
        for f in sorted(p.rglob("*") if p.is_dir() else [p]):
            if f.is_file() and f.suffix in (".py", ".jinja"):
                h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def row_key(query_id: str, query: str, task: str, choices: Sequence[str] | None,
            documents: Sequence[Document], documents_from: str, scoring: ScoringIdentity) -> bytes:
    """The row's key: sha256 (32 bytes) of the canonical JSON (sorted keys, no whitespace,
    UTF-8) of the row's parts and ``scoring``.

    Args:
        query_id: the row's id: in the key only when ``scoring.by_query_id``.
        query, task, choices: the input row's fields (choices None when it has none).
        documents: what the row is answered from, in order: the input's documents
            (``documents_from="input"``) or retrieval's top-N (``"retrieved"``).
        documents_from: ``"input"`` or ``"retrieved"``.
        scoring: the run's :class:`ScoringIdentity`.

    Raises:
        ValueError: ``documents_from`` is neither."""
    if documents_from not in ("input", "retrieved"):
        raise ValueError(f"documents_from: {documents_from!r}, expected 'input' or 'retrieved'")
    payload = {"query_id": query_id if scoring.by_query_id else None, "query": query, "task": task, "choices": list(choices) if choices is not None else None,
               "documents": [[d.doc_id, d.title, d.text] for d in documents],
               "documents_from": documents_from, "scoring": asdict(scoring)}
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).digest()
