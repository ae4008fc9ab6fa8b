"""The Speculative RAG core: validated rows in, output rows out, for one chunk of a shard.

Stages (each its own module): retrieval -> multi-perspective sampling -> drafting ->
verification -> selection -> evaluation; or, in ``standard`` mode, retrieval -> one answer
from all N documents by the verifier model. Every input row yields exactly one output row:
answered, or carrying an ``error`` that names the row and the field.
"""

from __future__ import annotations

import time
import unicodedata
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Protocol, Sequence

import numpy as np

from .config import RunConfig
from .drafting import PROCESSING_ERROR, DraftRequest, PromptTooLongError, fitted_prompt, run_drafts
from .evaluation import score_row
from .models import model_id
from .prompts import Question
from .retrieval import embed, get_retriever, load_embedder
from .sampling import cluster_documents, conditioned_texts, row_seed, sample_subsets
from .schema import Document, QueryRow
from .selection import Draft, Selection, consensus, select
from .standard import standard_request
from .verification import verify

STAGES = ("retrieval", "sampling", "drafting", "verification", "selection")


class EngineLike(Protocol):  # pragma: no cover - typing only
    tokenizer: object
    def generate(self, prompts, **kw): ...
    def prompt_logprobs(self, prompts, desc: str = ...): ...
    def prompt_and_next_logprobs(self, prompts, top_k: int, desc: str = ...): ...


@dataclass
class StageTimer:
    """Wall seconds per stage, accumulated over chunks."""

    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - t0


@dataclass
class RunInfo:
    """Identifiers copied into every output row."""

    run_id: str
    source_file: str


def _visible_text(text: str) -> str:
    """``text`` as a reader sees it, for comparing passages: NFKC-normalised, Unicode format
    characters (category Cf: zero-width space/joiners, BOM, invisible separators, soft hyphen)
    dropped, whitespace runs collapsed, lower case."""
    text = unicodedata.normalize("NFKC", text)
    return " ".join("".join(c for c in text if unicodedata.category(c) != "Cf").split()).lower()


def _prepare_documents(row: QueryRow, docs: list[Document] | None, top_n: int) -> list[Document]:
    """Top-N in given order, without empty or duplicate passages (flags record removals).
    Emptiness and duplicates are judged on the visible text (:func:`_visible_text`), so a copy
    with zero-width spaces or a BOM is a duplicate and a passage of invisible characters is
    empty; kept passages keep their text as given."""
    out, seen = [], set()
    for d in docs or []:
        key = _visible_text(d.text)
        if not key:
            if "empty_documents_removed" not in row.flags:
                row.flags.append("empty_documents_removed")
            continue
        if key in seen:
            if "duplicate_documents_removed" not in row.flags:
                row.flags.append("duplicate_documents_removed")
            continue
        seen.add(key)
        out.append(d)
        if len(out) == top_n:
            break
    return out


def retrieve(rows: Sequence[QueryRow], cfg: RunConfig) -> dict[int, list[Document]]:
    """Stage 1. Position in ``rows`` -> its top-N documents; rows without documents use the
    FAISS index (``retrieval.index``); rows left with none get an error."""
    docs: dict[int, list[Document]] = {}
    need = [i for i, r in enumerate(rows) if r.error is None and r.documents is None]
    if need and cfg.retrieval.index:
        found = get_retriever(cfg.retrieval.index).search([rows[i].query for i in need], cfg.retrieval.top_n)
        for i, ds in zip(need, found):
            rows[i].documents = ds
    for i, r in enumerate(rows):
        if r.error is not None:
            continue
        if r.documents is None:
            r.error = (f"row {r.row_index} (query_id={r.query_id!r}): field 'documents': missing "
                       "and no retrieval index configured (retrieval.index)")
            r.flags.append("no_documents")
            continue
        docs[i] = _prepare_documents(r, r.documents, cfg.retrieval.top_n)
        r.num_documents = len(docs[i])
        if not docs[i]:
            r.error = f"row {r.row_index} (query_id={r.query_id!r}): field 'documents': no documents (N = 0)"
            r.flags.append("no_documents")
            del docs[i]
    return docs


def multi_perspective_subsets(rows: Sequence[QueryRow], docs: dict[int, list[Document]],
                              cfg: RunConfig) -> dict[int, list[tuple[int, ...]]]:
    """Stage 2 (paper §3.2): query-conditioned embeddings of every (query, document) pair of
    the chunk in one encoder call, K-Means per row, m subsets of one document per cluster.
    The query is budgeted in encoder tokens so every document reaches the encoder
    (:func:`~specrag_batch.sampling.conditioned_texts`; cuts are flagged on the row)."""
    s = cfg.sampling
    order = list(docs)
    vecs = None
    if s.strategy != "random":  # random subsets need no embeddings
        encoder = load_embedder(cfg.retrieval.embedding_model)
        texts = []
        for i in order:
            row_texts, flags = conditioned_texts(
                rows[i].query, [f"{d.title}\n{d.text}".strip() for d in docs[i]], s.query_instruction,
                encoder.tokenizer, encoder.max_seq_length)
            texts += row_texts
            rows[i].flags += [f for f in flags if f not in rows[i].flags]
        vecs = embed(cfg.retrieval.embedding_model, texts)
    out, pos = {}, 0
    for i in order:
        n = len(docs[i])
        seed = row_seed(cfg.seed, rows[i].query_id)
        if n < s.num_clusters:
            rows[i].flags.append("fewer_documents_than_k")
        if vecs is not None:
            labels = cluster_documents(vecs[pos:pos + n], s.num_clusters, seed, s.kmeans_n_init)
        else:  # random subsets: no clustering needed
            labels = np.zeros(n, dtype=int)
        pos += n
        out[i] = sample_subsets(labels, s.num_drafts, seed, s.strategy, k=s.num_clusters)
    return out


def _question(r: QueryRow, cfg: RunConfig) -> Question:
    return Question(r.task, r.query, tuple(r.choices) if r.choices is not None else None,
                    tuple(cfg.claim_labels))


def _fail(r: QueryRow, field_: str, reason: str) -> None:
    r.error = f"row {r.row_index} (query_id={r.query_id!r}): field '{field_}': {reason}"


def draft_rows(rows: Sequence[QueryRow], cfg: RunConfig, drafter: EngineLike,
               timer: StageTimer) -> dict[int, list[Draft]]:
    """Stages 1-3 for a chunk (retrieval, multi-perspective sampling, drafting; paper §3.2).

    Returns position in ``rows`` -> its m drafts (with ``score_draft``), for rows that got
    drafts; rows that fail carry an ``error``. This is all a verifier needs besides the row's
    question: in disaggregated runs it is what the intermediate draft Parquet holds."""
    with timer.stage("retrieval"):
        docs = retrieve(rows, cfg)
    with timer.stage("sampling"):
        subsets = multi_perspective_subsets(rows, docs, cfg)
    d = cfg.drafter
    with timer.stage("drafting"):
        reqs: list[DraftRequest] = []
        for i, subs in subsets.items():
            r = rows[i]
            try:
                for sub in subs:
                    sel_docs = [docs[i][j] for j in sub]
                    ids, cut = fitted_prompt(drafter.tokenizer, r.task, r.query, sel_docs, r.choices,
                                             cfg.claim_labels, cfg.retrieval.max_doc_tokens,
                                             d.max_model_len - d.max_tokens)
                    if cut and "truncated_documents" not in r.flags:
                        r.flags.append("truncated_documents")
                    reqs.append(DraftRequest(i, r.task, [x.doc_id for x in sel_docs], ids, r.choices))
            except PromptTooLongError as e:
                _fail(r, "query", str(e))
                reqs = [q for q in reqs if q.row != i]
            except Exception as e:  # one row's bad input must not fail the shard
                _fail(r, _row_field(r), f"building the drafter prompt failed: {type(e).__name__}: {e}")
                reqs = [q for q in reqs if q.row != i]
        drafts = run_drafts(drafter, reqs, max_tokens=d.max_tokens, temperature=d.temperature,
                            top_p=d.top_p, seed=cfg.seed, labels=cfg.claim_labels, desc="drafting")
    by_row: dict[int, list[Draft]] = defaultdict(list)
    for q, dr in zip(reqs, drafts):
        if PROCESSING_ERROR in dr.flags and rows[q.row].error is None:
            _fail(rows[q.row], "drafts", dr.rationale)
        by_row[q.row].append(dr)
    return {i: ds for i, ds in by_row.items() if rows[i].error is None}


def _row_field(r: QueryRow) -> str:
    """The input field most likely behind an unexpected prompt-building error of row ``r``."""
    return "choices" if r.task == "choice" else "documents"


def verify_and_select(rows: Sequence[QueryRow], by_row: dict[int, list[Draft]], cfg: RunConfig,
                      verifier: EngineLike | None,
                      timer: StageTimer) -> dict[int, tuple[list[Draft], Selection]]:
    """Stages 4-5 for a chunk (paper §3.3): consensus fast path, verifier scores ρ_SC and ρ_SR
    of every remaining valid draft in one batched call (question block only, never the
    documents), then ρ = ρ_draft·ρ_SC·ρ_SR (log space) and argmax.

    ``by_row`` maps position in ``rows`` -> drafts, in row order (as :func:`draft_rows`
    returns it). Returns position -> (drafts, selection)."""
    sel = cfg.selection
    c = cfg.consensus_threshold
    fast = {i: consensus(ds, c) for i, ds in by_row.items()}
    with timer.stage("verification"):
        if verifier is not None and (sel.use_self_consistency or sel.use_self_reflection):
            items = [(i, _question(rows[i], cfg), dr) for i, ds in by_row.items()
                     if not fast[i] for dr in ds if dr.valid]
            errors = verify(verifier, items, cfg.reflection_question, cfg.verifier.max_model_len - 1,
                            mode=sel.self_reflection)
            for i, msg in errors.items():
                _fail(rows[i], "drafts", msg)
    out = {}
    with timer.stage("selection"):
        for i, ds in by_row.items():
            if rows[i].error is not None:
                continue
            rseed = row_seed(cfg.seed + 1, rows[i].query_id) if sel.random_selection else None
            out[i] = (ds, select(ds, use_draft=sel.use_draft_score, use_sc=sel.use_self_consistency,
                                 use_sr=sel.use_self_reflection, tau_min=sel.tau_for(rows[i].task),
                                 fast_path=fast[i], random_seed=rseed, confidence=sel.confidence))
    return out


def run_speculative(rows: Sequence[QueryRow], cfg: RunConfig, drafter: EngineLike,
                    verifier: EngineLike | None, timer: StageTimer) -> dict[int, tuple[list[Draft], Selection]]:
    """Stages 1-5 for a chunk. Returns position -> (drafts, selection) for rows without error."""
    return verify_and_select(rows, draft_rows(rows, cfg, drafter, timer), cfg, verifier, timer)


def run_standard(rows: Sequence[QueryRow], cfg: RunConfig, generator: EngineLike,
                 timer: StageTimer) -> dict[int, tuple[list[Draft], Selection]]:
    """Standard RAG for a chunk: retrieval, then one generation per row over all N documents."""
    with timer.stage("retrieval"):
        docs = retrieve(rows, cfg)
    v = cfg.verifier
    with timer.stage("drafting"):
        reqs = []
        for i, ds in docs.items():
            r = rows[i]
            try:
                req, cut = standard_request(generator.tokenizer, i, r.task, r.query, ds, r.choices,
                                            cfg.claim_labels, cfg.retrieval.max_doc_tokens,
                                            v.max_model_len - v.max_tokens)
            except PromptTooLongError as e:
                _fail(r, "query", str(e))
                continue
            except Exception as e:  # one row's bad input must not fail the shard
                _fail(r, _row_field(r), f"building the prompt failed: {type(e).__name__}: {e}")
                continue
            if cut:
                r.flags.append("truncated_documents")
            reqs.append(req)
        drafts = run_drafts(generator, reqs, max_tokens=v.max_tokens, temperature=v.temperature,
                            top_p=v.top_p, seed=cfg.seed, labels=cfg.claim_labels, desc="standard RAG")
    out = {}
    with timer.stage("selection"):
        for q, dr in zip(reqs, drafts):
            if PROCESSING_ERROR in dr.flags:
                _fail(rows[q.row], "drafts", dr.rationale)
                continue
            out[q.row] = ([dr], select([dr], use_draft=True, use_sc=False, use_sr=False,
                                       tau_min=cfg.selection.tau_for(rows[q.row].task),
                                       confidence=cfg.selection.confidence))
    return out


def _draft_record(d: Draft) -> dict:
    return {"doc_ids": d.doc_ids, "answer": d.answer,
            "written_answer": d.written_answer or d.answer, "rationale": d.rationale,
            "score": d.score, "score_draft": d.score_draft,
            "score_self_consistency": d.score_self_consistency,
            "score_self_reflection": d.score_self_reflection, "logprob_yes": d.logprob_yes,
            "logprob_no": d.logprob_no, "tokens_draft": d.tokens_draft,
            "tokens_answer": d.tokens_answer, "tokens_rationale": d.tokens_rationale,
            "flags": d.flags}


def output_row(r: QueryRow, result: tuple[list[Draft], Selection] | None, cfg: RunConfig,
               info: RunInfo) -> dict:
    """One output record (see :data:`schema.OUTPUT_SCHEMA`)."""
    rec = {"query_id": r.query_id, "task": r.task, "query": r.query, "answer": None,
           "rationale": None, "score": None, "score_draft": None, "score_self_consistency": None,
           "score_self_reflection": None, "low_confidence": None, "fast_path": None,
           "num_documents": r.num_documents, "drafts": [], "flags": list(r.flags), "error": r.error,
           "gold": r.gold, "correct": None, "exact_match": None, "f1": None, "mode": cfg.mode,
           "drafter_model": model_id(cfg.drafter.model) if cfg.mode == "speculative" else None,
           "verifier_model": model_id(cfg.verifier.model), "run_id": info.run_id,
           "source_file": info.source_file}
    if r.error is None and result is not None:
        drafts, s = result
        rec["drafts"] = [_draft_record(d) for d in drafts]
        rec["low_confidence"] = s.low_confidence
        rec["fast_path"] = s.fast_path
        rec["flags"] += [f for f in s.flags if f not in rec["flags"]]
        if s.index is not None:
            best = drafts[s.index]
            rec.update(answer=best.answer, rationale=best.rationale, score=s.score,
                       score_draft=best.score_draft,
                       score_self_consistency=best.score_self_consistency,
                       score_self_reflection=best.score_self_reflection)
            rec["flags"] += [f for f in best.flags if f not in rec["flags"]]
        if any("non_finite_logprob" in d.flags for d in drafts) and "non_finite_logprob" not in rec["flags"]:
            rec["flags"].append("non_finite_logprob")
    if r.error is None:
        m = score_row(r.task, rec["answer"], r.gold, choices=r.choices, labels=cfg.claim_labels)
        rec.update(correct=m.correct, exact_match=m.exact_match, f1=m.f1)
        rec["flags"] += [f for f in m.flags if f not in rec["flags"]]
    return rec


def process_rows(rows: Sequence[QueryRow], cfg: RunConfig, *, drafter: EngineLike | None,
                 verifier: EngineLike, info: RunInfo, timer: StageTimer | None = None) -> list[dict]:
    """Run the configured mode over rows, in chunks of ``cfg.chunk_rows``; one record per row,
    in input order. Row errors from validation pass straight through."""
    timer = timer or StageTimer()
    records: list[dict] = []
    for idx in _chunks(len(rows), cfg.chunk_rows):
        chunk = [rows[i] for i in idx]
        if cfg.mode == "standard":
            res = run_standard(chunk, cfg, verifier, timer)
        else:
            if drafter is None:
                raise ValueError("speculative mode needs a drafter engine")
            res = run_speculative(chunk, cfg, drafter, verifier, timer)
        records += [output_row(r, res.get(i), cfg, info) for i, r in enumerate(chunk)]
    return records


def _chunks(n: int, size: int) -> Iterator[range]:
    for start in range(0, n, size):
        yield range(start, min(start + size, n))


def draft_stage(rows: Sequence[QueryRow], cfg: RunConfig, *, drafter: EngineLike,
                timer: StageTimer | None = None) -> dict[int, list[Draft]]:
    """Disaggregated runs, drafter side: stages 1-3 over a shard's rows in chunks of
    ``cfg.chunk_rows`` (the same chunks as :func:`process_rows`). Returns position in
    ``rows`` -> drafts; failing rows get an ``error``. Speculative mode only.

    Raises:
        ValueError: ``cfg.mode`` is not ``speculative``."""
    if cfg.mode != "speculative":
        raise ValueError("disaggregated drafting needs mode 'speculative'")
    timer = timer or StageTimer()
    out: dict[int, list[Draft]] = {}
    for idx in _chunks(len(rows), cfg.chunk_rows):
        chunk = [rows[i] for i in idx]
        out.update({idx[j]: ds for j, ds in draft_rows(chunk, cfg, drafter, timer).items()})
    return out


def verify_stage(rows: Sequence[QueryRow], drafts: dict[int, list[Draft]], cfg: RunConfig, *,
                 verifier: EngineLike, info: RunInfo, timer: StageTimer | None = None) -> list[dict]:
    """Disaggregated runs, verifier side: stages 4-5 over drafts read back from the
    intermediate draft Parquet, chunked as in :func:`process_rows`; one output record per row,
    in input order (rows with an ``error`` pass through)."""
    timer = timer or StageTimer()
    records: list[dict] = []
    for idx in _chunks(len(rows), cfg.chunk_rows):
        chunk = [rows[i] for i in idx]
        by_row = {j: drafts[i] for j, i in enumerate(idx) if i in drafts and rows[i].error is None}
        res = verify_and_select(chunk, by_row, cfg, verifier, timer)
        records += [output_row(r, res.get(j), cfg, info) for j, r in enumerate(chunk)]
    return records
