"""Drafter training data filters (paper §3.1): every drop reason of a teacher rationale, the
gold in the drafter's answer format, and the completion parsing back to the gold (pure
functions, no engine; the data step end to end is in tests/engine/test_drafter_training.py)."""

from __future__ import annotations

import pytest

from specrag_batch.drafter_training.filters import (DropReason, answer_text, check_completion,
                                                    check_rationale, complete_sentences, evidence_words,
                                                    strip_restatement)
from specrag_batch.core.schema import Document

LABELS = ["SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO"]
DOCS = [Document("d1", "Eiffel Tower", "The Eiffel Tower stands in Paris and was completed in 1889."),
        Document("d2", "Lyon", "Lyon is a city on the Rhone.")]
QA = dict(task="qa", docs=DOCS, query="Where is the Eiffel Tower?", answer="Paris", gold=["Paris"],
          choices=None, labels=LABELS, min_evidence_words=2)
CLAIM = {**QA, "task": "claim", "query": "The Eiffel Tower was completed in 1889.", "answer": "SUPPORTS",
         "gold": ["SUPPORTS"]}
CHOICE = {**QA, "task": "choice", "answer": "A", "gold": ["Paris"], "choices": ["Paris", "Lyon"]}


def _check(text: str, case: dict, finish_reason: str | None = "stop"):
    return check_rationale(case["task"], text, finish_reason, case["docs"], case["query"], case["answer"],
                           case["gold"], case["choices"], case["labels"], case["min_evidence_words"])


@pytest.mark.parametrize("text,case,finish,reason", [
    (" Document [1] says the tower stands in Paris, completed 1889.", QA, "stop", None),
    ("   ", QA, "stop", DropReason.EMPTY_RATIONALE),
    (" The tower stands in Paris and", QA, "length", DropReason.TRUNCATED_AT_MAX_TOKENS),
    (" " + "the tower stands in Paris since long ago " * 5, QA, "stop", DropReason.REPETITION),
    (" The tower stands in Paris, completed 1889.\nAnswer: Lyon", QA, "stop", DropReason.CONTRADICTS_GOLD),
    (" The tower stands in Lyon, completed 1889.", QA, "stop", DropReason.GOLD_NOT_MENTIONED),
    (" It is Paris.", QA, "stop", DropReason.NO_EVIDENCE),
    (" Document [1] says it stands in Paris; the claim is REFUTES.", CLAIM, "stop", DropReason.CONTRADICTS_GOLD),
    (" Document [1]: the tower stands in Paris, finished 1889.", CLAIM, "stop", None),
    (" Document [2] says Lyon is on the Rhone.", CHOICE, "stop", DropReason.CONTRADICTS_GOLD),
    (" Document [1] says the tower stands in Paris, completed 1889.", CHOICE, "stop", None),
], ids=["kept", "empty", "truncated", "repetition", "own_answer_differs", "gold_not_mentioned",
        "no_evidence", "claim_names_other_label", "claim_kept", "choice_names_other_option", "choice_kept"])
def test_each_rationale_drop_reason(text, case, finish, reason):
    rationale, why = _check(text, case, finish)
    assert why == reason
    assert "\n" not in rationale and rationale == rationale.strip()


@pytest.mark.parametrize("text,trim,want_rationale,reason", [
    (" Document [1] says the tower stands in Paris, completed 1889. It was also", True,
     "Document [1] says the tower stands in Paris, completed 1889.", None),
    (" Document [1] says the tower stands in Paris, completed 1889. It was also", False, None,
     DropReason.TRUNCATED_AT_MAX_TOKENS),
    (" The tower stands in Paris and is 330.5 metres", True, None, DropReason.TRUNCATED_AT_MAX_TOKENS),
    (" It is Paris. Document [1] says the", True, "It is Paris.", DropReason.NO_EVIDENCE),
], ids=["trimmed_kept", "trim_off", "no_sentence_end", "trimmed_then_checked"])
def test_truncated_rationale_keeps_complete_sentences(text, trim, want_rationale, reason):
    rationale, why = check_rationale("qa", text, "length", DOCS, QA["query"], "Paris", ["Paris"], None, LABELS, 2,
                                     trim_truncated=trim)
    assert why == reason
    if want_rationale is not None:
        assert rationale == want_rationale


def test_complete_sentences():
    assert complete_sentences('He said "it is 20.5 m tall." Then') == 'He said "it is 20.5 m tall."'
    assert complete_sentences("No end here 20.5") == ""
    assert complete_sentences("One. Two? Three") == "One. Two?"


def test_evidence_words_leave_out_question_and_answer_words():
    words = evidence_words("The tower stands in Paris, completed 1889.", DOCS, "Where is the Eiffel Tower?", "Paris")
    assert words == {"stands", "completed", "1889"}


@pytest.mark.parametrize("task,gold,choices,want", [
    ("qa", [" ", "Paris "], None, ("Paris", None)),
    ("qa", None, None, (None, DropReason.NO_GOLD)),
    ("claim", ["supports"], None, ("SUPPORTS", None)),
    ("claim", ["MAYBE"], None, (None, DropReason.GOLD_NOT_A_LABEL)),
    ("choice", ["Lyon"], ["Paris", "Lyon"], ("B", None)),
    ("choice", ["b"], ["Paris", "Lyon"], ("B", None)),
    ("choice", ["Nice"], ["Paris", "Lyon"], (None, DropReason.GOLD_NOT_A_CHOICE)),
])
def test_gold_in_the_drafters_answer_format(task, gold, choices, want):
    assert answer_text(task, gold, choices, LABELS) == want


@pytest.mark.parametrize("task,rationale,answer,gold,choices", [
    ("qa", "Document [1] says Paris.", "Paris", ["Paris"], None),
    ("claim", "Document [1] gives the year.", "SUPPORTS", ["SUPPORTS"], None),
    ("choice", "Document [1] says Paris.", "A", ["Paris"], ["Paris", "Lyon"]),
])
def test_completion_parses_back_to_rationale_and_gold(task, rationale, answer, gold, choices):
    assert check_completion(task, rationale, answer, gold, choices, LABELS) == (
        f" {rationale}\nAnswer: {answer}", None)


@pytest.mark.parametrize("rationale", [
    "Document [1].\nAnswer: Lyon",    # its own "Answer:" line: parses to that line's answer
    "**Paris** is named in Document [1].",  # the parser strips the leading "**": another rationale
], ids=["other_answer", "other_rationale"])
def test_completion_that_parses_back_differently_is_dropped(rationale):
    assert check_completion("qa", rationale, "Paris", ["Paris"], None, LABELS) == (
        None, DropReason.COMPLETION_DOES_NOT_PARSE)


# Openings of real teacher rationales (Qwen2.5-Coder-1.5B, /work/train/data-mix, 2026-11-30):
# the drafter learnt to restate the answer before the evidence (paper §3.1: E is the evidence).
@pytest.mark.parametrize("text,task,answer,want", [
    ('The correct answer is "stromal cells" because the passage directly states that when a cell cannot be '
     "regenerated, the body will replace it with stromal connective tissue.", "qa", "Stromal cells",
     "The passage directly states that when a cell cannot be regenerated, the body will replace it with stromal "
     "connective tissue."),
    ("The correct answer is REFUTES because the documents clearly state that humans are warming the planet.",
     "claim", "REFUTES", "The documents clearly state that humans are warming the planet."),
    ("The correct answer is Thomas Jefferson, as evidenced by the following facts in the documents: 1. The "
     "Declaration of Independence was written by Thomas Jefferson.", "qa", "Thomas Jefferson",
     "The Declaration of Independence was written by Thomas Jefferson."),
    ('The correct answer "foster global monetary cooperation" is supported by the information provided in the '
     "documents. The documents mention that the International Monetary Fund (IMF) is a global organization.",
     "qa", "foster global monetary cooperation",
     "The documents mention that the International Monetary Fund (IMF) is a global organization."),
    ('The correct answer "Something to Sing About" is derived from the information provided in the second '
     "document, which states that Jason Paige is best known for singing the first theme song.", "qa",
     "Something to Sing About", "The second document states that Jason Paige is best known for singing the first "
     "theme song."),
    ('The correct answer is Douglas Eric "Doug" Liman because the documents clearly state that Saul Metzstein '
     "was born on 30 December 1970.", "qa", 'Douglas Eric "Doug" Liman',
     "The documents clearly state that Saul Metzstein was born on 30 December 1970."),
    ("The answer is Paris. Document [1] says the tower stands in Paris.", "qa", "Paris",
     "Document [1] says the tower stands in Paris."),
    ("Paris is correct because document [1] says the tower stands there.", "choice", "A",
     "Document [1] says the tower stands there."),
    ("The documents do not provide any information about the temperature of the world about 35 years ago.",
     "claim", "NOT_ENOUGH_INFO",
     "The documents do not provide any information about the temperature of the world about 35 years ago."),
    ("The Carondelet Canal began operating first because it was constructed in 1825.", "qa", "Carondelet Canal",
     "The Carondelet Canal began operating first because it was constructed in 1825."),
], ids=["qa_quoted_because", "claim_label_because", "as_evidenced_by_list", "restating_sentence",
        "derived_from_document_which_states", "answer_with_quotes_because",
        "the_answer_is", "choice_option_is_correct", "evidence_first_unchanged", "answer_as_subject_unchanged"])
def test_strip_restatement_keeps_the_evidence(text, task, answer, want):
    assert strip_restatement(text, task, answer, ["Paris", "Lyon"] if task == "choice" else None) == want


@pytest.mark.parametrize("text,case,want,reason", [
    (" The correct answer is Paris because Document [1] says the tower stands in Paris, completed 1889.", QA,
     "Document [1] says the tower stands in Paris, completed 1889.", None),
    (" The correct answer is SUPPORTS because Document [1]: the tower stands in Paris, finished 1889.", CLAIM,
     "Document [1]: the tower stands in Paris, finished 1889.", None),
    (" The correct answer is Paris.", QA, "", DropReason.NO_EVIDENCE),
], ids=["qa_restated_kept", "claim_restated_kept", "only_restatement"])
def test_rationale_keeps_evidence_without_restated_answer(text, case, want, reason):
    rationale, why = _check(text, case)
    assert (rationale, why) == (want, reason)
