"""Which rows and teacher rationales give a training example (paper §3.1), and the example's
completion format.

Every row or rationale that gives none has a :class:`DropReason` (counted in the data manifest
and kept in the data shards with ``drop_reason``; nothing is silently dropped):

* input rows: ``invalid_row`` (validation error), ``no_gold``, ``gold_not_a_label`` /
  ``gold_not_a_choice`` (:func:`answer_text`), ``prompt_too_long``, ``no_documents``;
* rationales (:func:`check_rationale`): ``empty_rationale``, ``truncated_at_max_tokens`` (cut
  by the token budget with no complete sentence to keep; with ``trim_truncated`` a cut
  rationale keeps its complete sentences instead, :func:`complete_sentences`),
  ``repetition``, ``contradicts_gold`` (the teacher's own answer, or the label/option its
  rationale names, differs from the gold), ``gold_not_mentioned`` (QA: no accepted answer in
  the rationale), ``no_evidence`` (fewer than ``min_evidence_words`` content words shared with
  the documents that are not in the question or answer, counted after a leading clause
  restating the answer is removed, :func:`strip_restatement`, counted as ``restated``);
* completions (:func:`check_completion`): ``completion_does_not_parse`` (the completion would
  not parse back to the rationale and the gold).
"""

from __future__ import annotations

import re
from enum import StrEnum

from ..core.parsing import ANSWER_RE, LETTERS, has_repetition, match_label, normalize_answer, parse_draft
from ..core.schema import Document


class DropReason(StrEnum):
    """Why an input row or a teacher rationale gives no training example (``drop_reason``).
    Members are ``str``; the rationale reasons that are also draft flags
    (:class:`specrag_batch.core.records.Flag`) have the same names."""

    INVALID_ROW = "invalid_row"
    NO_GOLD = "no_gold"
    GOLD_NOT_A_LABEL = "gold_not_a_label"
    GOLD_NOT_A_CHOICE = "gold_not_a_choice"
    PROMPT_TOO_LONG = "prompt_too_long"
    NO_DOCUMENTS = "no_documents"
    EMPTY_RATIONALE = "empty_rationale"
    TRUNCATED_AT_MAX_TOKENS = "truncated_at_max_tokens"
    REPETITION = "repetition"
    CONTRADICTS_GOLD = "contradicts_gold"
    GOLD_NOT_MENTIONED = "gold_not_mentioned"
    NO_EVIDENCE = "no_evidence"
    COMPLETION_DOES_NOT_PARSE = "completion_does_not_parse"


_STOP = set("""about above after again against also among because been before being below between
both could does doing down during each from further have having here into itself more most only
other over same should some such than that their theirs them then there these they this those
through under until very were what when where which while whom with would your yours answer
correct document documents rationale claim question evidence states state stated says said""".split())


def answer_text(task: str, gold: list[str] | None, choices: list[str] | None,
                labels: list[str]) -> tuple[str | None, DropReason | None]:
    """The gold in the drafter's answer format: (answer, None) or (None, reason).

    qa: the first accepted answer; claim: the configured label it names; choice: the option
    letter of the gold option text (or the gold letter itself)."""
    golds = [g for g in (gold or []) if g and g.strip()]
    if not golds:
        return None, DropReason.NO_GOLD
    g = golds[0].strip()
    if task == "claim":
        lab = match_label(g, labels)
        return (lab, None) if lab else (None, DropReason.GOLD_NOT_A_LABEL)
    if task == "choice":
        opts = choices or []
        if g in opts:
            return LETTERS[opts.index(g)], None
        if len(g) == 1 and g.upper() in LETTERS[:len(opts)]:
            return g.upper(), None
        return None, DropReason.GOLD_NOT_A_CHOICE
    return g, None


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) >= 4 and w not in _STOP}


def evidence_words(rationale: str, docs: list[Document], query: str, answer: str) -> set[str]:
    """Content words (>= 4 letters, not stop words) of the rationale that occur in the
    documents but not in the question or the answer: the evidence it cites."""
    doc_words = _words(" ".join(f"{d.title} {d.text}" for d in docs))
    return (_words(rationale) & doc_words) - _words(query) - _words(answer)


_SENTENCE_END = re.compile(r"[.!?][\"')\]]*(?=\s|$)")


def complete_sentences(text: str) -> str:
    """``text`` up to and including its last sentence end (``.``, ``!`` or ``?``, optionally
    closed by a quote or bracket, followed by whitespace or the end); ``""`` when it has none.
    A decimal point (``20.5``) is not a sentence end."""
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    return text[:ends[-1]].strip() if ends else ""


_QUOTED = r"(?:\"[^\"]*\"|'[^']*'|[^,.;:]{1,80}?)"
_CONNECTOR = (r"(?:,\s*|\s+)(?:because|since|as evidenced by|as shown by|as)\b\s*"
              r"(?:(?:of\s+)?the\s+following\s+facts(?:\s+in\s+the\s+documents)?\s*:\s*(?:1\.\s*)?)?")
_RESTATE_CLAUSE = re.compile(
    r"^(?:(?:the\s+)?(?:correct|right|final)\s+answer|the\s+answer)\s*(?:is\s*)?:?\s*" + _QUOTED
    + r"(?:\s+is\s+(?:the\s+)?(?:correct|right)(?:\s+answer)?\s*)?" + _CONNECTOR, re.I)
_RESTATE_SOURCE = re.compile(  # "... is derived from <the information in> Document 1, which states that"
    r"^(?:the\s+)?(?:correct|right|final)\s+answer\s*(?:is\s*)?:?\s*" + _QUOTED
    + r"\s+is\s+(?:derived\s+from|based\s+on|supported\s+by)\s+(?:the\s+)?(?:information\s+(?:provided\s+)?in\s+)?"
    r"(?P<src>[^,.;:\"]{1,60}?),?\s+which\s+(?P<verb>states|says|mentions|shows)\b", re.I)
_RESTATE_SENTENCE = re.compile(  # a first sentence; a "quoted" span is skipped whole (never cut inside)
    r"^(?:(?:the\s+)?(?:correct|right|final)\s+answer|the\s+answer)\b(?:[^.!?\"]|\"[^\"]*\")*[.!?](?=\s|$)\s*", re.I)


def strip_restatement(rationale: str, task: str, answer: str, choices: list[str] | None = None) -> str:
    """``rationale`` without a leading clause that restates the answer (paper §3.1: the
    rationale is the evidence for the answer, not the answer again), first letter upper-cased.

    Removed: ``"The correct answer is X because "`` / ``", as "`` / ``"X is correct because "``
    (X = the answer, the label for claims, the option letter or text for choices; quoted or
    not); ``"The correct answer X is derived from Document 1, which states"`` becomes
    ``"Document 1 states"``; else a whole first sentence (a quoted span inside it is skipped
    whole) opening with ``"The (correct) answer ..."`` (``"The answer
    is X."``). Returns ``rationale`` unchanged when it opens otherwise; ``""`` when it was only
    the restatement."""
    choice_text = choices[LETTERS.index(answer)] if task == "choice" and choices else None
    out = _RESTATE_SOURCE.sub(r"\g<src> \g<verb>", rationale, count=1)
    if out == rationale:
        out = _RESTATE_CLAUSE.sub("", rationale, count=1)
    if out == rationale:
        names = [n for n in (answer, choice_text) if n]
        alt = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
        own = re.compile(rf"^[\"']?(?:{alt})[\"']?\s+is\s+(?:the\s+)?(?:correct|right)(?:\s+answer)?"
                         + _CONNECTOR, re.I) if alt else None
        out = own.sub("", rationale, count=1) if own else rationale
    if out == rationale:
        out = _RESTATE_SENTENCE.sub("", rationale, count=1)
    out = out.strip(" ,;:")
    return out[:1].upper() + out[1:] if out != rationale else rationale


def check_rationale(task: str, teacher_text: str, finish_reason: str | None, docs: list[Document],
                    query: str, answer: str, gold: list[str], choices, labels,
                    min_evidence_words: int, trim_truncated: bool = False) -> tuple[str, DropReason | None]:
    """(rationale, drop reason or None) for the teacher's generated text (after the prefill).

    The rationale is the text before any ``Answer:`` line the teacher wrote, on one line.
    ``finish_reason == "length"`` (the teacher hit its token budget): with ``trim_truncated``
    and no ``Answer:`` line yet, the rationale keeps its complete sentences
    (:func:`complete_sentences`) and goes through the other checks, or is
    ``truncated_at_max_tokens`` when none is complete; without it, always dropped.
    A leading clause restating the answer is removed (:func:`strip_restatement`) before the
    evidence check; the contradiction and gold checks read the whole rationale."""
    m = ANSWER_RE.search(teacher_text)
    rationale = " ".join((teacher_text[:m.start()] if m else teacher_text).split()).strip(" *")
    if not rationale:
        return rationale, DropReason.EMPTY_RATIONALE
    if finish_reason == "length":
        kept = complete_sentences(rationale) if trim_truncated and not m else ""
        if not kept:
            return rationale, DropReason.TRUNCATED_AT_MAX_TOKENS
        rationale = kept
    if has_repetition(rationale):
        return rationale, DropReason.REPETITION
    if m:  # the teacher wrote its own answer: it must be the gold
        own = parse_draft(teacher_text, task, labels=labels, choices=choices)
        if own.answer and not _same_answer(task, own.answer, answer, gold, choices):
            return rationale, DropReason.CONTRADICTS_GOLD
    if task == "claim":
        named = match_label(rationale, labels)
        if named is not None and named != answer:
            return rationale, DropReason.CONTRADICTS_GOLD
    elif task == "choice":
        gold_opt = choices[LETTERS.index(answer)]
        named = [c for c in choices if normalize_answer(c) and normalize_answer(c) in normalize_answer(rationale)]
        if named and gold_opt not in named:
            return rationale, DropReason.CONTRADICTS_GOLD
    elif not any(normalize_answer(g) and normalize_answer(g) in normalize_answer(rationale) for g in gold):
        return rationale, DropReason.GOLD_NOT_MENTIONED
    # the checks above read the teacher's whole rationale; the kept one is its evidence
    rationale = strip_restatement(rationale, task, answer, choices)
    if not rationale or len(evidence_words(rationale, docs, query, answer)) < min_evidence_words:
        return rationale, DropReason.NO_EVIDENCE
    return rationale, None


def _same_answer(task: str, parsed: str, answer: str, gold: list[str], choices) -> bool:
    if task == "choice":
        return parsed == choices[LETTERS.index(answer)]
    if task == "claim":
        return parsed == answer
    return any(normalize_answer(parsed) == normalize_answer(g) for g in gold)


def completion_text(rationale: str, answer: str) -> str:
    """The drafter's target after the prefilled ``"Rationale:"`` (see :mod:`~specrag_batch.core.parsing`)."""
    return f" {rationale}\nAnswer: {answer}"


def check_completion(task: str, rationale: str, answer: str, gold: list[str] | None, choices,
                     labels) -> tuple[str | None, DropReason | None]:
    """(completion, None) when :func:`completion_text` parses back
    (:func:`specrag_batch.core.parsing.parse_draft`, as inference parses a draft) to ``rationale``
    and an answer equal to the gold; else (None, ``completion_does_not_parse``)."""
    completion = completion_text(rationale, answer)
    back = parse_draft(completion, task, labels=labels, choices=choices)
    if back.valid and back.rationale == rationale and _same_answer(task, back.answer, answer, gold or [], choices):
        return completion, None
    return None, DropReason.COMPLETION_DOES_NOT_PARSE
