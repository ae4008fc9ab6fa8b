import pytest

from specrag_batch.stages.evaluation import (GOLD_NOT_A_LABEL, GOLD_NOT_AN_OPTION, GOLD_OPTION_AMBIGUOUS,
                                      score_row, summarize, token_f1)
from specrag_batch.core.parsing import normalize_answer


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


@pytest.mark.parametrize("answer, gold, expected", [
    ("北京市", "北京", 0.8),                  # Chinese: 2 of 3 characters, as "Beijing city" vs "Beijing"
    ("東京タワー", "東京", 2 * (2 / 5) / (2 / 5 + 1)),  # Japanese kanji and katakana
    ("서울시", "서울", 0.8),                  # Korean syllables (recomposed after NFKD folding)
    ("上海 Tower", "上海", 0.8),              # mixed: a Latin word stays one token
    ("北京", "上海", 0.0),
])
def test_token_f1_gives_cjk_answers_partial_credit_character_by_character(answer, gold, expected):
    assert token_f1(answer, gold) == pytest.approx(expected)
    assert score_row("qa", answer, [gold]).f1 == pytest.approx(expected)


def test_f1_tokens_is_whitespace_split_without_cjk():
    from specrag_batch.stages.evaluation import f1_tokens

    assert f1_tokens("ulm 2 rue de l'eglise") == "ulm 2 rue de l'eglise".split()
    assert f1_tokens("北京 2008") == ["北", "京", "2008"]


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


# --- issue 10 item 6: Unicode folding in answer normalisation (match stays "gold contained in
# the normalised answer", Self-RAG / paper §4.1) ---

@pytest.mark.parametrize("text,expected", [
    ("ETH Zürich", "eth zurich"), ("São Paulo", "sao paulo"), ("Łódź", "lodz"),
    ("København", "kobenhavn"), ("Straße", "strasse"), ("Æsir", "aesir"),
    ("Guns N’ Roses", "guns n roses"), ("“Paris”", "paris"), ("«Paris»", "paris"),
    ("Jean–Paul — Sartre", "jeanpaul sartre"), ("Zu\u00adrich", "zurich"),
    ("ﬁve\u00a0km²", "five km2"),
    ("The  Eiffel-Tower!", "eiffeltower"), ("an Apple", "apple"),  # ASCII: SQuAD as before
])
def test_normalize_answer_folds_unicode(text, expected):
    assert normalize_answer(text) == expected


@pytest.mark.parametrize("answer,gold,expected", [
    ("ETH Zürich", "Zurich", (True, False, pytest.approx(2 / 3))),
    ("Sao Paulo", "São Paulo", (True, True, 1.0)),
    ("Guns N’ Roses", "Guns N' Roses", (True, True, 1.0)),
    ("Guns N' Roses", "Guns N’ Roses", (True, True, 1.0)),
    ("Nicolás Maduro – president", "Nicolas Maduro", (True, False, pytest.approx(0.8))),
    ("Zurich", "ETH Zürich", (False, False, pytest.approx(2 / 3))),  # gold not contained: no match
])
def test_qa_scores_fold_accents_and_typographic_marks(answer, gold, expected):
    r = score_row("qa", answer, [gold])
    assert (r.correct, r.exact_match, r.f1) == expected and r.flags == []


def test_qa_gold_that_squad_normalises_to_nothing_is_not_empty():
    # "A" is an article to SQuAD normalisation: it must neither match every answer that
    # normalises to "" nor be impossible to match
    r = score_row("qa", "The", ["A"])
    assert (r.correct, r.exact_match, r.f1) == (False, False, 0.0)
    r = score_row("qa", "", ["A"])
    assert (r.correct, r.exact_match, r.f1) == (False, False, 0.0)
    r = score_row("qa", "A", ["A"])
    assert (r.correct, r.exact_match, r.f1) == (True, True, 1.0)
    r = score_row("qa", "vitamin A", ["A"])
    assert (r.correct, r.exact_match, r.f1) == (True, False, pytest.approx(2 / 3))
    assert score_row("qa", "Paris", ["A"]).correct is False  # whole words, not the letter in "Paris"


# --- issue 10 item 5: claim gold labels in another spelling ---

LABELS = ["SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO", "DISPUTED"]


@pytest.mark.parametrize("gold", ["NOT ENOUGH INFO", "not enough info", "Not-Enough-Info",
                                  "NOT_ENOUGH_INFO", " not_enough  info "])
def test_claim_gold_in_fever_spelling_matches_label(gold):
    r = score_row("claim", "NOT_ENOUGH_INFO", [gold], labels=LABELS)
    assert (r.correct, r.exact_match, r.f1, r.flags) == (True, True, None, [])
    r = score_row("claim", "SUPPORTS", [gold], labels=LABELS)
    assert (r.correct, r.exact_match, r.flags) == (False, False, [])


def test_claim_gold_outside_the_label_set_is_flagged_not_scored_wrong():
    r = score_row("claim", "SUPPORTS", ["MAYBE"], labels=LABELS)
    assert (r.correct, r.exact_match, r.flags) == (None, None, [GOLD_NOT_A_LABEL])
    # a gold that only mentions a label is not that label
    r = score_row("claim", "SUPPORTS", ["SUPPORTS or REFUTES"], labels=LABELS)
    assert (r.correct, r.flags) == (None, [GOLD_NOT_A_LABEL])
    # one usable gold is enough to score; the unusable one is still flagged
    r = score_row("claim", "REFUTES", ["refutes", "MAYBE"], labels=LABELS)
    assert (r.correct, r.flags) == (True, [GOLD_NOT_A_LABEL])
    # a missing answer is wrong, not ungraded
    assert score_row("claim", None, ["REFUTES"], labels=LABELS).correct is False


def test_claim_without_label_set_compares_label_spellings():
    assert score_row("claim", "NOT_ENOUGH_INFO", ["NOT ENOUGH INFO"]).correct is True
    assert score_row("claim", "REFUTES", ["SUPPORTS"]).correct is False


# --- issue 10 item 3 (gold side): letter and digit golds of multiple choice ---

# ARC-Challenge Mercury_7175875 (letter keys) and a digit-keyed ARC row (labels "1".."4",
# answerKey "2", as in /work/shared/data/selfrag_arc_challenge)
ARC = ["Planetary density will decrease.", "Planetary years will become longer.",
       "Planetary days will become shorter.", "Planetary gravity will become stronger."]
ARC_DIGIT = ["Put the objects in groups.", "Change the height of the ramp.",
             "Choose different objects to roll.", "Record the details of the investigation."]


@pytest.mark.parametrize("gold", ["C", "c", "(C)", "C.", "3", "Planetary days will become shorter.",
                                  "planetary days will become shorter"])
def test_choice_gold_letter_digit_or_text_maps_to_its_option(gold):
    r = score_row("choice", ARC[2], [gold], choices=ARC)
    assert (r.correct, r.exact_match, r.f1, r.flags) == (True, True, None, [])
    r = score_row("choice", ARC[1], [gold], choices=ARC)
    assert (r.correct, r.exact_match, r.flags) == (False, False, [])


def test_choice_gold_a_and_arc_digit_key():
    # gold "A" used to normalise to "" (an article) and could never be correct
    assert score_row("choice", ARC[0], ["A"], choices=ARC).correct is True
    assert score_row("choice", ARC[3], ["A"], choices=ARC).correct is False
    # ARC's digit answerKey is 1-based: "2" is the second option
    assert score_row("choice", ARC_DIGIT[1], ["2"], choices=ARC_DIGIT).correct is True
    assert score_row("choice", ARC_DIGIT[2], ["2"], choices=ARC_DIGIT).correct is False
    assert score_row("choice", None, ["2"], choices=ARC_DIGIT).correct is False


@pytest.mark.parametrize("gold", ["E", "5", "0", "Planetary mass will double."])
def test_choice_gold_that_is_no_option_is_flagged_not_scored_wrong(gold):
    r = score_row("choice", ARC[2], [gold], choices=ARC)
    assert (r.correct, r.exact_match, r.flags) == (None, None, [GOLD_NOT_AN_OPTION])


def test_choice_option_texts_that_look_like_keys():
    # text and key reading name the same option: scored
    opts = ["4", "2", "3", "1"]
    assert score_row("choice", "2", ["2"], choices=opts).correct is True
    assert score_row("choice", "4", ["2"], choices=opts).correct is False
    # ARC-Challenge Mercury_402547: answerKey "C" (the third option) while option A's text is
    # "C" (carbon): the two readings differ, so the gold is flagged and not guessed
    arc = ["C", "NO_{2}", "O_{2}", "CO"]
    for answer in arc:
        r = score_row("choice", answer, ["C"], choices=arc)
        assert (r.correct, r.exact_match, r.flags) == (None, None, [GOLD_OPTION_AMBIGUOUS])
    assert score_row("choice", "O_{2}", ["O_{2}"], choices=arc).correct is True
    numeric = ["2", "4", "6", "8"]
    assert score_row("choice", "4", ["4"], choices=numeric).flags == [GOLD_OPTION_AMBIGUOUS]
    assert score_row("choice", "6", ["6"], choices=numeric).correct is True  # 6 is no key of 4 options
    # options that SQuAD normalisation empties ("A" is an article) stay distinct
    blood = ["A", "B", "AB", "O"]
    assert score_row("choice", "A", ["A"], choices=blood).correct is True
    assert score_row("choice", "O", ["A"], choices=blood).correct is False
    assert score_row("choice", "O", ["D"], choices=blood).correct is True  # letter D = 4th option


def test_gold_flags_reach_the_output_row():
    from specrag_batch.config import RunConfig
    from specrag_batch.run.pipeline import RunInfo, output_row
    from specrag_batch.core.schema import QueryRow

    cfg = RunConfig()
    rows = [QueryRow(0, "c1", "claim", "claim", gold=["MAYBE"]),
            QueryRow(1, "c2", "claim", "claim", gold=["NOT ENOUGH INFO"]),
            QueryRow(2, "m1", "q", "choice", choices=ARC, gold=["E"]),
            QueryRow(3, "m2", "q", "choice", choices=ARC, gold=["B"])]
    recs = [output_row(r, None, cfg, RunInfo("run", "f.parquet")) for r in rows]
    assert [(x["correct"], x["flags"]) for x in recs] == [
        (None, [GOLD_NOT_A_LABEL]), (False, []), (None, [GOLD_NOT_AN_OPTION]), (False, [])]


def test_summarize_counts_rows_whose_gold_could_not_be_scored():
    rows = [{"task": "claim", "correct": None, "answer": "S", "error": None, "gold": ["MAYBE"],
             "flags": [GOLD_NOT_A_LABEL]},
            {"task": "claim", "correct": True, "answer": "S", "error": None, "gold": ["S"], "flags": []}]
    s = summarize(rows)
    assert (s["n_with_gold"], s["accuracy"], s["gold_not_scored"]) == (1, 1.0, 1)
    from specrag_batch.run.manifest import merge_summaries  # run-level metrics in the manifest

    m = merge_summaries([s, summarize(rows[:1])])
    assert (m["n_with_gold"], m["accuracy"], m["gold_not_scored"]) == (1, 1.0, 2)
