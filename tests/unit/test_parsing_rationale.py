"""Issue 10 item 1: a draft without a rationale β is not a valid draft."""

from specrag_batch.core.parsing import EMPTY_RATIONALE, parse_draft


def test_draft_without_rationale_is_invalid():
    p = parse_draft("\nAnswer: Paris", "qa")
    assert (p.answer, p.rationale, p.valid) == ("Paris", "", False)
    assert EMPTY_RATIONALE in p.flags
    p = parse_draft(" Because of the map.\nAnswer: Paris", "qa")
    assert p.valid and EMPTY_RATIONALE not in p.flags


def test_choice_answer_written_as_letter_is_kept_for_the_verifier():
    p = parse_draft(" Days shorten.\nAnswer: (C)", "choice", choices=["x", "y", "z"])
    assert (p.answer, p.written_answer) == ("z", "(C)")
