"""Stage 7: evaluation against ``gold`` where it exists.

* QA: ``match`` (any accepted answer, normalised, is contained in the normalised output; the
  metric of Self-RAG and of the Speculative RAG paper, §4.1), plus exact match and token F1
  (SQuAD definitions; max over accepted answers). Normalisation is SQuAD's on Unicode-folded
  text (:func:`~specrag_batch.core.parsing.normalize_answer`: ``Zürich`` = ``Zurich``, ``’`` = ``'``).
* claim: accuracy (the answer's label equals the gold label; both compared as labels, so
  FEVER's ``NOT ENOUGH INFO`` is ``NOT_ENOUGH_INFO``).
* choice: accuracy (the answer is the gold option; a gold may be the option text, its letter
  ``B`` or ARC's 1-based digit key ``2``).

A gold that cannot be scored (a claim gold outside ``claim_labels``, a choice gold that is no
option, or one that is an option's text and names another option as key) is flagged on the row
and left ungraded (``correct`` None), never scored as wrong.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..core.parsing import (canonical_label, label_key, normalize_answer, normalize_answer_keep_articles,
                      option_index)
from ..core.records import Flag

# row flags
GOLD_NOT_A_LABEL = Flag.GOLD_NOT_A_LABEL
GOLD_NOT_AN_OPTION = Flag.GOLD_NOT_AN_OPTION
GOLD_OPTION_AMBIGUOUS = Flag.GOLD_OPTION_AMBIGUOUS
GOLD_FLAGS = (GOLD_NOT_A_LABEL, GOLD_NOT_AN_OPTION, GOLD_OPTION_AMBIGUOUS)

_KEY_RE = re.compile(r"\(?([A-Za-z]+|[0-9]+)[.):]?")


@dataclass
class RowScore:
    """Metrics of one row: ``correct`` (match for QA, accuracy otherwise), ``exact_match``
    (SQuAD EM for QA; for claim and choice the same value as ``correct``), ``f1`` (QA only,
    SQuAD token F1 in [0, 1]; None for claim and choice); None when ungraded. ``flags``
    names golds that could not be scored (:data:`GOLD_FLAGS`: not a label, not an option, or
    an ambiguous option)."""

    correct: bool | None
    exact_match: bool | None
    f1: float | None
    flags: list[str] = field(default_factory=list)


def _keys(answer: str, gold: str) -> tuple[str, str, bool]:
    """(answer key, gold key, whole_words). SQuAD normalisation, unless it empties the gold
    (``"A"``, ``"The"``): then both sides keep their articles and a match needs whole words."""
    g = normalize_answer(gold)
    if g:
        return normalize_answer(answer), g, False
    return normalize_answer_keep_articles(answer), normalize_answer_keep_articles(gold), True


def _f1(p: list[str], g: list[str]) -> float:
    if not p or not g:
        return float(p == g)
    same = sum((Counter(p) & Counter(g)).values())
    if same == 0:
        return 0.0
    prec, rec = same / len(p), same / len(g)
    return 2 * prec * rec / (prec + rec)


CJK_CHAR = re.compile("[\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
                      "\uf900-\ufaff\U00020000-\U0002ebef]")
"""A character that is a token of its own in :func:`f1_tokens`: Han ideographs (CJK Unified
Ideographs, extensions A-F, compatibility), Hiragana, Katakana and Hangul syllables."""
_F1_TOKEN = re.compile(f"{CJK_CHAR.pattern}|(?:(?!{CJK_CHAR.pattern})\\S)+")


def f1_tokens(normalized: str) -> list[str]:
    """The tokens token F1 compares, by mixed segmentation (as multilingual QA evaluations do,
    e.g. MLQA and CMRC): each CJK character (:data:`CJK_CHAR`) is one token, any other run of
    non-space characters is one token. Hangul that :func:`~specrag_batch.core.parsing.fold_text`
    decomposed into jamo is recomposed first (NFC), so a syllable is one token. On text without
    CJK characters it is ``str.split``."""
    return _F1_TOKEN.findall(unicodedata.normalize("NFC", normalized))


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token-level F1 in [0, 1] after :func:`normalize_answer` (articles kept when
    dropping them would empty the gold), over :func:`f1_tokens` (CJK characters one by one,
    so "北京市" against "北京" gets partial credit as "Beijing city" against "Beijing" does)."""
    a, g, _ = _keys(prediction, gold)
    return _f1(f1_tokens(a), f1_tokens(g))


def _text_key(s: str) -> str:
    return normalize_answer(s) or normalize_answer_keep_articles(s)


def option_of(text: str, choices: Sequence[str]) -> int | None:
    """0-based index of the option ``text`` is (the same string, else the same normalised
    text), else None."""
    if text in choices:
        return list(choices).index(text)
    key = _text_key(text)
    return next((i for i, c in enumerate(choices) if key and _text_key(c) == key), None)


def gold_options(gold: str, choices: Sequence[str]) -> set[int]:
    """Every 0-based option a multiple-choice gold can mean: the option whose text it is, and
    the option it names as a key: a letter label as in the prompt (``B``, ``(b)``, ``C.``;
    beyond Z ``AA``, ``AB``, ...: :func:`~specrag_batch.core.parsing.option_index`) or a 1-based
    digit key (ARC's ``answerKey`` for rows labelled ``1``..``4``). Empty: no option; two
    indices: ambiguous (ARC ``Mercury_402547``: answerKey ``C``, and option A's text is ``C``)."""
    out = set()
    i = option_of(gold, choices)
    if i is not None:
        out.add(i)
    m = _KEY_RE.fullmatch(gold.strip())
    if m is not None:
        key = m.group(1)
        i = int(key) - 1 if key.isdigit() else option_index(key.upper() if len(key) == 1 else key)
        if 0 <= i < len(choices):
            out.add(i)
    return out


def score_row(task: str, answer: str | None, gold: list[str] | None, *,
              choices: Sequence[str] | None = None, labels: Sequence[str] | None = None) -> RowScore:
    """Metrics for one row (paper §4.1 metrics; see the module docstring).

    Args:
        task: ``qa`` | ``claim`` | ``choice`` (any other value is scored as ``claim``; never
            raises).
        answer: the selected answer (an option text for ``choice``, a label for ``claim``);
            None or empty scores 0 / False.
        gold: accepted answers (QA), the gold label (claim) or the correct option as text,
            letter or 1-based digit (choice). Blank entries are ignored.
        choices: the row's option texts (``choice``); without them gold and answer are compared
            as normalised texts and no gold is flagged.
        labels: the configured ``claim_labels`` (``claim``); without them labels are compared
            by spelling-free key only and no gold is flagged.

    Returns:
        :class:`RowScore`; all None when there is no gold, ``correct``/``exact_match`` None and
        a flag when no gold could be mapped to one label / option: :data:`GOLD_NOT_A_LABEL`,
        :data:`GOLD_NOT_AN_OPTION`, or :data:`GOLD_OPTION_AMBIGUOUS` for a choice gold that is
        one option's text and names another as key (never guessed). Such golds are flagged
        even when another gold of the row is scored.
    """
    golds = [g for g in (gold or []) if g is not None and g.strip()]
    if not golds:
        return RowScore(None, None, None)
    ans = answer or ""
    if task == "qa":
        keys = [_keys(ans, g) for g in golds]
        keys = [(a, g, whole) for a, g, whole in keys if g]
        if not keys:
            return RowScore(None, None, None)
        match = any(g in a if not whole else f" {g} " in f" {a} " for a, g, whole in keys if a)
        return RowScore(match, any(a == g for a, g, _ in keys),
                        max(_f1(f1_tokens(a), f1_tokens(g)) for a, g, _ in keys))
    # per gold, the set of labels / options it can mean (one: scorable)
    if task == "choice" and choices:
        missing, readings = GOLD_NOT_AN_OPTION, [gold_options(g, choices) for g in golds]
        got = option_of(ans, choices) if ans else None
    elif task == "choice":  # no option list to map to: compare normalised texts
        missing, readings, got = None, [{_text_key(g)} for g in golds], (_text_key(ans) or None)
    elif labels is not None:
        missing = GOLD_NOT_A_LABEL
        readings = [{canonical_label(g, list(labels))} - {None} for g in golds]
        got = canonical_label(ans, list(labels)) if ans else None
    else:
        missing, readings, got = None, [{label_key(g)} for g in golds], (label_key(ans) or None)
    flags = ([missing] if any(not r for r in readings) else []) + (
        [GOLD_OPTION_AMBIGUOUS] if any(len(r) > 1 for r in readings) else [])
    targets = {x for r in readings if len(r) == 1 for x in r}
    if not targets:
        return RowScore(None, None, None, flags)
    ok = got is not None and got in targets
    return RowScore(ok, ok, None, flags)


def summarize(rows: list[dict]) -> dict:
    """Run-level metrics from output rows (dicts with task, correct, exact_match, f1, ...).

    Returns counts, per-task accuracy (mean of ``correct`` over the task's graded rows,
    ``n_with_gold``; a fraction in [0, 1]), EM and F1 for QA (means, in [0, 1]), overall
    ``accuracy`` over all graded rows (None when none is graded), the
    low-confidence / fast-path / error counts, ``gold_not_scored``: rows with a gold that
    could not be mapped to a label or option (flagged, not graded), ``draft_rounds``: rows
    per number of adaptive drafting rounds (``{"1": n, "2": n}``; empty when not adaptive),
    ``fallback``: rows answered by the fallback pass, ``fallback_failed``: flagged rows the
    fallback could not answer (they keep their first answer), ``verifier_drafts_deduplicated``:
    verifier forward passes saved by ``verifier.deduplicate_drafts`` (sum of the rows'
    column; 0 when it is off), ``by_mode``: per mode that answered rows (the rows' ``mode``;
    ``speculative``, ``standard``): ``rows``, ``n_with_gold`` and ``accuracy`` (None without gold),
    and each task's ``mode`` in ``by_task``."""
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
        modes = sorted({r["mode"] for r in rows if r.get("task") == task and r.get("mode")})
        if modes:
            t["mode"] = "+".join(modes)
        out["by_task"][task] = t
    out["by_mode"] = {}
    for mode in sorted({r["mode"] for r in rows if r.get("mode")}):
        sub = [r for r in rows if r.get("mode") == mode]
        graded = [r for r in sub if r.get("correct") is not None]
        out["by_mode"][mode] = {"rows": len(sub), "n_with_gold": len(graded),
                                "accuracy": sum(r["correct"] for r in graded) / len(graded) if graded else None}
    graded = [r for r in rows if r.get("correct") is not None]
    out["gold_not_scored"] = sum(1 for r in rows if r.get("correct") is None
                                 and set(GOLD_FLAGS) & set(r.get("flags") or []))
    out["accuracy"] = (sum(r["correct"] for r in graded) / len(graded)) if graded else None
    out["n_with_gold"] = len(graded)
    out["draft_rounds"] = dict(Counter(str(r["draft_rounds"]) for r in rows
                                       if r.get("draft_rounds") is not None))
    out["fallback"] = sum(1 for r in rows if (r.get("answer_source") or "").startswith("fallback"))
    out["fallback_failed"] = sum(1 for r in rows if r.get("fallback_error") is not None)
    out["verifier_drafts_deduplicated"] = sum(r.get("verifier_drafts_deduplicated") or 0 for r in rows)
    return out
