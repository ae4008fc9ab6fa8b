"""Parsing drafter output into (answer α, rationale β), robustly and task-aware.

The drafter's reply is prefilled with ``"Rationale:"`` (see :mod:`specrag_batch.stages.prompts`), so
the generated text is expected as ``" <rationale>\\nAnswer: <answer>"``. Parsing never raises
and never drops a draft: anything unexpected becomes a flag on the draft.
"""

from __future__ import annotations

import re
import string
import unicodedata
from dataclasses import dataclass, field

from .records import Flag, is_valid_draft

ANSWER_RE = re.compile(r"(?im)^\s*(?:\*\*)?\s*(?:final\s+)?answer\s*(?:\*\*)?\s*[:\-]\s*(?:\*\*)?")
LETTERS = string.ascii_uppercase


def option_label(i: int) -> str:
    """Label of the i-th option (0-based): A..Z, then AA, AB, ..., AZ, BA, ... (spreadsheet
    columns), so any number of options has a label.

    Raises:
        ValueError: ``i`` < 0."""
    if i < 0:
        raise ValueError(f"option index must be >= 0, got {i}")
    out = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        out = LETTERS[r] + out
    return out


def option_index(label: str) -> int:
    """Inverse of :func:`option_label` (upper-case letters); -1 for anything else."""
    if not label or not label.isascii() or not label.isalpha() or not label.isupper():
        return -1
    n = 0
    for ch in label:
        n = n * 26 + LETTERS.index(ch) + 1
    return n - 1

# draft flags
NO_ANSWER_FIELD = Flag.NO_ANSWER_FIELD
EMPTY = Flag.EMPTY_DRAFT
EMPTY_ANSWER = Flag.EMPTY_ANSWER
EMPTY_RATIONALE = Flag.EMPTY_RATIONALE
TRUNCATED = Flag.TRUNCATED_AT_MAX_TOKENS
REPETITION = Flag.REPETITION
NOT_A_LABEL = Flag.ANSWER_NOT_A_LABEL
NOT_A_CHOICE = Flag.ANSWER_NOT_A_CHOICE
ANSWER_FORCED = Flag.ANSWER_FORCED
"""Not set by :func:`parse_draft`: the drafting step sets it on a draft whose ``Answer:`` line
it appended after a budget cut (:func:`specrag_batch.stages.drafting.force_answers`)."""


@dataclass
class ParsedDraft:
    """Parsed draft. Spans are half-open character ranges into the *generated* text."""

    answer: str
    rationale: str
    answer_span: tuple[int, int] | None
    rationale_span: tuple[int, int] | None
    flags: list[str] = field(default_factory=list)
    written_answer: str = ""
    """α exactly as the drafter wrote it (e.g. ``B`` for a choice row); the verifier scores
    this, ``answer`` is the canonical form used for the final answer."""

    @property
    def valid(self) -> bool:
        """A draft usable for selection: it has a rationale β and an answer α of the right
        kind (the paper's draft is the pair (α, β))."""
        return is_valid_draft(self.flags)


# Letters NFKD does not decompose (no combining mark to drop), after case folding.
_LATIN_FOLD = str.maketrans({"ø": "o", "đ": "d", "ð": "d", "ł": "l", "ħ": "h", "ŧ": "t", "ı": "i",
                             "æ": "ae", "œ": "oe", "þ": "th"})
_ASCII_PUNCTUATION = frozenset(string.punctuation)


def fold_text(s: str) -> str:
    """Case- and Unicode-folded text: ``casefold`` (``ß`` -> ``ss``), NFKD (ligatures, full-width
    forms, no-break spaces, ``²`` -> ``2``), combining marks and format characters (soft hyphen,
    zero-width space) dropped, typographic quotes and dashes mapped to ASCII, the Latin letters
    NFKD keeps whole (``ø ł đ æ œ ...``) transliterated. ``"ETH Zürich"`` -> ``"eth zurich"``,
    ``"Guns N’ Roses"`` -> ``"guns n' roses"``. Pure function of ``s``; never raises."""
    s = unicodedata.normalize("NFKD", s.casefold())
    s = "".join(ch for ch in s if not unicodedata.combining(ch) and unicodedata.category(ch) != "Cf")
    s = s.translate(_LATIN_FOLD)
    # typographic quotes (Pi/Pf: ‘ ’ “ ” « » ...), dashes (Pd: ‐ – — ...), the minus sign
    return "".join("-" if unicodedata.category(ch) == "Pd" or ch == "\u2212"
                   else "'" if unicodedata.category(ch) in ("Pi", "Pf") or ch in "\u201a\u201e"
                   else ch for ch in s)


def _drop_punctuation(s: str) -> str:
    # ASCII punctuation as SQuAD, plus every Unicode punctuation character (category P*)
    return "".join(ch for ch in s
                   if ch not in _ASCII_PUNCTUATION and not unicodedata.category(ch).startswith("P"))


def normalize_answer(s: str) -> str:
    """SQuAD-style normalisation (the one Self-RAG and the paper's ``match`` use, §4.1) on
    Unicode-folded text (:func:`fold_text`): fold case, accents and typographic marks, drop
    punctuation, the articles a/an/the and extra spaces. On ASCII input identical to SQuAD's
    ``normalize_answer``. May return ``""`` (e.g. for ``"A"``, an article)."""
    s = re.sub(r"\b(a|an|the)\b", " ", _drop_punctuation(fold_text(s)))
    return " ".join(s.split())


def normalize_answer_keep_articles(s: str) -> str:
    """:func:`normalize_answer` without dropping articles: the fallback for a gold or option
    that SQuAD normalisation would empty (``"A"``, ``"The"``)."""
    return " ".join(_drop_punctuation(fold_text(s)).split())


def _strip_span(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start] in " \t\r\n*\"'`":
        start += 1
    while end > start and text[end - 1] in " \t\r\n*\"'`":
        end -= 1
    return start, end


def has_repetition(text: str, n: int = 8, times: int = 4) -> bool:
    """True when some n-word sequence occurs at least ``times`` times (degenerate loop)."""
    words = text.split()
    if len(words) < n * times:
        return False
    counts: dict[tuple[str, ...], int] = {}
    for i in range(len(words) - n + 1):
        g = tuple(words[i:i + n])
        counts[g] = counts.get(g, 0) + 1
        if counts[g] >= times:
            return True
    return False


def label_key(text: str) -> str:
    """The spelling-free form a claim label is compared in: :func:`fold_text` (case, accents,
    typographic dashes), runs of spaces, ``_`` and ``-`` as one space, surrounding quotes and
    ``. ! *`` dropped. ``"NOT ENOUGH INFO"``, ``"not-enough-info"`` and ``"NOT_ENOUGH_INFO"``
    all give ``"not enough info"``."""
    return re.sub(r"[\s_\-]+", " ", fold_text(text).strip()).strip(" .!*\"'")


def canonical_label(text: str, labels: list[str]) -> str | None:
    """The label of ``labels`` whose :func:`label_key` equals ``text``'s, else None (no
    mention search: a gold label must *be* a label, not mention one)."""
    key = label_key(text)
    return next((lab for lab in labels if label_key(lab) == key), None)


def match_label(answer: str, labels: list[str]) -> str | None:
    """Map free text to one of ``labels`` (compared by :func:`label_key`), else None.

    An exact match (:func:`canonical_label`) wins; otherwise the single label mentioned in the
    text (the longest when several overlap, e.g. ``NOT_ENOUGH_INFO`` over ``INFO``)."""
    exact = canonical_label(answer, labels)
    if exact is not None:
        return exact
    a = label_key(answer)
    hits = [lab for lab in labels if re.search(r"\b" + re.escape(label_key(lab)) + r"\b", a)]
    hits = [h for h in hits if not any(h != o and label_key(h) in label_key(o) for o in hits)]
    return hits[0] if len(hits) == 1 else None


def match_choice(answer: str, choices: list[str]) -> str | None:
    """Map an answer to one option text: by label (``C``, ``(C)``, ``C.``, ``C. text``; labels
    beyond Z are ``AA``, ``AB``, ... in upper case, see :func:`option_label`) or by text (the
    same :func:`normalize_answer` text, else the one option whose normalised text the answer
    contains); None when neither decides."""
    a = answer.strip()
    # a bare label ("C", "(C)", "C.", "AB") or a label with a separator ("C. text", "(C) text");
    # not "A planet ..." where "A" is an article. Multi-letter labels only in upper case.
    m = re.match(r"^\(?([A-Za-z]|[A-Z]{2,3})(?:[.):]?$|\)\s|[.:]\s)", a)
    if m:
        idx = option_index(m.group(1).upper())
        if 0 <= idx < len(choices):
            return choices[idx]
    na = normalize_answer(a)
    for c in choices:
        if normalize_answer(c) == na:
            return c
    hits = [c for c in choices if normalize_answer(c) and normalize_answer(c) in na]
    if len(hits) == 1:
        return hits[0]
    return None


def parse_draft(generated: str, task: str, *, labels: list[str] | None = None,
                choices: list[str] | None = None, finish_reason: str | None = None) -> ParsedDraft:
    """Split generated text into rationale and answer, and canonicalise the answer.

    Args:
        generated: the text the drafter generated after the prefilled ``"Rationale:"``.
        task: ``qa`` | ``claim`` | ``choice``.
        labels: the configured claim labels (``claim``).
        choices: the option texts (``choice``).
        finish_reason: vLLM's finish reason; ``"length"`` flags a truncated draft.

    Returns:
        :class:`ParsedDraft`; ``answer`` is canonical: a label for ``claim``, an option text for
        ``choice``, the stripped text for ``qa``. Spans point at the raw text the answer/rationale
        came from (for token log-probs).
    """
    flags: list[str] = []
    if finish_reason == "length":
        flags.append(TRUNCATED)
    if not generated.strip():
        return ParsedDraft("", "", None, None, flags + [EMPTY])  # EMPTY covers the rationale
    if has_repetition(generated):
        flags.append(REPETITION)

    m = ANSWER_RE.search(generated)
    if m:
        r_span = _strip_span(generated, 0, m.start())
        a_end = generated.find("\n", m.end())
        a_end = len(generated) if a_end < 0 else a_end
        a_span = _strip_span(generated, m.end(), a_end)
        while a_span[1] > a_span[0] and generated[a_span[1] - 1] == ".":
            a_span = (a_span[0], a_span[1] - 1)
    else:
        flags.append(NO_ANSWER_FIELD)
        # fall back to the last sentence as the answer; the rest is the rationale
        body = _strip_span(generated, 0, len(generated))
        cut = max(generated.rfind(". ", body[0], body[1] - 1), generated.rfind("\n", body[0], body[1] - 1))
        if cut > body[0]:
            r_span, a_span = _strip_span(generated, body[0], cut + 1), _strip_span(generated, cut + 1, body[1])
        else:
            r_span, a_span = (body[0], body[0]), body
    rationale = generated[r_span[0]:r_span[1]]
    raw_answer = generated[a_span[0]:a_span[1]].strip().rstrip(".").strip()
    answer = raw_answer
    if task == "claim":
        lab = match_label(raw_answer, labels or []) or (
            match_label(generated, labels or []) if NO_ANSWER_FIELD in flags else None)
        if lab is None:
            flags.append(NOT_A_LABEL)
        else:
            answer = lab
    elif task == "choice":
        opt = match_choice(raw_answer, choices or [])
        if opt is None:
            flags.append(NOT_A_CHOICE)
        else:
            answer = opt
    if not answer:
        flags.append(EMPTY_ANSWER)
    if not rationale.strip():
        flags.append(EMPTY_RATIONALE)
    return ParsedDraft(answer, rationale, a_span if a_span[1] > a_span[0] else None,
                       r_span if r_span[1] > r_span[0] else None, flags, raw_answer)
