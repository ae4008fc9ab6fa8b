"""Short evaluation of a drafter on the held-out slice of its training data.

The held-out query ids (:func:`~specrag_batch.drafter_training.train.is_held_out`, same
fraction as training) are never trained on. Each held-out example is drafted once, with the
inference prompt of its subset (:func:`specrag_batch.stages.prompts.fitted_prompt`) and the inference
scorer/parser (:func:`specrag_batch.stages.drafting.run_drafts`), by every model named.
"""

from __future__ import annotations

import statistics

from ..config import RunConfig
from ..stages.drafting import DraftRequest, max_prompt_tokens, run_drafts
from ..stages.prompts import PromptTooLongError, fitted_prompt
from ..stages.evaluation import score_row
from ..core.records import Flag
from ..core.schema import Document
from .data import read_training_data
from .train import is_held_out, served_as


def evaluate_drafters(data_uri: str, models: dict[str, str], cfg: RunConfig, eval_fraction: float = 0.05,
                      max_rows: int = 50) -> dict:
    """Per model: rows, share of drafts that parse (have an answer of the right kind), share
    with an ``Answer:`` field the drafter wrote itself (not forced after a budget cut,
    ``drafter.answer_on_truncation``), accuracy vs gold (match for QA, label/option for the
    others), mean generated tokens per draft (both calls when answers are recovered).

    Args:
        data_uri: prefix written by the data step; its held-out examples
            (:func:`~specrag_batch.drafter_training.train.is_held_out` at ``eval_fraction``),
            at most ``max_rows`` of them, are drafted once each.
        models: label -> model (packaged name, HF id or path); e.g. ``{"tuned": dir, "base": name}``;
            a LoRA-tuned directory is served as its base plus its adapter (:func:`.train.served_as`).
        cfg: run config: drafter generation settings, claim labels, document budget.

    Returns:
        label -> {"model", "rows", "parsed", "answer_field", "accuracy" (fractions, 4 decimals;
        None with no draft), "generated_tokens_per_draft"}.

    Raises:
        ValueError: no held-out example in the data."""
    from ..engines.engine import get_engine

    rows = [r for r in read_training_data(data_uri) if is_held_out(r["query_id"], eval_fraction)][:max_rows]
    if not rows:
        raise ValueError(f"{data_uri}: no held-out example (eval_fraction={eval_fraction})")
    d = cfg.drafter
    out = {}
    for label, model in models.items():
        eng = get_engine(d.model_copy(update=served_as(model)), cfg.seed)  # a tuned dir: base + adapter
        reqs, kept = [], []
        for i, r in enumerate(rows):
            docs = [Document(x["doc_id"], x["title"], x["text"]) for x in r["documents"]]
            try:
                ids, _ = fitted_prompt(eng.tokenizer, r["task"], r["query"], docs, r["choices"], cfg.claim_labels,
                                       cfg.retrieval.max_doc_tokens,
                                       max_prompt_tokens(eng.tokenizer, d.max_model_len, d.max_tokens, d.answer_budget),
                                       d.prompt_layout, d.rationale_style)
            except PromptTooLongError:
                continue
            reqs.append(DraftRequest(i, r["task"], r["doc_ids"], ids, r["choices"]))
            kept.append(r)
        before = eng.stats.generated_tokens
        drafts = run_drafts(eng, reqs, max_tokens=d.max_tokens, temperature=d.temperature, top_p=d.top_p,
                            seed=cfg.seed, labels=cfg.claim_labels, desc=f"evaluate {label}",
                            answer_max_tokens=d.answer_budget)
        correct = [bool(score_row(r["task"], x.answer if x.valid else None, r["gold"]).correct)
                   for r, x in zip(kept, drafts)]
        out[label] = {"model": model, "rows": len(kept),
                      "parsed": round(statistics.fmean(x.valid for x in drafts), 4) if drafts else None,
                      "answer_field": round(statistics.fmean(not {Flag.NO_ANSWER_FIELD, Flag.ANSWER_FORCED} & set(x.flags)
                                                             for x in drafts), 4)
                      if drafts else None,
                      "accuracy": round(statistics.fmean(correct), 4) if correct else None,
                      "generated_tokens_per_draft": round((eng.stats.generated_tokens - before) / max(1, len(drafts)), 1)}
    return out
