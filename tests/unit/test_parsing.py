import pytest

from specrag_batch.core.parsing import (EMPTY, NO_ANSWER_FIELD, NOT_A_CHOICE, NOT_A_LABEL, REPETITION,
                                   TRUNCATED, match_choice, match_label, normalize_answer, parse_draft)

LABELS = ["SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO", "DISPUTED"]
CHOICES = ["Planetary density will decrease.", "Planetary years will become longer.",
           "Planetary days will become shorter.", "Planetary gravity will become stronger."]


def test_rationale_then_answer_with_spans():
    g = " Paris is the capital of France.\nAnswer: Paris."
    p = parse_draft(g, "qa")
    assert (p.answer, p.rationale, p.flags) == ("Paris", "Paris is the capital of France.", [])
    assert g[slice(*p.answer_span)] == "Paris"
    assert g[slice(*p.rationale_span)] == p.rationale


@pytest.mark.parametrize("g", [" x\n**Answer:** Paris", " x\nFinal answer - Paris", " x\nanswer: Paris\nmore"])
def test_answer_field_variants(g):
    assert parse_draft(g, "qa").answer == "Paris"


def test_missing_answer_field_falls_back_to_last_sentence_and_is_flagged():
    p = parse_draft(" It is in Europe. The capital is Paris.", "qa")
    assert p.answer == "The capital is Paris" and p.rationale == "It is in Europe."
    assert p.flags == [NO_ANSWER_FIELD] and p.valid


def test_empty_and_truncated_and_repetition():
    assert parse_draft("   ", "qa").flags == [EMPTY]
    assert not parse_draft("", "qa").valid
    p = parse_draft(" a b c d e f g h " * 6, "qa", finish_reason="length")
    assert TRUNCATED in p.flags and REPETITION in p.flags


def test_claim_answers_map_to_configured_labels():
    assert parse_draft(" r\nAnswer: not enough info", "claim", labels=LABELS).answer == "NOT_ENOUGH_INFO"
    p = parse_draft(" r\nAnswer: maybe", "claim", labels=LABELS)
    assert NOT_A_LABEL in p.flags and not p.valid
    assert match_label("supports or refutes", LABELS) is None  # ambiguous is not a label
    assert match_label("The claim is Refuted? no: REFUTES.", LABELS) == "REFUTES"


@pytest.mark.parametrize("ans,expected", [("C", 2), ("(C)", 2), ("C.", 2), ("C. Planetary days", 2),
                                          ("B) x", 1), ("Planetary days will become shorter", 2)])
def test_choice_answers_map_to_option_text(ans, expected):
    assert match_choice(ans, CHOICES) == CHOICES[expected]


def test_choice_article_is_not_a_letter():
    assert match_choice("A planet", CHOICES) is None
    assert NOT_A_CHOICE in parse_draft(" r\nAnswer: E", "choice", choices=CHOICES).flags


def test_normalize_answer():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("an Apple") == "apple"
