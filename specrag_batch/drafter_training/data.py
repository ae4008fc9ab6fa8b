"""Drafter training data (paper §3.1): teacher-written rationales for (Q, A, D) triples.

For every labelled input row the document subsets are drawn exactly as inference draws them
(:func:`specrag_batch.run.pipeline.retrieve` and :func:`~specrag_batch.run.pipeline.multi_perspective_subsets`,
same config and seed), and the drafter prompt of each subset is built by the inference code
(:func:`specrag_batch.stages.prompts.fitted_prompt`). A **teacher** model (any model vLLM loads;
default the configured verifier) sees the subset's documents, the question and the gold answer
and writes a short rationale E. The training example is

    prompt     = the inference drafter prompt (ends with the prefilled ``"Rationale:"``)
    completion = ``" " + E + "\\nAnswer: " + A``  (what :func:`specrag_batch.core.parsing.parse_draft`
                 reads back as rationale E and answer A; A in the drafter's answer format:
                 the label for claims, the option letter for multiple choice)

so the drafter is trained with L = -log P(A, E | Q, D) on exactly what it writes at inference.

The teacher's prompt is :mod:`.teacher`'s; rows and rationales that give no example keep their
:class:`~.filters.DropReason` (:mod:`.filters`) in ``drop_reason``, counted in the data
manifest: nothing is silently dropped. This module runs the step: examples per shard, the
data shards, their done markers and the manifest.

Output: one Parquet per input shard (name as in a run, ``a/b.parquet`` -> ``a__b.parquet``),
a done marker per shard (``_shards/``; a re-run skips finished shards whose input and settings
did not change), and ``_manifest.json`` (the data manifest).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

import pyarrow as pa

from ..run import resume
from ..core import storage
from ..config import RunConfig
from ..stages.prompts import PromptTooLongError, fitted_prompt, truncate_documents
from ..stages.drafting import max_prompt_tokens
from ..run.pipeline import multi_perspective_subsets, retrieve
from ..run.manifest import new_run_id
from ..run.planning import plan_shards, read_validated, shard_output_uri
from ..core.schema import Document, QueryRow
from .filters import (DropReason, answer_text, check_completion, check_rationale, completion_text,
                      evidence_words, strip_restatement)
from .teacher import TEACHER_SYSTEM, teacher_prompt_hash, teacher_prompt_ids

__all__ = ["DATA_SCHEMA", "DataOptions", "DropReason", "TEACHER_SYSTEM", "answer_text", "build_training_data",
           "check_rationale", "completion_text", "evidence_words", "generate_examples", "load_tokenizer",
           "read_training_data", "read_training_examples", "teacher_prompt_ids"]

DOC_TYPE = pa.struct([("doc_id", pa.string()), ("title", pa.string()), ("text", pa.string())])
DATA_SCHEMA = pa.schema([
    ("query_id", pa.string()), ("task", pa.string()), ("query", pa.string()),
    ("choices", pa.list_(pa.string())), ("gold", pa.list_(pa.string())),
    ("subset_index", pa.int32()), ("doc_ids", pa.list_(pa.string())), ("documents", pa.list_(DOC_TYPE)),
    ("prompt", pa.string()), ("prompt_tokens", pa.int32()), ("completion", pa.string()),
    ("rationale", pa.string()), ("answer", pa.string()), ("teacher_text", pa.string()),
    ("drop_reason", pa.string()), ("teacher_model", pa.string()), ("drafter_model", pa.string()),
    ("source_file", pa.string()), ("source_row", pa.int32()), ("rationale_trimmed", pa.bool_()),
    ("rationale_restated", pa.bool_()),
])
"""One row per (input row, subset); rows kept for training have ``drop_reason`` null.
``teacher_text`` is the teacher's raw output (provenance); ``rationale`` the cleaned one
(``rationale_trimmed``: cut to complete sentences; ``rationale_restated``: a leading clause
restating the answer was removed, :func:`.filters.strip_restatement`). Input
rows that gave no subset at all have one row with ``subset_index`` null and the reason."""


@dataclass
class DataOptions:
    """Settings of the data step (part of the shard key: changing one recomputes shards).

    ``teacher``: model name (packaged name, HF id or path); None = the run config's verifier.
    ``drafter``: the model whose chat template and tokenizer render the prompts; None = the
    config's drafter (``specrag-batch drafter train`` re-renders for another base).
    ``subsets_per_row``: examples per input row (the first of the m sampled subsets).
    ``teacher_max_tokens``: rationale budget, tokens. ``min_evidence_words``: see
    :func:`.filters.check_rationale` (``no_evidence``). ``trim_truncated``: a rationale cut by
    the budget keeps its complete sentences instead of being dropped (counted as ``trimmed``
    in the data manifest, ``rationale_trimmed`` in the data shard); a small teacher often
    writes past a budget of a few dozen tokens (docs/decisions/002-trim-cut-teacher-rationales.md)."""

    teacher: str | None = None
    drafter: str | None = None
    subsets_per_row: int = 1
    teacher_max_tokens: int = 96
    min_evidence_words: int = 2
    trim_truncated: bool = True

    def key(self, cfg: RunConfig) -> str:
        """sha256 (16 hex) of these options, the teacher/drafter names, the teacher prompt
        (:func:`.teacher.teacher_prompt_hash`) and the config hash, taken with
        ``verifier.deduplicate_drafts`` false: the data step never runs the verifier's scoring,
        so the switch changes none of its output, and data made before its default became true
        (config files that leave it out) keeps its key and resumes instead of being generated
        again."""
        verifier = cfg.verifier.model_copy(update={"deduplicate_drafts": False})
        blob = json.dumps({**asdict(self), "teacher": self.teacher_name(cfg), "teacher_prompt": teacher_prompt_hash(),
                           "drafter": self.drafter_name(cfg),
                           "config": cfg.model_copy(update={"verifier": verifier}).config_hash()}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def teacher_name(self, cfg: RunConfig) -> str:
        """``teacher``, or the config's verifier model when None."""
        return self.teacher or cfg.verifier.model

    def drafter_name(self, cfg: RunConfig) -> str:
        """``drafter``, or the config's drafter model when None."""
        return self.drafter or cfg.drafter.model


@dataclass
class _Example:
    row: QueryRow
    subset_index: int | None = None
    docs: list[Document] = field(default_factory=list)
    prompt_ids: list[int] | None = None
    answer: str | None = None
    teacher_ids: list[int] | None = None
    reason: DropReason | None = None


def _row_examples(rows: list[QueryRow], cfg: RunConfig, opts: DataOptions, drafter_tok,
                  teacher_tok) -> list[_Example]:
    """Sampling and prompts for a shard's rows: one example per (row, first subsets), or one
    example carrying the reason a row gives none."""
    out: list[_Example] = []
    ok: list[QueryRow] = []
    for r in rows:
        if r.error is not None:
            out.append(_Example(r, reason=DropReason.INVALID_ROW))
            continue
        ans, why = answer_text(r.task, r.gold, r.choices, cfg.claim_labels)
        if why:
            out.append(_Example(r, reason=why))
        else:
            ok.append(r)
    docs = retrieve(ok, cfg)
    subsets = multi_perspective_subsets(ok, docs, cfg)
    d = cfg.drafter
    for i, r in enumerate(ok):
        if i not in subsets or not subsets[i]:
            out.append(_Example(r, reason=DropReason.NO_DOCUMENTS))
            continue
        ans, _ = answer_text(r.task, r.gold, r.choices, cfg.claim_labels)
        for s, sub in enumerate(subsets[i][:opts.subsets_per_row]):
            sel = [docs[i][j] for j in sub]
            ex = _Example(r, s, sel, answer=ans)
            try:
                ex.prompt_ids, _ = fitted_prompt(drafter_tok, r.task, r.query, sel, r.choices, cfg.claim_labels,
                                                 cfg.retrieval.max_doc_tokens,
                                                 max_prompt_tokens(drafter_tok, d.max_model_len, d.max_tokens,
                                                                   d.answer_budget),
                                                 d.prompt_layout, d.rationale_style)
            except PromptTooLongError:
                ex.reason = DropReason.PROMPT_TOO_LONG
                out.append(ex)
                continue
            shown, _ = truncate_documents(teacher_tok, sel, cfg.retrieval.max_doc_tokens)
            ex.teacher_ids = teacher_prompt_ids(teacher_tok, r.task, r.query, shown, r.choices,
                                                cfg.claim_labels, ans)
            out.append(ex)
    return out


def load_tokenizer(name: str):
    """The HF tokenizer of a model (packaged name, HF id or local path)."""
    from transformers import AutoTokenizer

    from ..engines.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model(name))


def generate_examples(rows: list[QueryRow], cfg: RunConfig, opts: DataOptions, teacher,
                      drafter_tok, source_file: str) -> list[dict]:
    """Data records (:data:`DATA_SCHEMA`) for validated rows: sampling, prompts, one batched
    teacher call, filtering. ``teacher`` is an :class:`~specrag_batch.engines.engine.Engine`."""
    exs = _row_examples(rows, cfg, opts, drafter_tok, teacher.tokenizer)
    todo = [e for e in exs if e.reason is None]
    gens = teacher.generate([e.teacher_ids for e in todo], max_tokens=opts.teacher_max_tokens,
                            temperature=0.0, top_p=1.0, seed=cfg.seed, desc="teacher rationales")
    gen_of = {id(e): g for e, g in zip(todo, gens)}
    tname, dname = opts.teacher_name(cfg), opts.drafter_name(cfg)
    out = []
    for e in exs:
        r = e.row
        rec = {"query_id": r.query_id, "task": r.task, "query": r.query, "choices": r.choices,
               "gold": r.gold, "subset_index": e.subset_index, "doc_ids": [d.doc_id for d in e.docs],
               "documents": [asdict(d) for d in e.docs], "prompt": None, "prompt_tokens": None,
               "completion": None, "rationale": None, "answer": e.answer, "teacher_text": None,
               "drop_reason": e.reason, "teacher_model": tname, "drafter_model": dname,
               "source_file": source_file, "source_row": r.row_index, "rationale_trimmed": None,
               "rationale_restated": None}
        if e.prompt_ids is not None:
            rec["prompt"] = drafter_tok.decode(e.prompt_ids)
            rec["prompt_tokens"] = len(e.prompt_ids)
        g = gen_of.get(id(e))
        if g is not None:
            rec["teacher_text"] = g.text
            rationale, why = check_rationale(r.task, g.text, g.finish_reason, e.docs, r.query, e.answer,
                                             r.gold, r.choices, cfg.claim_labels, opts.min_evidence_words,
                                             trim_truncated=opts.trim_truncated)
            rec["rationale"] = rationale
            rec["rationale_trimmed"] = g.finish_reason == "length" and why != DropReason.TRUNCATED_AT_MAX_TOKENS
            raw = " ".join(g.text.split()).strip(" *")
            rec["rationale_restated"] = strip_restatement(raw, r.task, e.answer, r.choices) != raw if why is None else None
            if why is None:
                rec["completion"], why = check_completion(r.task, rationale, e.answer, r.gold, r.choices,
                                                          cfg.claim_labels)
            rec["drop_reason"] = why
        out.append(rec)
    return out


def _summary(records: list[dict]) -> dict:
    rows = {(r["source_file"], r["source_row"]) for r in records}
    reasons = Counter(r["drop_reason"] for r in records if r["drop_reason"])
    return {"rows_in": len(rows), "examples": sum(r["prompt"] is not None for r in records),
            "kept": sum(r["drop_reason"] is None for r in records),
            "trimmed": sum(bool(r.get("rationale_trimmed")) and r["drop_reason"] is None for r in records),
            "restated": sum(bool(r.get("rationale_restated")) and r["drop_reason"] is None for r in records),
            "dropped": dict(sorted(reasons.items()))}


def build_training_data(input_uri: str, output_uri: str, cfg: RunConfig,
                        opts: DataOptions | None = None) -> dict:
    """The data step (``specrag-batch drafter data``): every input shard -> one data shard.

    Resumable per output shard: a shard whose done marker matches its input version and the
    settings key (:meth:`DataOptions.key`) is skipped. Returns the data manifest (also written
    to ``<output_uri>/_manifest.json``): teacher, drafter, config, per-shard and total counts
    of examples kept and dropped by reason, seconds, versions.

    Raises:
        FileNotFoundError: ``input_uri`` does not exist.
        ValueError: input and output overlap."""
    from ..engines.engine import get_engine
    from ..run.manifest import package_versions
    from ..run.planning import check_layout

    opts = opts or DataOptions()
    input_uri, output_uri = storage.normalize_uri(input_uri), storage.normalize_uri(output_uri)
    shards, skipped = plan_shards(input_uri)
    check_layout(input_uri, output_uri, shards)
    key, run_id, t0 = opts.key(cfg), new_run_id(), time.perf_counter()
    teacher = drafter_tok = None
    results = []
    for shard in shards:
        out = shard_output_uri(input_uri, shard, output_uri)
        try:
            storage.check_regular_file(shard)  # a link to nothing or a FIFO fails this shard only
            fp = resume.input_fingerprint(shard)
        except OSError as e:
            results.append({"input": shard, "output": None, "status": "failed", "error": f"{type(e).__name__}: {e}"})
            continue
        done = resume.completed_shard(output_uri, out, key, fp)
        if done:
            results.append({**done["result"], "resumed": True})
            continue
        ts = time.perf_counter()
        try:
            rows = read_validated(shard, set(), cfg.task)
        except (OSError, ValueError, pa.ArrowInvalid) as e:
            results.append({"input": shard, "output": None, "status": "failed", "error": f"{type(e).__name__}: {e}"})
            continue
        if teacher is None:
            tcfg = cfg.verifier.model_copy(update={"model": opts.teacher_name(cfg),
                                                   "max_tokens": opts.teacher_max_tokens})
            teacher = get_engine(tcfg, cfg.seed)
            dname = opts.drafter_name(cfg)
            drafter_tok = teacher.tokenizer if dname == opts.teacher_name(cfg) else load_tokenizer(dname)
        records = generate_examples(rows, cfg, opts, teacher, drafter_tok, shard)
        storage.write_parquet_atomic(out, pa.Table.from_pylist(records, schema=DATA_SCHEMA))
        res = {"input": shard, "output": out, "status": "ok", **_summary(records),
               "seconds": round(time.perf_counter() - ts, 2)}
        resume.mark_done(output_uri, out, key, fp, run_id, res)
        results.append(res)
    total = Counter()
    for r in results:
        total.update(r.get("dropped", {}))
    manifest = {
        "kind": "drafter_training_data", "run_id": run_id,
        "created": dt.datetime.now(dt.UTC).isoformat(), "input": input_uri, "output": output_uri,
        "key": key, "teacher_model": opts.teacher_name(cfg), "drafter_model": opts.drafter_name(cfg),
        "options": asdict(opts), "config": cfg.model_dump(mode="json"), "config_hash": cfg.config_hash(),
        "completion_format": completion_text("<rationale>", "<answer>"),
        "shards": results, "skipped_files": skipped,
        "rows_in": sum(r.get("rows_in", 0) for r in results),
        "examples": sum(r.get("examples", 0) for r in results),
        "kept": sum(r.get("kept", 0) for r in results),
        "trimmed": sum(r.get("trimmed", 0) for r in results),
        "restated": sum(r.get("restated", 0) for r in results),
        "teacher_prompt_hash": teacher_prompt_hash(),
        "dropped": dict(sorted(total.items())),
        "failed_shards": sum(r["status"] != "ok" for r in results),
        "seconds": round(time.perf_counter() - t0, 2),
        "engine": teacher.stats.as_dict() if teacher else None, "versions": package_versions(),
    }
    storage.write_bytes_atomic(storage.join(output_uri, "_manifest.json"),
                               json.dumps(manifest, indent=2, default=str).encode())
    return manifest


DROPPED_FIELDS = ("query_id", "subset_index", "source_file", "source_row")
"""What names a data row that gives no training example (with its ``reason``): the training
manifest's ``dropped`` list."""


def read_training_examples(data_uri: str) -> tuple[list[dict], list[dict]]:
    """(kept examples, dropped rows) of a data prefix, in shard then row order: the kept ones
    (``drop_reason`` null) as whole records, each dropped one named by :data:`DROPPED_FIELDS`
    and its ``reason`` (``drop_reason``), with ``stage`` ``"data"``.

    Raises:
        FileNotFoundError: nothing at ``data_uri``.
        ValueError: no kept example."""
    shards, _ = plan_shards(storage.normalize_uri(data_uri))
    rows, dropped = [], []
    for s in shards:
        for r in storage.read_parquet(s).to_pylist():
            if r["drop_reason"] is None:
                rows.append(r)
            else:
                dropped.append({**{k: r.get(k) for k in DROPPED_FIELDS}, "reason": r["drop_reason"],
                                "stage": "data"})
    if not rows:
        raise ValueError(f"{data_uri}: no training examples (all dropped, or an empty prefix)")
    return rows, dropped


def read_training_data(data_uri: str) -> list[dict]:
    """All kept examples (``drop_reason`` null) of a data prefix, in shard then row order
    (:func:`read_training_examples` without the dropped rows).

    Raises:
        FileNotFoundError: nothing at ``data_uri``.
        ValueError: no kept example."""
    return read_training_examples(data_uri)[0]
