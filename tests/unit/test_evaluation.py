import pytest

from specrag_batch.evaluation import score_row, summarize, token_f1


def test_qa_match_em_f1():
    r = score_row("qa", "He was a British politician.", ["politician", "political leader"])
    assert r.correct is True and r.exact_match is False and 0 < r.f1 < 1
    r = score_row("qa", "Politician", ["politician"])
    assert (r.correct, r.exact_match, r.f1) == (True, True, 1.0)
    assert score_row("qa", "", ["x"]).correct is False
    assert score_row("qa", "x", None).correct is None


def test_claim_and_choice_accuracy():
    assert score_row("claim", "REFUTES", ["REFUTES"]).correct is True
    assert score_row("claim", "SUPPORTS", ["REFUTES"]).correct is False
    assert score_row("choice", "Planetary days will become shorter.", ["Planetary days will become shorter."]).correct


def test_token_f1():
    assert token_f1("the cat sat", "cat sat down") == pytest.approx(2 * (2 / 2) * (2 / 3) / ((2 / 2) + (2 / 3)))


def test_summarize():
    rows = [{"task": "qa", "correct": True, "exact_match": False, "f1": 0.5, "answer": "a", "error": None},
            {"task": "qa", "correct": False, "exact_match": False, "f1": 0.0, "answer": "b", "error": None},
            {"task": "claim", "correct": True, "exact_match": True, "f1": None, "answer": "S", "error": None,
             "low_confidence": True},
            {"task": "claim", "correct": None, "answer": None, "error": "row 3: bad"}]
    s = summarize(rows)
    assert s["rows"] == 4 and s["answered"] == 3 and s["errors"] == 1 and s["low_confidence"] == 1
    assert s["by_task"]["qa"]["accuracy"] == 0.5 and s["by_task"]["claim"]["accuracy"] == 1.0
    assert s["accuracy"] == pytest.approx(2 / 3)
