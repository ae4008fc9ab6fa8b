"""Stage 7: evaluation against ``gold`` where it exists.

* QA: ``match`` (any accepted answer, normalised, is contained in the normalised output; the
  metric of Self-RAG and of the Speculative RAG paper, §4.1), plus exact match and token F1
  (SQuAD definitions; max over accepted answers).
* claim / choice: accuracy (the canonical answer equals the gold label / option).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .parsing import normalize_answer


@dataclass
class RowScore:
    correct: bool | None
    exact_match: bool | None
    f1: float | None


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token-level F1 in [0, 1] after :func:`normalize_answer`."""
    p, g = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = Counter(p) & Counter(g)
    same = sum(common.values())
    if not p or not g:
        return float(p == g)
    if same == 0:
        return 0.0
    prec, rec = same / len(p), same / len(g)
    return 2 * prec * rec / (prec + rec)


def score_row(task: str, answer: str | None, gold: list[str] | None) -> RowScore:
    """Metrics for one row; all None when there is no gold. A missing answer scores 0."""
    golds = [g for g in (gold or []) if g is not None and g.strip()]
    if not golds:
        return RowScore(None, None, None)
    ans = answer or ""
    na = normalize_answer(ans)
    em = any(na == normalize_answer(g) for g in golds)
    if task == "qa":
        match = bool(na) and any(normalize_answer(g) and normalize_answer(g) in na for g in golds)
        return RowScore(match, em, max(token_f1(ans, g) for g in golds))
    return RowScore(em, em, None)


def summarize(rows: list[dict]) -> dict:
    """Run-level metrics from output rows (dicts with task, correct, exact_match, f1, ...).

    Returns counts, per-task accuracy (mean of ``correct``), EM and F1 for QA, and the
    low-confidence / fast-path / error counts."""
    out: dict = {"rows": len(rows),
                 "answered": sum(1 for r in rows if r.get("error") is None and r.get("answer") is not None),
                 "errors": sum(1 for r in rows if r.get("error") is not None),
                 "low_confidence": sum(1 for r in rows if r.get("low_confidence")),
                 "fast_path": sum(1 for r in rows if r.get("fast_path")),
                 "by_task": {}}
    for task in sorted({r["task"] for r in rows if r.get("task")}):
        sub = [r for r in rows if r.get("task") == task and r.get("correct") is not None]
        if not sub:
            continue
        t = {"n_with_gold": len(sub), "accuracy": sum(r["correct"] for r in sub) / len(sub)}
        if task == "qa":
            t["exact_match"] = sum(bool(r["exact_match"]) for r in sub) / len(sub)
            t["f1"] = sum(r["f1"] or 0.0 for r in sub) / len(sub)
        out["by_task"][task] = t
    graded = [r for r in rows if r.get("correct") is not None]
    out["accuracy"] = (sum(r["correct"] for r in graded) / len(graded)) if graded else None
    out["n_with_gold"] = len(graded)
    return out
